// Text quoted from input (a file, the command line) into a one-line message: its control
// characters as escapes, so that a refusal stays one line whatever it quotes.
#pragma once

#include <string>
#include <string_view>

namespace qmv {

// `text` with "\n", "\r", "\t" and other control characters as "\x01".
std::string one_line(std::string_view text);

}  // namespace qmv
