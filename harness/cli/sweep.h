// `qmvlab sweep` (run an experiment file, one CSV row per point, resumable and
// shardable) and `qmvlab merge` (join shard CSVs into one).
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <string>

namespace qmv {

class SweepCommand {
 public:
  explicit SweepCommand(CLI::App& app);
  ~SweepCommand();
  // True when the command line chose `sweep` or `merge`.
  bool chosen() const;
  // Runs the chosen one; returns the exit code (1 when a point failed its check or its
  // run). Errors are thrown as exceptions.
  int run(const std::string& command_line) const;

 private:
  struct Options;
  std::unique_ptr<Options> o_;
};

// `qmvlab report` of a sweep CSV: one table row per point.
void print_sweep_report(const std::string& path);

}  // namespace qmv
