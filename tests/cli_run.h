// Runs the qmvlab executable for end-to-end tests: exit code and output, and the
// one-clear-line error check every subcommand must pass.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <string>
#include <unistd.h>

namespace qmv::testing {

struct CliRun {
  int code;
  std::string output;  // stdout and stderr together
};

// `program` (a path) with `args` through the shell.
inline CliRun run_program(const std::string& program, const std::string& args) {
  const std::string cmd = program + " " + args + " 2>&1";
  CliRun r{-1, {}};
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return r;
  std::array<char, 4096> buf{};
  while (fgets(buf.data(), buf.size(), p)) r.output += buf.data();
  const int status = pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

inline CliRun qmvlab(const std::string& args) { return run_program(QMVLAB_EXE, args); }

// A folder of this process's own: ctest runs every test as a separate process, in
// parallel, and two of them writing one path (a model made with another seed) collide.
inline std::string tmp(const std::string& name) {
  const std::string dir = std::string(QMV_TEST_TMP) + "/cli/" + std::to_string(getpid());
  std::filesystem::create_directories(dir);
  return dir + "/" + name;
}

inline int count_lines(const std::string& s, const std::string& needle) {
  int n = 0;
  for (auto pos = s.find(needle); pos != std::string::npos; pos = s.find(needle, pos + 1)) ++n;
  return n;
}

inline void expect_error(const std::string& args, const std::string& message) {
  const CliRun r = qmvlab(args);
  EXPECT_EQ(r.code, 2) << args << "\n" << r.output;
  EXPECT_NE(r.output.find(message), std::string::npos) << args << "\n" << r.output;
  // One clear line, not a stack of noise.
  EXPECT_LE(count_lines(r.output, "\n"), 3) << r.output;
}

}  // namespace qmv::testing
