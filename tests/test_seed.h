// Seeds for the tests' random inputs: fresh on every run, printed, and replayable.
// Every seed a test draws derives from one test seed, drawn at its first draw or read
// from QMV_TEST_SEED; a failing test prints it, and QMV_TEST_SEED=<it> replays the test.
#pragma once

#include <cstdint>

namespace qmv::testing {

inline constexpr const char* kTestSeedEnv = "QMV_TEST_SEED";

// The next seed of the running test, in [1, 2^31 - 1] (a valid seed for every consumer:
// std::mt19937, make-model --seed), printed with `what` it is for.
std::uint64_t fresh_seed(const char* what = "inputs");

}  // namespace qmv::testing
