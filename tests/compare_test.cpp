// `qmvlab compare`: matching rows of two results CSVs and the ratios, on CSVs written
// here from random values; the expected ratios and geometric mean are computed in the
// test from those values.
#include "harness/compare.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <random>
#include <regex>
#include <string>
#include <vector>

#include "harness/csv.h"
#include "kernels/former_names.h"
#include "tests/cli_run.h"
#include "tests/test_seed.h"

namespace qmv {
namespace {

using testing::expect_error;
using testing::qmvlab;
using testing::tmp;

// One engine per test, seeded from the test's seed (tests/test_seed.h) when the test
// starts drawing: a failing test's inputs replay with QMV_TEST_SEED.
std::mt19937_64& rng() {
  static std::mt19937_64 g;
  static const ::testing::TestInfo* seeded_for = nullptr;
  if (const ::testing::TestInfo* now = ::testing::UnitTest::GetInstance()->current_test_info(); now != seeded_for) {
    g.seed(qmv::testing::fresh_seed());
    seeded_for = now;
  }
  return g;
}
double uniform(double lo, double hi) { return std::uniform_real_distribution<double>(lo, hi)(rng()); }

BenchRow random_row(const std::string& kernel, std::int64_t rows, std::int64_t cols, int threads) {
  BenchRow r;
  r.kernel = kernel;
  r.op = "matvec";
  r.weight_type = kernel.substr(0, kernel.find('.'));
  r.act_format = "q8_K";
  r.backend = kernel.find(".cuda.") != std::string::npos ? "cuda" : "cpu";
  r.rows = rows, r.cols = cols, r.threads = threads;
  r.cache = "cold";
  r.repetitions = 5;
  r.time_median_us = uniform(10, 5000);
  r.time_min_us = r.time_median_us * 0.9, r.time_max_us = r.time_median_us * 1.2;
  r.bytes_per_call = rows * cols;
  r.gbps_median = uniform(0.5, 40);
  r.gbps_best = r.gbps_median * 1.05;
  r.peak_gbps = 30;
  r.peak_pct = uniform(1, 99);
  r.gflops = uniform(1, 50);
  return r;
}

void write_bench(const std::string& path, const std::vector<BenchRow>& rows, const std::string& machine) {
  RunContext ctx{machine, "Test CPU", "none", "gcc", "abc123", "qmvlab bench"};
  CsvWriter w(path, bench_header(), false);
  for (const auto& r : rows) w.write(bench_fields(ctx, r));
}

// Geometric mean as the n-th root of the product (the code sums logarithms).
double geomean_by_product(const std::vector<double>& v) {
  double p = 1;
  for (double x : v) p *= x;
  return std::pow(p, 1.0 / v.size());
}

using Key = std::tuple<std::string, std::int64_t, std::int64_t, int>;

struct Pair {
  std::vector<BenchRow> a, b;
  std::map<Key, std::pair<BenchRow, BenchRow>> common;
};

// A and B share most keys; each also has rows of its own.
Pair random_pair() {
  Pair p;
  const std::vector<std::string> kernels = {"q4_K.cpu.avx2_q8k", "q6_K.cpu.avx512vnni_x4_q8k", "q8_0.cpu.avx2_f32"};
  const std::vector<std::pair<int, int>> shapes = {{4096, 4096}, {1536, 576}, {32000, 4096}};
  for (const auto& k : kernels)
    for (auto [r, c] : shapes)
      for (int t : {1, 2}) {
        BenchRow x = random_row(k, r, c, t), y = random_row(k, r, c, t);
        p.a.push_back(x), p.b.push_back(y);
        p.common[{k, r, c, t}] = {x, y};
      }
  p.a.push_back(random_row("q5_K.cpu.scalar_f32", 256, 256, 1));  // only in A
  p.b.push_back(random_row("q4_K.cpu.avx2_q8k", 4096, 4096, 4));  // only in B
  p.b.push_back(random_row("q3_K.cpu.scalar", 512, 256, 2));      // only in B
  std::shuffle(p.b.begin(), p.b.end(), rng());
  return p;
}

TEST(ResultsCompare, ByKernelGbpsRatiosAndGeomean) {
  const Pair p = random_pair();
  write_bench(tmp("cmp_a.csv"), p.a, "machine-a");
  write_bench(tmp("cmp_b.csv"), p.b, "machine-b");
  const ResultsFile a = read_results_csv(tmp("cmp_a.csv")), b = read_results_csv(tmp("cmp_b.csv"));
  EXPECT_EQ(a.machine, "machine-a");
  const Comparison c = compare_results(a, b, CompareBy::Kernel, Metric::Gbps);
  ASSERT_EQ(c.matched.size(), p.common.size());
  EXPECT_EQ(c.unmatched_a, 1);
  EXPECT_EQ(c.unmatched_b, 2);
  std::vector<double> expected;
  for (const auto& m : c.matched) {
    const auto& [x, y] = p.common.at({m.a.kernel, m.a.rows, m.a.cols, m.a.threads});
    EXPECT_EQ(m.b.kernel, m.a.kernel);
    EXPECT_EQ(m.b.threads, m.a.threads);
    EXPECT_DOUBLE_EQ(m.value_a, x.gbps_median);
    EXPECT_DOUBLE_EQ(m.ratio, y.gbps_median / x.gbps_median);
    expected.push_back(y.gbps_median / x.gbps_median);
  }
  EXPECT_NEAR(c.geomean, geomean_by_product(expected), 1e-12 * c.geomean);
}

// A batch kernel's rows at n = 1, 2, 4 and 8 are four points: each n matches its own.
TEST(ResultsCompare, BatchRowsMatchOnlyTheirOwnVectorCount) {
  std::vector<BenchRow> a, b;
  const std::vector<int> counts = {1, 2, 4, 8};
  for (int n : counts) {
    BenchRow x = random_row("q4_K.cpu.avx2_r8_batch_q8k", 4096, 4096, 2), y = x;
    x.op = y.op = "matvec_batch";
    x.n = y.n = n;
    y.gbps_median = uniform(0.5, 40);
    a.push_back(x), b.push_back(y);
  }
  std::shuffle(b.begin(), b.end(), rng());
  write_bench(tmp("cmp_batch_a.csv"), a, "machine-a");
  write_bench(tmp("cmp_batch_b.csv"), b, "machine-b");
  const ResultsFile fa = read_results_csv(tmp("cmp_batch_a.csv")), fb = read_results_csv(tmp("cmp_batch_b.csv"));
  for (CompareBy by : {CompareBy::Kernel, CompareBy::Shape}) {
    const Comparison c = compare_results(fa, fb, by, Metric::Gbps);
    ASSERT_EQ(c.matched.size(), counts.size());
    for (const auto& m : c.matched) {
      EXPECT_EQ(m.b.n, m.a.n);
      const auto x = std::find_if(a.begin(), a.end(), [&](const BenchRow& r) { return r.n == m.a.n; });
      const auto y = std::find_if(b.begin(), b.end(), [&](const BenchRow& r) { return r.n == m.a.n; });
      EXPECT_DOUBLE_EQ(m.ratio, y->gbps_median / x->gbps_median) << "n=" << m.a.n;
    }
  }
  // The table names each point's n.
  const auto r = qmvlab("compare " + tmp("cmp_batch_a.csv") + " " + tmp("cmp_batch_b.csv"));
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("4096x4096 n=4"), std::string::npos) << r.output;
}

// A results file written before the kernels were renamed compares with a new one. A
// kernel renamed twice has two former names: each on a shape of its own.
TEST(ResultsCompare, FormerKernelNamesMatchTheirCurrentNames) {
  std::vector<BenchRow> before, after;
  std::map<std::string_view, int> renames;
  for (const FormerName& f : former_kernel_names()) {
    const std::int64_t rows = 4096 + 256 * renames[f.current]++;
    before.push_back(random_row(std::string(f.former), rows, 4096, 1));
    after.push_back(random_row(std::string(f.current), rows, 4096, 1));
  }
  write_bench(tmp("cmp_former.csv"), before, "machine-a");
  write_bench(tmp("cmp_current.csv"), after, "machine-a");
  const ResultsFile a = read_results_csv(tmp("cmp_former.csv")), b = read_results_csv(tmp("cmp_current.csv"));
  const Comparison c = compare_results(a, b, CompareBy::Kernel, Metric::Gbps);
  ASSERT_EQ(c.matched.size(), before.size());
  EXPECT_EQ(c.unmatched_a, 0);
  EXPECT_EQ(c.unmatched_b, 0);
  for (const auto& m : c.matched) EXPECT_EQ(current_kernel_name(m.a.kernel), m.a.kernel);
}

TEST(ResultsCompare, TimeRatioIsAOverBAndPeakPctBOverA) {
  const Pair p = random_pair();
  write_bench(tmp("cmp_ta.csv"), p.a, "m");
  write_bench(tmp("cmp_tb.csv"), p.b, "m");
  const ResultsFile a = read_results_csv(tmp("cmp_ta.csv")), b = read_results_csv(tmp("cmp_tb.csv"));
  const Comparison t = compare_results(a, b, CompareBy::Kernel, Metric::Time);
  std::vector<double> expected;
  for (const auto& m : t.matched) {
    const auto& [x, y] = p.common.at({m.a.kernel, m.a.rows, m.a.cols, m.a.threads});
    EXPECT_DOUBLE_EQ(m.ratio, x.time_median_us / y.time_median_us);  // > 1 when B is faster
    expected.push_back(x.time_median_us / y.time_median_us);
  }
  EXPECT_NEAR(t.geomean, geomean_by_product(expected), 1e-12 * t.geomean);
  const Comparison q = compare_results(a, b, CompareBy::Kernel, Metric::PeakPct);
  for (const auto& m : q.matched) {
    const auto& [x, y] = p.common.at({m.a.kernel, m.a.rows, m.a.cols, m.a.threads});
    EXPECT_DOUBLE_EQ(m.ratio, y.peak_pct / x.peak_pct);
  }
}

TEST(ResultsCompare, ByShapeTakesTheFastestKernelOfEachSide) {
  const std::vector<std::pair<int, int>> shapes = {{4096, 4096}, {14336, 4096}, {576, 1536}};
  std::vector<BenchRow> a, b;
  for (auto [r, c] : shapes) {
    for (const char* k : {"q4_K.cpu.scalar_f32", "q4_K.cpu.avx2_q8k", "q4_K.cpu.avx512vnni_x4_q8k"})
      for (int t : {1, 2}) a.push_back(random_row(k, r, c, t));
    for (const char* k : {"q4_K.cuda.warpx2_f32", "q4_K.cuda.warpx4_f32", "q4_K.cuda.halfwarp_dp4a_q8_1"}) b.push_back(random_row(k, r, c, 0));
    a.push_back(random_row("q6_K.cpu.avx2_q8k", r, c, 2));  // another weight type: its own match
    b.push_back(random_row("q6_K.cuda.halfwarp_dp4a_q8_1", r, c, 0));
  }
  b.push_back(random_row("q4_K.cuda.warpx2_f32", 8, 256, 0));  // shape only in B
  // A fused pair reads two matrices: never the best plain matvec of its shape.
  BenchRow fused = random_row("q4_K.cpu.avx512vnni_up_gate_q8k", 4096, 4096, 2);
  fused.op = "fused_up_gate";
  fused.gbps_median = 1000;
  a.push_back(fused);
  write_bench(tmp("cmp_sa.csv"), a, "cpu-box");
  write_bench(tmp("cmp_sb.csv"), b, "gpu-box");
  const Comparison c =
      compare_results(read_results_csv(tmp("cmp_sa.csv")), read_results_csv(tmp("cmp_sb.csv")), CompareBy::Shape, Metric::Gbps);

  auto best = [](const std::vector<BenchRow>& rows, const std::string& wt, std::int64_t r, std::int64_t cl) {
    const BenchRow* out = nullptr;
    for (const auto& x : rows)
      if (x.op == "matvec" && x.weight_type == wt && x.rows == r && x.cols == cl && (!out || x.gbps_median > out->gbps_median)) out = &x;
    return *out;
  };
  ASSERT_EQ(c.matched.size(), 2 * shapes.size());
  EXPECT_EQ(c.unmatched_a, 1);
  EXPECT_EQ(c.unmatched_b, 1);
  std::vector<double> expected;
  for (const auto& m : c.matched) {
    const BenchRow x = best(a, m.a.weight_type, m.a.rows, m.a.cols), y = best(b, m.a.weight_type, m.a.rows, m.a.cols);
    EXPECT_EQ(m.a.kernel, x.kernel);
    EXPECT_EQ(m.a.threads, x.threads);
    EXPECT_EQ(m.b.kernel, y.kernel);
    EXPECT_EQ(m.candidates_a, m.a.weight_type == "q4_K" ? 6 : 1);
    EXPECT_DOUBLE_EQ(m.ratio, y.gbps_median / x.gbps_median);
    expected.push_back(y.gbps_median / x.gbps_median);
  }
  EXPECT_NEAR(c.geomean, geomean_by_product(expected), 1e-12 * c.geomean);
}

TEST(ResultsCompare, RepeatedKeyKeepsTheFastestRow) {
  std::vector<BenchRow> a = {random_row("q4_K.cpu.avx2_q8k", 4096, 4096, 2), random_row("q4_K.cpu.avx2_q8k", 4096, 4096, 2)};
  a[0].tile_rows = 16, a[1].tile_rows = 64;
  std::vector<BenchRow> b = {random_row("q4_K.cpu.avx2_q8k", 4096, 4096, 2)};
  write_bench(tmp("cmp_da.csv"), a, "m");
  write_bench(tmp("cmp_db.csv"), b, "m");
  const Comparison c =
      compare_results(read_results_csv(tmp("cmp_da.csv")), read_results_csv(tmp("cmp_db.csv")), CompareBy::Kernel, Metric::Gbps);
  ASSERT_EQ(c.matched.size(), 1u);
  EXPECT_EQ(c.duplicates_a, 1);
  EXPECT_DOUBLE_EQ(c.matched[0].value_a, std::max(a[0].gbps_median, a[1].gbps_median));
}

// A sweep CSV: the bench columns in another order, extra columns, and failed rows whose
// numbers are empty.
std::string write_sweep(const std::string& name, const std::vector<BenchRow>& ok, int failed) {
  const std::string path = tmp(name);
  std::ofstream f(path);
  f << "experiment,model_op,machine,kernel,weight_type,act_format,backend,rows,cols,threads,cache,"
       "time_median_us,gbps_median,peak_gbps,peak_pct,status,reason,check_nmse_e2e,check_passed\n";
  for (const auto& r : ok)
    f << "exp1,ffn_down,sweeper," << r.kernel << ',' << r.weight_type << ",q8_K," << r.backend << ',' << r.rows << ','
      << r.cols << ',' << r.threads << ',' << r.cache << ',' << fmt::format("{},{},{},{}", r.time_median_us, r.gbps_median, r.peak_gbps, r.peak_pct)
      << ",ok,," << uniform(1e-6, 1e-3) << ",1\n";
  for (int i = 0; i < failed; ++i)
    f << "exp1,ffn_down,sweeper,q4_K.cpu.avx2_q8k,q4_K,q8_K,cpu,4096,4096,1,cold,,,,,failed,\"check failed, NMSE 0.5\",0.5,0\n";
  return path;
}

TEST(ResultsCompare, SweepCsvKeepsOnlyOkRows) {
  const Pair p = random_pair();
  const std::string sweep = write_sweep("cmp_sweep.csv", p.b, 3);
  write_bench(tmp("cmp_wa.csv"), p.a, "m");
  const ResultsFile b = read_results_csv(sweep);
  EXPECT_EQ(b.skipped_not_ok, 3);
  EXPECT_EQ(b.rows.size(), p.b.size());
  EXPECT_EQ(b.machine, "sweeper");
  const Comparison c = compare_results(read_results_csv(tmp("cmp_wa.csv")), b, CompareBy::Kernel, Metric::Gbps);
  ASSERT_EQ(c.matched.size(), p.common.size());
  for (const auto& m : c.matched) {
    const auto& [x, y] = p.common.at({m.a.kernel, m.a.rows, m.a.cols, m.a.threads});
    EXPECT_DOUBLE_EQ(m.ratio, y.gbps_median / x.gbps_median);
  }
}

TEST(ResultsCompare, BadInputIsNamed) {
  auto message = [](auto fn) {
    try {
      fn();
    } catch (const CompareError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  std::ofstream(tmp("cmp_other.csv")) << "a,b\n1,2\n";
  EXPECT_NE(message([] { read_results_csv(tmp("cmp_other.csv")); }).find("missing column(s) kernel"), std::string::npos);
  EXPECT_NE(message([] { read_results_csv(tmp("cmp_nonexistent.csv")); }).find("no such file"), std::string::npos);
  std::ofstream(tmp("cmp_empty.csv")).flush();
  EXPECT_NE(message([] { read_results_csv(tmp("cmp_empty.csv")); }).find("empty file"), std::string::npos);
  EXPECT_NE(message([] { parse_metric("flops"); }).find("unknown metric 'flops'"), std::string::npos);

  std::vector<BenchRow> a = {random_row("q4_K.cpu.avx2_q8k", 4096, 4096, 2)};
  std::vector<BenchRow> b = {random_row("q4_K.cpu.avx2_q8k", 1024, 4096, 2)};
  std::vector<BenchRow> b_threads = {random_row("q4_K.cpu.avx2_q8k", 4096, 4096, 1)};
  write_bench(tmp("cmp_na.csv"), a, "m");
  write_bench(tmp("cmp_nb.csv"), b, "m");
  write_bench(tmp("cmp_nt.csv"), b_threads, "m");
  const auto ra = read_results_csv(tmp("cmp_na.csv"));
  EXPECT_NE(message([&] { compare_results(ra, read_results_csv(tmp("cmp_nb.csv")), CompareBy::Kernel, Metric::Gbps); })
                .find("no shape is in both (A: 4096x4096; B: 1024x4096)"),
            std::string::npos);
  EXPECT_NE(message([&] { compare_results(ra, read_results_csv(tmp("cmp_nt.csv")), CompareBy::Kernel, Metric::Gbps); })
                .find("no thread count is in both (A: 2; B: 1)"),
            std::string::npos);

  // A number that is not one names its line and column.
  std::ofstream(tmp("cmp_badnum.csv")) << "kernel,weight_type,backend,rows,cols,threads,cache,time_median_us,gbps_median,peak_pct\n"
                                       << "q4_K.cpu.x,q4_K,cpu,4096,4096,2,cold,12.5,fast,40\n";
  EXPECT_NE(message([] { read_results_csv(tmp("cmp_badnum.csv")); }).find("line 2: column gbps_median: 'fast'"),
            std::string::npos);
}

double geomean_in_output(const std::string& out) {
  std::smatch m;
  if (!std::regex_search(out, m, std::regex(R"(geometric mean of [AB]/[AB]: ([0-9.]+))"))) return NAN;
  return std::stod(m[1]);
}

TEST(ResultsCompareCli, PrintsTableAndGeomean) {
  const Pair p = random_pair();
  write_bench(tmp("cli_cmp_a.csv"), p.a, "machine-a");
  write_bench(tmp("cli_cmp_b.csv"), p.b, "machine-b");
  std::vector<double> gb, tm;
  for (const auto& [k, xy] : p.common) {
    gb.push_back(xy.second.gbps_median / xy.first.gbps_median);
    tm.push_back(xy.first.time_median_us / xy.second.time_median_us);
  }
  const auto r = qmvlab("compare " + tmp("cli_cmp_a.csv") + " " + tmp("cli_cmp_b.csv"));
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("B/A (>1: B faster)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("machine-b"), std::string::npos) << r.output;
  EXPECT_NEAR(geomean_in_output(r.output), geomean_by_product(gb), 6e-4) << r.output;
  EXPECT_NE(r.output.find(fmt::format("matched {}; unmatched: 1 only in A, 2 only in B", p.common.size())), std::string::npos)
      << r.output;
  // One table row per match: lines starting with the kernel names of A.
  EXPECT_EQ(testing::count_lines(r.output, "| q4_K.cpu.avx2_q8k "), 6) << r.output;

  const auto t = qmvlab("compare " + tmp("cli_cmp_a.csv") + " " + tmp("cli_cmp_b.csv") + " --metric time");
  ASSERT_EQ(t.code, 0) << t.output;
  EXPECT_NE(t.output.find("A/B (>1: B faster)"), std::string::npos) << t.output;
  EXPECT_NEAR(geomean_in_output(t.output), geomean_by_product(tm), 6e-4) << t.output;

  const auto s = qmvlab("compare " + tmp("cli_cmp_a.csv") + " " + tmp("cli_cmp_b.csv") + " --by shape");
  ASSERT_EQ(s.code, 0) << s.output;
  EXPECT_NE(s.output.find("A kernel"), std::string::npos) << s.output;
}

TEST(ResultsCompareCli, ErrorsAreOneLineAndExitTwo) {
  std::vector<BenchRow> a = {random_row("q4_K.cpu.avx2_q8k", 4096, 4096, 2)};
  std::vector<BenchRow> b = {random_row("q6_K.cpu.avx2_q8k", 4096, 4096, 2)};
  write_bench(tmp("cli_cmp_e1.csv"), a, "m");
  write_bench(tmp("cli_cmp_e2.csv"), b, "m");
  std::ofstream(tmp("cli_cmp_other.csv")) << "x,y\n1,2\n";
  expect_error("compare " + tmp("cli_cmp_e1.csv") + " " + tmp("cli_cmp_other.csv"), "not a results CSV");
  expect_error("compare " + tmp("cli_cmp_e1.csv") + " " + tmp("cli_cmp_missing.csv"), "no such file");
  expect_error("compare " + tmp("cli_cmp_e1.csv") + " " + tmp("cli_cmp_e2.csv"), "no kernel is in both");
  expect_error("compare " + tmp("cli_cmp_e1.csv") + " " + tmp("cli_cmp_e2.csv") + " --by shape", "no weight type is in both");
  expect_error("compare " + tmp("cli_cmp_e1.csv") + " " + tmp("cli_cmp_e1.csv") + " --metric flops", "unknown metric 'flops'");
  expect_error("compare " + tmp("cli_cmp_e1.csv") + " " + tmp("cli_cmp_e1.csv") + " --by machine", "unknown --by 'machine'");
}

}  // namespace
}  // namespace qmv
