// The callgrind half of the performance gate: regressions against the baseline, the
// baseline file, determinism across processes, and a deliberately slowed kernel
// (test.q4_K.slowed: q4_K.cpu.avx2_f32 run eight times) that must fail while the
// kernel it wraps passes.
#include "harness/instructions.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <random>

#include "kernels/registry.h"
#include "tests/cli_run.h"
#include "tests/skips.h"
#include "tests/test_seed.h"

namespace qmv {
namespace {

InstructionCount count(const std::string& kernel, double per_byte) {
  return {kernel, {64, 4096}, per_byte * 147456, 147456};
}

TEST(InstructionGate, GrowthBeyondTheToleranceIsNamed) {
  std::mt19937 rng(qmv::testing::fresh_seed());
  const double base = std::uniform_real_distribution<double>(0.3, 30.0)(rng);
  const std::vector<InstructionCount> baseline = {count("a", base), count("b", base), count("c", base)};
  // a: 2% more, within 3%; b: 5% more; c: fewer; d: no baseline.
  const std::vector<InstructionCount> now = {count("a", base * 1.02), count("b", base * 1.05),
                                             count("c", base * 0.5), count("d", base)};
  std::vector<std::string> missing;
  const auto failures = instruction_regressions(now, baseline, 0.03, &missing);
  ASSERT_EQ(failures.size(), 1u);
  EXPECT_EQ(failures[0].rfind("b 64x4096:", 0), 0u) << failures[0];
  EXPECT_NE(failures[0].find(fmt::format("baseline {:.3f}", base)), std::string::npos) << failures[0];
  EXPECT_EQ(missing, std::vector<std::string>{"d"});
}

TEST(InstructionGate, BaselineRoundTrips) {
  const std::string path = std::string(QMV_TEST_TMP) + "/instructions/baseline.csv";
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::mt19937 rng(qmv::testing::fresh_seed());
  std::vector<InstructionCount> counts;
  for (int i = 0; i < 5; ++i)
    counts.push_back({"k" + std::to_string(i), {1 + i, 256 * (i + 1)},
                      std::floor(std::uniform_real_distribution<double>(1e4, 1e8)(rng)), 1000.0 * (i + 1)});
  write_instruction_baseline(path, counts, "valgrind-test");
  const auto back = read_instruction_baseline(path);
  ASSERT_EQ(back.size(), counts.size());
  for (std::size_t i = 0; i < back.size(); ++i) {
    EXPECT_EQ(back[i].kernel, counts[i].kernel);
    EXPECT_EQ(back[i].shape, counts[i].shape);
    EXPECT_EQ(back[i].instructions, counts[i].instructions);
    EXPECT_EQ(back[i].weight_bytes, counts[i].weight_bytes);
  }
  EXPECT_THROW(read_instruction_baseline(path + ".missing"), std::runtime_error);
}

TEST(InstructionGate, PointsRoundTripAndBadOnesAreNamed) {
  const std::vector<InstructionPoint> points = {{global_registry().find("q4_K.cpu.scalar_f32"), {3, 512}},
                                                {global_registry().find("f16.cpu.scalar"), {67, 7}}};
  const auto back = parse_points(format_points(points));
  ASSERT_EQ(back.size(), 2u);
  EXPECT_EQ(back[1].first, points[1].first);
  EXPECT_EQ(back[1].second, points[1].second);
  EXPECT_THROW(parse_points("no.such.kernel@3x512"), std::runtime_error);
  EXPECT_THROW(parse_points("q4_K.cpu.scalar_f32"), std::runtime_error);
}

TEST(InstructionGate, BadGateInputIsOneLineAndExitTwo) {
  // The child subcommand only makes sense under callgrind; its points are checked.
  testing::expect_error("gate-callgrind-child --points q4_K.cpu.scalar_f32@64x4096", "runs under valgrind only");
  testing::expect_error("gate " + std::string(QMV_SOURCE_DIR) + "/experiments/ci.toml --instructions-shape 64x4096,8x256",
                        "--instructions-shape takes one shape");
}

TEST(InstructionGate, CountsAreDeterministicAndASlowedKernelFails) {
  if (valgrind_version().empty())
    QMV_SKIP_UNLESS_CI("valgrind not installed: the instruction counts and their gate are not tested");
  const KernelSpec* fast = global_registry().find("q4_K.cpu.avx2_f32");
  const KernelSpec* slowed = global_registry().find("test.q4_K.slowed");
  ASSERT_NE(slowed, nullptr);
  const Shape shape{64, 4096};
  const std::vector<InstructionPoint> points = {{fast, shape}, {slowed, shape}};
  const std::string dir = std::string(QMV_TEST_TMP) + "/instructions/run";
  const auto first = count_instructions({QMV_CALLGRIND_CHILD, format_points(points)}, points, dir + "1");
  const auto second = count_instructions({QMV_CALLGRIND_CHILD, format_points(points)}, points, dir + "2");
  ASSERT_EQ(first.size(), 2u);
  ASSERT_EQ(second.size(), 2u);
  // Two processes, the same instructions to the last one.
  EXPECT_EQ(first[0].instructions, second[0].instructions);
  EXPECT_EQ(first[1].instructions, second[1].instructions);
  // Both recorded at the fast kernel's figure: the slowed one, 8x the work, fails.
  const std::vector<InstructionCount> baseline = {{fast->name, shape, first[0].instructions, first[0].weight_bytes},
                                                  {slowed->name, shape, first[0].instructions, first[0].weight_bytes}};
  const auto failures = instruction_regressions(second, baseline, 0.03);
  ASSERT_EQ(failures.size(), 1u);
  EXPECT_EQ(failures[0].rfind("test.q4_K.slowed 64x4096:", 0), 0u) << failures[0];
  EXPECT_GT(second[1].instructions, 7.0 * second[0].instructions);
}

}  // namespace
}  // namespace qmv
