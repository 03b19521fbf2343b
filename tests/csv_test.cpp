#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <stdexcept>

#include "harness/csv.h"

namespace qmv {
namespace {

std::string temp_path(const std::string& name) {
  const std::string dir = std::string(QMV_TEST_TMP) + "/csv";
  std::filesystem::create_directories(dir);
  return dir + "/" + name;
}

BenchRow random_bench_row(std::mt19937_64& g, int i) {
  std::uniform_real_distribution<double> u(1e-3, 1e4);
  BenchRow r;
  r.kernel = "q4_K.cpu.scalar_" + std::to_string(i);
  r.op = "matvec";
  r.weight_type = "q4_K";
  r.act_format = "q8_K";
  r.backend = "cpu";
  r.rows = 1 + static_cast<std::int64_t>(g() % 40000);
  r.cols = 256 * (1 + static_cast<std::int64_t>(g() % 60));
  r.threads = 1 + static_cast<int>(g() % 8);
  r.cache = i % 2 ? "warm" : "cold";
  r.repetitions = 1 + static_cast<int>(g() % 20);
  r.time_min_us = u(g);
  r.time_median_us = u(g);
  r.time_max_us = u(g);
  r.bytes_per_call = static_cast<std::int64_t>(g() % (1ull << 40));
  r.gbps_median = u(g);
  r.gbps_best = u(g);
  r.peak_gbps = u(g);
  r.peak_pct = u(g) / 100;
  r.gflops = u(g);
  return r;
}

TEST(Csv, EscapesCommasQuotesAndNewlines) {
  EXPECT_EQ(csv_escape("plain"), "plain");
  EXPECT_EQ(csv_escape("a,b"), "\"a,b\"");
  EXPECT_EQ(csv_escape("say \"hi\""), "\"say \"\"hi\"\"\"");
}

TEST(Csv, BenchRowsRoundTripExactly) {
  std::mt19937_64 g(std::random_device{}());
  const RunContext ctx{"intel-xeon-2c", "Intel(R) Xeon(R), 2 cores", "none", "gcc 12 Release",
                       "abc123+dirty", "qmvlab bench --kernels 'q4_K.*,q6_K.*' --shapes 1x256,\"x\""};
  const std::string path = temp_path("bench.csv");
  std::vector<BenchRow> rows;
  {
    CsvWriter w(path, bench_header(), false);
    for (int i = 0; i < 20; ++i) {
      rows.push_back(random_bench_row(g, i));
      w.write(bench_fields(ctx, rows.back()));
    }
  }
  EXPECT_EQ(detect_csv_kind(path), CsvKind::Bench);
  RunContext back_ctx;
  const auto back = read_bench_csv(path, &back_ctx);
  ASSERT_EQ(back.size(), rows.size());
  EXPECT_EQ(back_ctx.command, ctx.command);
  EXPECT_EQ(back_ctx.cpu_model, ctx.cpu_model);
  EXPECT_EQ(back_ctx.git_commit, ctx.git_commit);
  for (std::size_t i = 0; i < rows.size(); ++i) {
    EXPECT_EQ(back[i].kernel, rows[i].kernel);
    EXPECT_EQ(back[i].rows, rows[i].rows);
    EXPECT_EQ(back[i].cols, rows[i].cols);
    EXPECT_EQ(back[i].threads, rows[i].threads);
    EXPECT_EQ(back[i].cache, rows[i].cache);
    EXPECT_EQ(back[i].bytes_per_call, rows[i].bytes_per_call);
    // Written as the shortest text that reads back to the same double; fccp's own
    // number parser may land an ulp or so away.
    auto near = [](double a, double b) { return std::abs(a - b) <= 1e-12 * std::abs(b); };
    EXPECT_PRED2(near, back[i].time_median_us, rows[i].time_median_us);
    EXPECT_PRED2(near, back[i].gbps_median, rows[i].gbps_median);
    EXPECT_PRED2(near, back[i].peak_pct, rows[i].peak_pct);
    EXPECT_PRED2(near, back[i].gflops, rows[i].gflops);
  }
}

TEST(Csv, CheckAndPeakRowsRoundTrip) {
  const RunContext ctx{"m", "cpu", "none", "gcc", "abc", "qmvlab check"};
  const std::string path = temp_path("check.csv");
  CheckRow c;
  c.kernel = "q6_K.cpu.scalar";
  c.rows = 67;
  c.cols = 512;
  c.activation = "outliers";
  c.seed = 12345678901234ull;
  c.nmse_kernel = 1.25e-14;
  c.nmse_e2e = 3.5e-4;
  c.passed = false;
  c.failure = "kernel NMSE 2e-3 > 1e-9, see \"log\"";
  {
    CsvWriter w(path, check_header(), false);
    w.write(check_fields(ctx, c));
  }
  EXPECT_EQ(detect_csv_kind(path), CsvKind::Check);
  const auto back = read_check_csv(path);
  ASSERT_EQ(back.size(), 1u);
  EXPECT_EQ(back[0].seed, c.seed);
  EXPECT_NEAR(back[0].nmse_kernel, c.nmse_kernel, 1e-12 * c.nmse_kernel);
  EXPECT_EQ(back[0].failure, c.failure);
  EXPECT_FALSE(back[0].passed);

  const std::string ppath = temp_path("peak.csv");
  {
    CsvWriter w(ppath, peak_header(), false);
    w.write(peak_fields(ctx, PeakRow{2, 1 << 30, 7, 17.5, 16.25}));
  }
  EXPECT_EQ(detect_csv_kind(ppath), CsvKind::Peak);
  const auto peaks = read_peak_csv(ppath);
  ASSERT_EQ(peaks.size(), 1u);
  EXPECT_EQ(peaks[0].threads, 2);
  EXPECT_EQ(peaks[0].gbps_best, 17.5);
}

TEST(Csv, AppendKeepsOneHeaderAndRefusesAnotherFormat) {
  const RunContext ctx{"m", "cpu", "none", "gcc", "abc", "cmd"};
  const std::string path = temp_path("append.csv");
  std::mt19937_64 g(1);
  { CsvWriter(path, bench_header(), false).write(bench_fields(ctx, random_bench_row(g, 0))); }
  { CsvWriter(path, bench_header(), true).write(bench_fields(ctx, random_bench_row(g, 1))); }
  EXPECT_EQ(read_bench_csv(path).size(), 2u);
  EXPECT_THROW(CsvWriter(path, check_header(), true), std::runtime_error);
}

TEST(Csv, ReadErrorsNameTheFile) {
  try {
    read_bench_csv(temp_path("does-not-exist.csv"));
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("does-not-exist.csv: no such file"), std::string::npos);
  }
  const std::string bad = temp_path("bad-number.csv");
  {
    const RunContext ctx{"m", "cpu", "none", "gcc", "abc", "cmd"};
    std::mt19937_64 g(2);
    auto fields = bench_fields(ctx, random_bench_row(g, 0));
    fields[10] = "many";  // rows
    CsvWriter(bad, bench_header(), false).write(fields);
  }
  try {
    read_bench_csv(bad);
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("bad-number.csv"), std::string::npos) << e.what();
  }
  const std::string missing_col = temp_path("missing-col.csv");
  std::ofstream(missing_col) << "kernel,rows\nq4_K.cpu.scalar,3\n";
  EXPECT_EQ(detect_csv_kind(missing_col), CsvKind::Unknown);
  EXPECT_THROW(read_bench_csv(missing_col), std::runtime_error);
}

}  // namespace
}  // namespace qmv
