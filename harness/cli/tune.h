// `qmvlab tune`: the fastest kernel plan for a model within an accuracy budget, and
// its decode speed against the default plan, measured in the same run.
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <string>

namespace qmv {

class TuneCommand {
 public:
  explicit TuneCommand(CLI::App& app);
  ~TuneCommand();
  bool chosen() const;
  // Returns the exit code; errors are thrown.
  int run() const;

 private:
  struct Options;
  std::unique_ptr<Options> o_;
};

}  // namespace qmv
