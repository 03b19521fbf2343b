// `qmvlab accuracy`: every kernel's end-to-end NMSE on Gaussian activations and on
// activations with outlier channels, with and without outlier routing, as a CSV and
// tables; `--cost`: what routing costs (the outlier test against the matvec it
// guards, the f32 sibling against the int8 kernel, false positives on Gaussian
// vectors). See harness/accuracy.h.
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <string>

namespace qmv {

class AccuracyCommand {
 public:
  explicit AccuracyCommand(CLI::App& app);
  ~AccuracyCommand();
  bool chosen() const;
  // Returns the exit code (1 when nothing could be measured); errors are thrown.
  int run(const std::string& command_line) const;

 private:
  struct Options;
  std::unique_ptr<Options> o_;
};

}  // namespace qmv
