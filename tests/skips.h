// Skips that say what was not tested and why (tests/README.md). A skip whose cause CI's
// machine removes (a tool, a baseline or a compiler feature it provides) fails when
// CI=true; one the hardware decides (no GPU, a CPU without AVX-512) stays a skip.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/cpu_features.h"
#include "kernels/kernel.h"

namespace qmv::testing {

inline bool in_ci() {
  const char* ci = std::getenv("CI");
  return ci != nullptr && std::string_view(ci) == "true";
}

// The kernels of `kernels` this CPU runs (under the ISA mask). The others are named in
// `not_run` with the features they lack, as a line a test ends with when it is not
// empty: `if (!not_run.empty()) GTEST_SKIP() << not_run;`.
inline std::vector<const KernelSpec*> runnable_here(const std::vector<const KernelSpec*>& kernels,
                                                    std::string& not_run) {
  std::vector<const KernelSpec*> runnable;
  std::string names;
  for (const KernelSpec* k : kernels) {
    if (const std::uint32_t missing = missing_cpu_features(k->cpu_features); missing != 0)
      names += (names.empty() ? "" : ", ") + k->name + " (" + cpu_feature_names(missing) + ")";
    else
      runnable.push_back(k);
  }
  not_run = names.empty() ? "" : "not run, this CPU lacks what they need: " + names;
  return runnable;
}

}  // namespace qmv::testing

// Ends the test as skipped with `why` (what was not tested and the reason); with CI=true
// it fails instead, since CI's machine is meant to have what was missing.
#define QMV_SKIP_UNLESS_CI(why)                                                       \
  do {                                                                                \
    if (::qmv::testing::in_ci()) FAIL() << "not tested, and CI=true requires it: " << why; \
    GTEST_SKIP() << why;                                                              \
  } while (0)
