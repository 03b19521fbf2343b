// `qmvlab compare A.csv B.csv`: two results CSVs side by side, the ratio per matched
// row and their geometric mean.
#pragma once

#include <CLI/CLI.hpp>
#include <memory>

namespace qmv {

class CompareCommand {
 public:
  explicit CompareCommand(CLI::App& app);
  ~CompareCommand();
  // True when the command line chose `compare`.
  bool chosen() const;
  // Runs it; returns the exit code. Bad input is thrown as CompareError.
  int run() const;

 private:
  struct Options;
  std::unique_ptr<Options> o_;
};

}  // namespace qmv
