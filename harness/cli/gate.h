// `qmvlab gate EXP.toml`: the regression gate. Correctness: every available kernel
// of the experiment passes the check on its shapes. Performance: every kernel's speed
// as a ratio to its type's scalar reference, timed interleaved, against a baseline.
#pragma once

#include <CLI/CLI.hpp>
#include <memory>

namespace qmv {

class GateCommand {
 public:
  explicit GateCommand(CLI::App& app);
  ~GateCommand();
  bool chosen() const;
  // 0: passed, 1: a kernel failed the check or regressed; errors are thrown.
  int run() const;

 private:
  struct Options;
  std::unique_ptr<Options> o_;
};

}  // namespace qmv
