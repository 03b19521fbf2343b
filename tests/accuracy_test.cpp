// The accuracy measurements (harness/accuracy.h) and `qmvlab accuracy`: outlier
// channels cost an int8 kernel accuracy and not an f32 one; routing gives the int8
// kernel its f32 sibling's figure on outlier vectors and changes nothing on Gaussian
// ones; the CSV, the cost mode and the errors.
#include "harness/accuracy.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>

#include "kernels/registry.h"
#include "tests/cli_run.h"
#include "tests/test_seed.h"

namespace qmv {
namespace {

using testing::CliRun;
using testing::expect_error;
using testing::qmvlab;
using testing::tmp;

using testing::fresh_seed;

TEST(Accuracy, OutliersCostInt8ActivationsAndRoutingRecoversTheF32Figure) {
  // The integer reference kernels, so the test runs on any x86 CPU.
  const std::vector<const KernelSpec*> kernels = {global_registry().find("q4_K.cpu.scalar_q8k"),
                                                  global_registry().find("q4_K.cpu.scalar_f32")};
  ASSERT_NE(kernels[0], nullptr);
  ASSERT_NE(kernels[1], nullptr);
  AccuracyConfig cfg;
  cfg.channels = {2};
  cfg.multipliers = {50};
  // Nine trials: with three, about one seed in a hundred draws outlier vectors whose
  // median costs no more than the Gaussian ones'.
  cfg.trials = 9;
  cfg.threads = 2;
  cfg.seed = fresh_seed();
  const AccuracyOutcome out = run_accuracy(kernels, {{64, 2048}}, cfg);
  EXPECT_TRUE(out.skipped.empty());
  ASSERT_EQ(out.results.size(), 4u);  // 2 kernels x (gaussian, 2ch@50x)
  std::map<std::string, const AccuracyResult*> by;
  for (const auto& r : out.results) by[r.spec->name + " " + to_string(r.outlier_case)] = &r;
  const AccuracyResult& int8_g = *by.at("q4_K.cpu.scalar_q8k gaussian");
  const AccuracyResult& int8_o = *by.at("q4_K.cpu.scalar_q8k 2ch@50x");
  const AccuracyResult& f32_g = *by.at("q4_K.cpu.scalar_f32 gaussian");
  const AccuracyResult& f32_o = *by.at("q4_K.cpu.scalar_f32 2ch@50x");
  ASSERT_EQ(int8_o.nmse.size(), 9u);

  // Int8: ~5e-5 on Gaussian vectors (the check's figure), several times that with two
  // channels at 50x the rms (their blocks' step grows 50/4 = 12x).
  EXPECT_GT(median_of(int8_g.nmse), 1e-6);
  EXPECT_LT(median_of(int8_g.nmse), 5e-3);
  EXPECT_GT(median_of(int8_o.nmse), 3 * median_of(int8_g.nmse));
  // F32 activations: float rounding either way, far below int8.
  EXPECT_LT(median_of(f32_g.nmse), 1e-10);
  EXPECT_LT(median_of(f32_o.nmse), 1e-10);
  EXPECT_LT(median_of(f32_o.nmse), 1e-4 * median_of(int8_o.nmse));

  // Routing: the outlier vectors trip k = 8 and take the sibling's figure; Gaussian
  // vectors do not trip and keep their own.
  ASSERT_NE(int8_o.sibling, nullptr);
  EXPECT_EQ(int8_o.sibling->act, ActFormat::F32);
  EXPECT_EQ(f32_o.sibling, nullptr);
  for (int t = 0; t < 9; ++t) {
    EXPECT_TRUE(int8_o.tripped[t]);
    EXPECT_GT(int8_o.peak_to_rms[t], 8.0);
    EXPECT_LT(int8_o.routed_nmse[t], 1e-10);
    EXPECT_FALSE(int8_g.tripped[t]);
    EXPECT_EQ(int8_g.routed_nmse[t], int8_g.nmse[t]);
  }
}

// Fields of one CSV line (quoted fields may hold commas).
std::vector<std::string> csv_fields(const std::string& line) {
  std::vector<std::string> out(1);
  bool quoted = false;
  for (std::size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quoted && c == '"' && i + 1 < line.size() && line[i + 1] == '"') {
      out.back() += '"';
      ++i;
    } else if (c == '"') {
      quoted = !quoted;
    } else if (c == ',' && !quoted) {
      out.emplace_back();
    } else {
      out.back() += c;
    }
  }
  return out;
}

TEST(AccuracyCli, WritesTheTableAndACsvRowPerKernelShapeAndCase) {
  const std::string csv = tmp("accuracy.csv");
  std::filesystem::remove(csv);
  const CliRun r = qmvlab(fmt::format("accuracy --kernels 'q4_K.cpu.scalar_q8k,q4_K.cpu.scalar_f32' --shapes 32x512,16x768 "
                                      "--channels 1,3 --scales 20,40 --trials 2 --seed {} --out {}",
                                      fresh_seed(), csv));
  ASSERT_EQ(r.code, 0) << r.output;
  for (const char* text : {"trial 2/2 done", "[1] q4_K.cpu.scalar_f32 ", "gaussian", "3ch@40x", "| q4_K.cpu.scalar_q8k ",
                           "with outlier routing at k = 8", "wrote "})
    EXPECT_NE(r.output.find(text), std::string::npos) << text << "\n" << r.output;
  std::ifstream in(csv);
  std::string line;
  std::getline(in, line);
  const std::vector<std::string> header = csv_fields(line);
  std::map<std::string, std::size_t> col;
  for (std::size_t i = 0; i < header.size(); ++i) col[header[i]] = i;
  for (const char* c : {"kernel", "rows", "cols", "activation", "outlier_channels", "outlier_x_rms",
                        "nmse_e2e_median", "tripped_share", "routed_to", "nmse_e2e_routed_median", "machine",
                        "command"})
    ASSERT_TRUE(col.count(c)) << c;
  int rows = 0;
  while (std::getline(in, line)) {
    const auto f = csv_fields(line);
    ASSERT_EQ(f.size(), header.size()) << line;
    ++rows;
    const bool int8 = f[col["kernel"]] == "q4_K.cpu.scalar_q8k";
    EXPECT_EQ(f[col["routed_to"]].empty(), !int8) << line;
    if (f[col["activation"]] == "outliers") {
      EXPECT_EQ(f[col["tripped_share"]], "1.0000") << line;
    }
    EXPECT_GE(std::stod(f[col["nmse_e2e_median"]]), 0.0);
  }
  EXPECT_EQ(rows, 2 * 2 * 5);  // kernels x shapes x (gaussian + 2 x 2 cases)
}

TEST(AccuracyCli, CostModeTimesTheTestAndCountsFalsePositives) {
  const CliRun r = qmvlab("accuracy --cost --kernels 'q4_K.cpu.scalar_q8k,q4_K.cpu.scalar_f32' --shapes 64x2048 --reps 3 "
                          "--fp-vectors 64 --threads 1");
  ASSERT_EQ(r.code, 0) << r.output;
  for (const char* text : {"0 of 64 Gaussian vectors tripped", "| q4_K.cpu.scalar_q8k ", "test / kernel",
                           "sibling / kernel"})
    EXPECT_NE(r.output.find(text), std::string::npos) << text << "\n" << r.output;
}

TEST(AccuracyCli, BadInputIsOneClearLine) {
  expect_error("accuracy --kernels 'nope*'", "no kernel matches 'nope*'");
  expect_error("accuracy --kernels q4_K.cpu.scalar_f32 --shapes 8x100", "shape 8x100 is not supported");
  expect_error("accuracy --kernels q4_K.cpu.scalar_f32 --shapes 8x256 --channels 0", "--channels: '0' is not");
  expect_error("accuracy --kernels q4_K.cpu.scalar_f32 --shapes 8x256 --channels 1.5", "--channels: '1.5' is not");
  expect_error("accuracy --kernels q4_K.cpu.scalar_f32 --shapes 8x256 --scales ten", "--scales: 'ten' is not");
  expect_error("accuracy --kernels q4_0.cpu.scalar_f32 --shapes 8x32 --channels 40", "40 outlier channels do not fit");
  expect_error("accuracy --cost --kernels q4_K.cpu.scalar_f32 --shapes 8x256", "no available int8-activation kernel");
  const CliRun help = qmvlab("accuracy --help");
  EXPECT_EQ(help.code, 0);
  for (const char* option : {"--kernels", "--shapes", "--channels", "--scales", "--trials", "--k", "--out", "--cost"})
    EXPECT_NE(help.output.find(option), std::string::npos) << option << "\n" << help.output;
}

}  // namespace
}  // namespace qmv
