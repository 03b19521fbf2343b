// Environment variables set (or unset) for one test, and restored after it: what a
// process started by the test (or current_context()) sees.
#pragma once

#include <cstdlib>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace qmv::testing {

class ScopedEnv {
 public:
  // Each name is set to its value, or unset for std::nullopt.
  explicit ScopedEnv(const std::vector<std::pair<std::string, std::optional<std::string>>>& vars) {
    for (const auto& [name, value] : vars) {
      const char* old = std::getenv(name.c_str());
      saved_.emplace_back(name, old ? std::optional<std::string>(old) : std::nullopt);
      assign(name, value);
    }
  }
  ~ScopedEnv() {
    for (auto it = saved_.rbegin(); it != saved_.rend(); ++it) assign(it->first, it->second);
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  static void assign(const std::string& name, const std::optional<std::string>& value) {
    if (value)
      setenv(name.c_str(), value->c_str(), 1);
    else
      unsetenv(name.c_str());
  }
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

// No Slurm job around: the variables a Slurm job sets, unset.
inline std::vector<std::pair<std::string, std::optional<std::string>>> no_slurm_job() {
  return {{"SLURM_JOB_ID", std::nullopt},
          {"SLURM_ARRAY_JOB_ID", std::nullopt},
          {"SLURM_ARRAY_TASK_ID", std::nullopt},
          {"SLURMD_NODENAME", std::nullopt}};
}

}  // namespace qmv::testing
