// `qmvlab decode` (generate text with a kernel plan, report tokens/s, the per-op time
// breakdown and the roofline) and `qmvlab logits` (the logits at every position of a
// token sequence, for comparison with the reference forward pass).
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <string>

namespace qmv {

class DecodeCommand {
 public:
  explicit DecodeCommand(CLI::App& app);
  ~DecodeCommand();
  // True when the command line chose `decode` or `logits`.
  bool chosen() const;
  // Runs the chosen one; returns the exit code. Errors are thrown as exceptions.
  int run(const std::string& command_line) const;

 private:
  struct Options;
  std::unique_ptr<Options> o_;
};

}  // namespace qmv
