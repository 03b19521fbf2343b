#include "harness/table.h"

#include <fmt/format.h>

#include <algorithm>

namespace qmv {

void print_table(const std::vector<std::string>& header, const std::vector<std::vector<std::string>>& rows) {
  std::vector<std::size_t> w(header.size());
  for (std::size_t c = 0; c < header.size(); ++c) {
    w[c] = header[c].size();
    for (const auto& r : rows) w[c] = std::max(w[c], r[c].size());
  }
  auto line = [&](const std::vector<std::string>& r) {
    std::string s = "|";
    for (std::size_t c = 0; c < r.size(); ++c) s += " " + r[c] + std::string(w[c] - r[c].size(), ' ') + " |";
    fmt::print("{}\n", s);
  };
  line(header);
  std::string sep = "|";
  for (auto x : w) sep += std::string(x + 2, '-') + "|";
  fmt::print("{}\n", sep);
  for (const auto& r : rows) line(r);
}

}  // namespace qmv
