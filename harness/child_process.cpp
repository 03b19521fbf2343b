#include "harness/child_process.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <thread>

extern char** environ;

namespace qmv {
namespace {

std::string signal_name(int sig) {
  switch (sig) {
    case SIGSEGV: return "SIGSEGV";
    case SIGBUS: return "SIGBUS";
    case SIGILL: return "SIGILL";
    case SIGFPE: return "SIGFPE";
    case SIGABRT: return "SIGABRT";
    case SIGTRAP: return "SIGTRAP";
    case SIGKILL: return "SIGKILL";
    case SIGTERM: return "SIGTERM";
    case SIGINT: return "SIGINT";
  }
  return strsignal(sig);
}

}  // namespace

std::string ChildEnd::describe() const {
  switch (how) {
    case How::Exited: return fmt::format("exited with status {}", code);
    case How::Signalled: return fmt::format("was killed by signal {} ({})", code, signal_name(code));
    case How::TimedOut: return fmt::format("was still running after its {:g} s limit (killed)", limit_s);
  }
  return {};
}

ChildEnd run_child(const std::vector<std::string>& argv, double limit_s, const std::string& log) {
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  if (log.empty()) {
    posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
  } else {
    posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  }
  // What this process printed must come before what the child prints to the shared stderr.
  std::fflush(stdout);
  std::fflush(stderr);
  pid_t pid = 0;
  const int err = posix_spawnp(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (err != 0) throw std::runtime_error(fmt::format("cannot start {}: {}", argv[0], std::strerror(err)));

  ChildEnd end;
  end.limit_s = limit_s;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(limit_s);
  int status = 0;
  for (;;) {
    const pid_t done = waitpid(pid, &status, WNOHANG);
    if (done == pid) break;
    if (done < 0 && errno != EINTR) throw std::runtime_error(fmt::format("waiting for {}: {}", argv[0], std::strerror(errno)));
    if (limit_s > 0 && std::chrono::steady_clock::now() >= deadline) {
      // A hung GPU kernel does not answer a polite signal.
      kill(pid, SIGKILL);
      while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
      end.how = ChildEnd::How::TimedOut;
      return end;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (WIFSIGNALED(status)) {
    end.how = ChildEnd::How::Signalled;
    end.code = WTERMSIG(status);
  } else {
    end.code = WEXITSTATUS(status);
  }
  return end;
}

std::string self_executable() { return std::filesystem::read_symlink("/proc/self/exe").string(); }

}  // namespace qmv
