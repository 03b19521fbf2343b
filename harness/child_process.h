// Running another program to its end or to a time limit, and saying how it ended: what
// lets a crash, a hang or a lost CUDA context cost one child instead of the whole run.
#pragma once

#include <string>
#include <vector>

namespace qmv {

struct ChildEnd {
  enum class How { Exited, Signalled, TimedOut };
  How how = How::Exited;
  int code = 0;  // the exit status, or the signal that ended it
  double limit_s = 0;
  bool ok() const { return how == How::Exited && code == 0; }
  // "exited with status 3", "was killed by signal 11 (SIGSEGV)", "was still running after
  // its 5 s limit (killed)": what follows "its process".
  std::string describe() const;
};

// Runs argv[0] (a path, or a name looked up in PATH) with argv: its standard output
// discarded and its standard error this process's, or, with `log`, both written to that
// file; kills it (SIGKILL) once it has run limit_s seconds (0: no limit). Throws
// std::runtime_error when it cannot be started.
ChildEnd run_child(const std::vector<std::string>& argv, double limit_s, const std::string& log = {});

// The path of this process's own executable (/proc/self/exe).
std::string self_executable();

}  // namespace qmv
