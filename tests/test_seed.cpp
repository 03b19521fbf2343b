#include "tests/test_seed.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>

namespace qmv::testing {
namespace {

// The running test's seed and how many seeds it has drawn from it.
struct TestSeed {
  std::optional<std::uint64_t> seed;
  std::uint64_t draws = 0;
};
TestSeed& current() {
  static TestSeed s;
  return s;
}

std::uint64_t seed_from_environment_or_fresh() {
  if (const char* env = std::getenv(kTestSeedEnv); env != nullptr && *env != '\0') {
    std::size_t used = 0;
    const std::uint64_t s = std::stoull(env, &used);
    if (used != std::string(env).size()) throw std::invalid_argument(std::string(kTestSeedEnv) + ": not a number: " + env);
    return s;
  }
  return (std::uint64_t(std::random_device{}()) << 32) | std::random_device{}();
}

// splitmix64: seeds that differ in one bit give unrelated streams.
std::uint64_t mix(std::uint64_t z) {
  z += 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

class SeedReport : public ::testing::EmptyTestEventListener {
  void OnTestStart(const ::testing::TestInfo&) override { current() = {}; }
  void OnTestEnd(const ::testing::TestInfo& info) override {
    if (info.result()->Failed() && current().seed)
      std::printf("[ seed     ] %s.%s failed with test seed %llu: replay it with %s=%llu\n", info.test_suite_name(),
                  info.name(), static_cast<unsigned long long>(*current().seed), kTestSeedEnv,
                  static_cast<unsigned long long>(*current().seed));
  }
};

[[maybe_unused]] const bool registered = [] {
  ::testing::UnitTest::GetInstance()->listeners().Append(new SeedReport);
  return true;
}();

}  // namespace

std::uint64_t fresh_seed(const char* what) {
  TestSeed& t = current();
  if (!t.seed) t.seed = seed_from_environment_or_fresh();
  const std::uint64_t seed = mix(*t.seed + t.draws++) % 0x7fffffffULL + 1;
  std::printf("[ seed     ] %s: %llu (test seed %llu)\n", what, static_cast<unsigned long long>(seed),
              static_cast<unsigned long long>(*t.seed));
  return seed;
}

}  // namespace qmv::testing
