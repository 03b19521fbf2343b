// The peer ratio and the one-screen report of a results folder (harness/summary.h), on
// CSVs written here with the project's writers from fresh random numbers; the expected
// best kernels, ratios and counts are computed in the test from those numbers.
#include "harness/summary.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "harness/compare.h"
#include "harness/csv.h"
#include "tests/cli_run.h"
#include "tests/test_seed.h"

namespace qmv {
namespace {

namespace fs = std::filesystem;
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
int uniform_int(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng()); }

// A fresh folder per test.
std::string fresh_dir(const std::string& name) {
  const std::string d = tmp(name);
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

const RunContext kCtx{"test-machine", "Test CPU", "none", "gcc", "c0ffee", "qmvlab sweep experiments/default.toml"};

BenchRow timed(const std::string& kernel, const std::string& act_format, std::int64_t rows, std::int64_t cols,
               int threads, double time_us, const std::string& act_quant, double act_quant_us) {
  BenchRow r;
  r.kernel = kernel;
  r.op = "matvec";
  r.weight_type = kernel.substr(0, kernel.find('.'));
  r.act_format = act_format;
  r.backend = "cpu";
  r.rows = rows, r.cols = cols, r.threads = threads;
  r.cache = "cold";
  r.repetitions = 5;
  r.time_median_us = time_us;
  r.time_min_us = time_us * 0.95, r.time_max_us = time_us * 1.1;
  r.bytes_per_call = rows * cols / 2 + uniform_int(0, 4096);
  r.gbps_median = static_cast<double>(r.bytes_per_call) / (time_us * 1e3);
  r.gbps_best = r.gbps_median * 1.05;
  r.peak_gbps = uniform(10, 40);
  r.peak_pct = 100 * r.gbps_median / r.peak_gbps;
  r.gflops = uniform(1, 50);
  r.act_quant = act_quant;
  r.act_quant_median_us = act_quant_us;
  return r;
}

struct SweepLine {
  SweepLine(BenchRow r, std::string st = "ok", std::string why = "")
      : row(std::move(r)), status(std::move(st)), reason(std::move(why)) {}
  BenchRow row;
  std::string status, reason;
};

// A sweep CSV as the sweep writes it (sweep_fields): the bench columns, emptied for a
// point not timed, then the sweep's own and the (empty) Slurm ones. `legacy` drops the
// act_quant, n and Slurm columns, as files written before them lack them.
void write_sweep(const std::string& path, const std::vector<SweepLine>& lines, bool legacy = false) {
  const std::vector<std::string> header = sweep_header();
  auto index = [&](const char* c) { return static_cast<std::size_t>(std::find(header.begin(), header.end(), c) - header.begin()); };
  CsvWriter w(path, legacy ? legacy_sweep_headers().back() : header, false);
  for (const SweepLine& l : lines) {
    std::vector<std::string> f = sweep_bench_fields(kCtx, l.row);
    if (l.status != "ok")
      for (std::size_t i = index("tile_rows"); i < index("command"); ++i) f[i].clear();
    const bool ok = l.status == "ok";
    f.insert(f.end(), {"default", "attn_q", l.status, l.reason, ok ? "1" : "", ok ? "1e-12" : "", ok ? "1e-9" : "",
                       ok ? "1e-9" : ""});
    if (!legacy) {
      f.insert(f.end(), {"", "", ""});
    } else {
      f.erase(f.begin() + static_cast<std::ptrdiff_t>(index("n")));
      f.erase(f.begin() + static_cast<std::ptrdiff_t>(index("act_quant_median_us")));
      f.erase(f.begin() + static_cast<std::ptrdiff_t>(index("act_quant")));
    }
    w.write(f);
  }
}

void write_bench(const std::string& path, const std::vector<BenchRow>& rows) {
  CsvWriter w(path, bench_header(), false);
  for (const auto& r : rows) w.write(bench_fields(kCtx, r));
}

double geomean_by_product(const std::vector<double>& v) {
  double p = 1;
  for (double x : v) p *= x;
  return std::pow(p, 1.0 / static_cast<double>(v.size()));
}

// What the test expects of one point, from the numbers it wrote.
struct Expected {
  std::string qmv_kernel, ggml_kernel;
  double qmv_time = 0, ggml_time = 0, qmv_pct = 0;
};
using PointKey = std::tuple<std::string, int, std::int64_t, std::int64_t>;  // weights, threads, shape
using GroupKey = std::pair<std::string, int>;

// Every weight type x shape x threads with two qmvlab kernels (one given a quantized
// activation before the call, one reading f32) and one or two ggml kernels, random times.
struct RandomSweep {
  std::vector<SweepLine> lines;
  std::map<PointKey, Expected> expected;
};

RandomSweep random_sweep(bool with_ggml, bool record_act_quant = true) {
  RandomSweep s;
  const std::vector<std::pair<std::int64_t, std::int64_t>> shapes = {{4096, 4096}, {2048, 5632}, {256, 2048}};
  for (const std::string w : {"q4_K", "q8_0"}) {
    const std::string q8 = w == "q4_K" ? "q8_K" : "q8_1";
    for (auto [rows, cols] : shapes)
      for (int threads : {1, 2}) {
        const double base = uniform(50, 5000);
        // The int8 kernel is faster on the kernel time alone, but its quantization may
        // (or, on the first shape, must) make it the slower one.
        const double t8 = base * uniform(0.6, 0.9);
        const double aq = rows == 4096 ? base * uniform(0.5, 0.8) : base * uniform(0.0, 0.5);
        const double tf = base;
        const std::string k8 = w + ".cpu.avx2_" + (w == "q4_K" ? "q8k" : "q8_1");
        const std::string kf = w + ".cpu.avx2_f32";
        BenchRow r8 = timed(k8, q8, rows, cols, threads, t8, record_act_quant ? "before" : "",
                            record_act_quant ? aq : 0);
        BenchRow rf = timed(kf, "f32", rows, cols, threads, tf, record_act_quant ? "none" : "", 0);
        s.lines.push_back({r8});
        s.lines.push_back({rf});
        Expected e;
        const double c8 = t8 + (record_act_quant ? aq : 0);
        const BenchRow& best = c8 < tf ? r8 : rf;
        e.qmv_kernel = best.kernel;
        e.qmv_time = std::min(c8, tf);
        e.qmv_pct = 100 * (static_cast<double>(best.bytes_per_call) / (e.qmv_time * 1e3)) / best.peak_gbps;
        // A failed row is never the best, however fast.
        BenchRow failed = timed(w + ".cpu.scalar_f32", "f32", rows, cols, threads, e.qmv_time * 0.1, "none", 0);
        s.lines.push_back({failed, "failed", "check failed: gaussian: kernel NMSE 0.5 > 1e-09"});
        if (with_ggml) {
          BenchRow g = timed(w + ".ggml.cpu", "f32", rows, cols, threads, base * uniform(0.5, 2), "in_call", 0);
          s.lines.push_back({g});
          e.ggml_kernel = g.kernel, e.ggml_time = g.time_median_us;
          if (w == "q4_K") {
            BenchRow gr = timed(w + ".ggml.cpu_repack", "f32", rows, cols, threads, base * uniform(0.5, 2), "in_call", 0);
            s.lines.push_back({gr});
            if (gr.time_median_us < e.ggml_time) e.ggml_kernel = gr.kernel, e.ggml_time = gr.time_median_us;
          }
        }
        s.expected[{w, threads, rows, cols}] = e;
      }
  }
  std::shuffle(s.lines.begin(), s.lines.end(), rng());
  return s;
}

void expect_points(const ResultsSummary& s, const RandomSweep& rs, bool with_ggml) {
  ASSERT_EQ(s.points.size(), rs.expected.size());
  for (const PeerPoint& p : s.points) {
    SCOPED_TRACE(fmt::format("{} {}x{} {}t", p.weight_type, p.rows, p.cols, p.threads));
    const Expected& e = rs.expected.at({p.weight_type, p.threads, p.rows, p.cols});
    ASSERT_TRUE(p.qmv.found);
    EXPECT_EQ(p.qmv.kernel, e.qmv_kernel);
    EXPECT_NEAR(p.qmv.time_us, e.qmv_time, 1e-9 * e.qmv_time);
    EXPECT_NEAR(p.qmv.peak_pct, e.qmv_pct, 1e-6 * e.qmv_pct);
    EXPECT_EQ(p.ggml.found, with_ggml);
    if (with_ggml) {
      EXPECT_EQ(p.ggml.kernel, e.ggml_kernel);
      EXPECT_NEAR(p.ratio, e.ggml_time / e.qmv_time, 1e-9 * p.ratio);
    } else {
      EXPECT_TRUE(std::isnan(p.ratio));
    }
  }
}

std::map<GroupKey, std::vector<double>> expected_ratios(const RandomSweep& rs) {
  std::map<GroupKey, std::vector<double>> out;
  for (const auto& [k, e] : rs.expected) out[{std::get<0>(k), std::get<1>(k)}].push_back(e.ggml_time / e.qmv_time);
  return out;
}

TEST(Summary, BestKernelsAndRatiosIncludeTheActivationQuantization) {
  const std::string dir = fresh_dir("summary_best");
  const RandomSweep rs = random_sweep(true);
  write_sweep(dir + "/default.csv", rs.lines);
  const ResultsSummary s = summarize_results(dir);
  expect_points(s, rs, true);
  // On the first shape the quantization outweighs the int8 kernel's lead: f32 wins.
  for (const PeerPoint& p : s.points) {
    if (p.rows == 4096) {
      EXPECT_EQ(p.qmv.kernel, p.weight_type + ".cpu.avx2_f32");
    }
  }

  const auto ratios = expected_ratios(rs);
  ASSERT_EQ(s.groups.size(), ratios.size());
  const std::string text = summary_text(s);
  for (const PeerGroup& g : s.groups) {
    const auto& r = ratios.at({g.weight_type, g.threads});
    EXPECT_EQ(g.ratio_shapes, static_cast<int>(r.size()));
    EXPECT_NEAR(g.ratio_geomean, geomean_by_product(r), 1e-9 * g.ratio_geomean);
    EXPECT_DOUBLE_EQ(g.ratio_min, *std::min_element(r.begin(), r.end()));
    EXPECT_DOUBLE_EQ(g.ratio_max, *std::max_element(r.begin(), r.end()));
    // The text shows what the struct holds.
    EXPECT_NE(text.find(fmt::format("{:.2f} ({:.2f}-{:.2f})", g.ratio_geomean, g.ratio_min, g.ratio_max)),
              std::string::npos)
        << text;
  }
  EXPECT_EQ(text.find("no ggml rows"), std::string::npos) << text;
  EXPECT_EQ(text.find("no quantization time recorded"), std::string::npos) << text;
}

// The quick main job writes quick.csv: read when there is no default.csv, and named;
// a default.csv beside it (the full job's) is the one read.
TEST(Summary, QuickSweepIsReadWhenThereIsNoFullOne) {
  const std::string dir = fresh_dir("summary_quick");
  const RandomSweep rs = random_sweep(true);
  write_sweep(dir + "/quick.csv", rs.lines);
  const ResultsSummary quick = summarize_results(dir);
  ASSERT_TRUE(quick.has_sweep);
  EXPECT_EQ(quick.sweep_name, "quick.csv");
  expect_points(quick, rs, true);
  EXPECT_NE(summary_text(quick).find("quick.csv: "), std::string::npos) << summary_text(quick);

  const RandomSweep full = random_sweep(true);
  write_sweep(dir + "/default.csv", full.lines);
  const ResultsSummary both = summarize_results(dir);
  EXPECT_EQ(both.sweep_name, "default.csv");
  expect_points(both, full, true);
}

TEST(Summary, LegacyCsvWithoutActQuantColumns) {
  const std::string dir = fresh_dir("summary_legacy");
  const RandomSweep rs = random_sweep(false, false);
  write_sweep(dir + "/default.csv", rs.lines, true);
  const TimedFile f = read_timed_csv(dir + "/default.csv");
  EXPECT_FALSE(f.has_act_quant);
  for (const TimedRow& r : f.rows) {
    EXPECT_TRUE(r.act_quant.empty());
    EXPECT_EQ(act_quant_of(r), r.act_format == "f32" ? "none" : "before") << r.kernel;
  }
  const ResultsSummary s = summarize_results(dir);
  expect_points(s, rs, false);
  int int8_best = 0;
  for (const PeerPoint& p : s.points) int8_best += p.qmv.act_quant_missing;
  EXPECT_EQ(s.act_quant_missing, int8_best) << summary_text(s);
  const std::string text = summary_text(s);
  EXPECT_NE(text.find("no ggml rows (peer kernels not built)"), std::string::npos) << text;
  if (int8_best) {
    EXPECT_NE(text.find(fmt::format("{} of the fastest qmvlab kernels have no quantization time", int8_best)),
              std::string::npos)
        << text;
  }
}

TEST(Summary, PeerKernelsAndActQuantRules) {
  EXPECT_TRUE(is_peer_kernel("q4_0.ggml.cpu"));
  EXPECT_TRUE(is_peer_kernel("q4_K.ggml.cpu_repack"));
  EXPECT_FALSE(is_peer_kernel("q4_K.cpu.avx2_q8k"));
  EXPECT_FALSE(is_peer_kernel("ggml.cpu.x"));
  EXPECT_FALSE(is_peer_kernel("q4_K"));
  TimedRow r;
  r.kernel = "q8_0.ggml.cpu", r.act_format = "q8_0", r.time_median_us = uniform(1, 100);
  r.act_quant_median_us = uniform(1, 100);
  EXPECT_EQ(act_quant_of(r), "in_call");
  EXPECT_DOUBLE_EQ(comparable_time_us(r), r.time_median_us);
  r.kernel = "q8_0.cpu.avx2_q8_0";
  EXPECT_EQ(act_quant_of(r), "before");
  EXPECT_DOUBLE_EQ(comparable_time_us(r), r.time_median_us + r.act_quant_median_us);
  r.act_quant = "none";  // as written wins over the rule for old files
  EXPECT_DOUBLE_EQ(comparable_time_us(r), r.time_median_us);
}

TEST(Summary, MissingFilesSayNotMeasured) {
  const std::string dir = fresh_dir("summary_empty");
  const ResultsSummary s = summarize_results(dir);
  const std::string text = summary_text(s) + summary_markdown(s, dir + "/REPORT.md");
  for (const char* f : {"peak.csv", "default.csv", "check.csv", "decode-vs-llamacpp.csv", "decode.csv"})
    EXPECT_NE(text.find(fmt::format("not measured (no {})", f)), std::string::npos) << f << "\n" << text;
  EXPECT_THROW(summarize_results(dir + "/nope"), std::runtime_error);
}

TEST(Summary, SkipsAndFailuresCountedByReason) {
  const std::string dir = fresh_dir("summary_skips");
  const std::vector<std::string> reasons = {"unavailable: CPU lacks avx512f avx512vnni",
                                            "shape not supported (needs cols % 256 == 0)", "unavailable: no CUDA device"};
  std::vector<SweepLine> lines;
  std::map<std::string, std::pair<int, std::set<std::string>>> expected;  // reason -> points, kernels
  for (std::size_t n = 0; n < reasons.size(); ++n) {
    const std::string& reason = reasons[n];
    const int kernels = uniform_int(1, 4);
    for (int k = 0; k < kernels; ++k) {
      const std::string kernel = fmt::format("q4_K.cpu.k{}_{}", n, k);
      const int points = uniform_int(1, 30);
      for (int i = 0; i < points; ++i) {
        lines.push_back({timed(kernel, "q8_K", 64 * (i + 1), 256, 1 + i % 2, 1, "before", 0), "skipped", reason});
        ++expected[reason].first;
        expected[reason].second.insert(kernel);
      }
    }
  }
  const int failed = uniform_int(1, 20);
  for (int i = 0; i < failed; ++i)
    lines.push_back({timed("q6_K.cpu.avx2_q8k", "q8_K", 256 * (i + 1), 256, 1, 1, "before", 0), "failed",
                     fmt::format("check failed: outliers: kernel NMSE {} > 1e-09", uniform(0.1, 1))});
  lines.push_back({timed("q4_K.cpu.avx2_f32", "f32", 4096, 4096, 1, uniform(100, 900), "none", 0)});
  std::shuffle(lines.begin(), lines.end(), rng());
  write_sweep(dir + "/default.csv", lines);

  // check.csv: passes and, for some kernel x shape pairs, failures of one kind.
  const int check_failed = uniform_int(1, 5), check_passed = uniform_int(1, 10), check_unchecked = uniform_int(3, 9);
  {
    CsvWriter w(dir + "/check.csv", check_header(), false);
    for (int i = 0; i < check_failed + check_passed; ++i)
      for (const char* act : {"gaussian", "outliers"}) {
        CheckRow c;
        c.kernel = "q5_K.cpu.avx2_q8k", c.weight_type = "q5_K", c.act_format = "q8_K", c.backend = "cpu";
        c.rows = 64 * (i + 1), c.cols = 256, c.threads = 2, c.activation = act, c.seed = 1;
        c.passed = !(i < check_failed && std::string(act) == "outliers");
        if (!c.passed) c.failure = fmt::format("end-to-end NMSE {} > 0.001", uniform(0.01, 1));
        w.write(check_fields(kCtx, c));
      }
    // Pairs the check could not run, one row each: counted apart, never as failures.
    for (int i = 0; i < check_unchecked; ++i) {
      CheckRow c;
      c.kernel = fmt::format("q4_K.cuda.k{}", i % 3), c.weight_type = "q4_K", c.act_format = "f32", c.backend = "cuda";
      c.rows = 64 * (i + 1), c.cols = 256, c.threads = 2, c.activation = "skipped", c.seed = 1;
      c.failure = "unavailable: no CUDA device (driver too old)";
      w.write(check_fields(kCtx, c));
    }
  }
  const ResultsSummary s = summarize_results(dir);
  EXPECT_EQ(s.check_pairs, check_failed + check_passed);
  EXPECT_EQ(s.check_failed_pairs, check_failed);
  const std::string text = summary_text(s);
  for (const auto& [reason, n] : expected) {
    const std::string line =
        fmt::format("{} point{} skipped: {} ({} kernel{}", n.first, n.first == 1 ? "" : "s", reason, n.second.size(),
                    n.second.size() == 1 ? "" : "s");
    EXPECT_EQ(testing::count_lines(text, line), 1) << line << "\n" << text;
  }
  // Failures with different numbers make one line.
  EXPECT_EQ(testing::count_lines(text, "failed: check failed: outliers: kernel NMSE ..."), 1) << text;
  EXPECT_NE(text.find(fmt::format("{} point{} failed:", failed, failed == 1 ? "" : "s")), std::string::npos) << text;
  EXPECT_EQ(testing::count_lines(text, "failed in check.csv: outliers: end-to-end NMSE ..."), 1) << text;
  EXPECT_EQ(testing::count_lines(text, fmt::format("{} kernel x shape pairs not checked (check.csv): unavailable: no "
                                                   "CUDA device (driver too old) (3 kernels",
                                                   check_unchecked)),
            1)
      << text;
  EXPECT_NE(text.find(fmt::format("check.csv: {} of {} kernel x shape pairs failed", check_failed,
                                  check_failed + check_passed)),
            std::string::npos)
      << text;
  // One line per reason, whatever the number of rows.
  EXPECT_LT(testing::count_lines(text, "\n"), 40) << text;
}

TEST(Summary, DecodeAgainstLlamaCpp) {
  const std::string dir = fresh_dir("summary_decode");
  struct Row {
    std::string model, weights;
    int threads;
    double qmv, llama, norepack, roof;
  };
  std::vector<Row> rows;
  for (const std::string m : {"SmolLM2-135M-Instruct", "synthetic tinyllama-1.1b"})
    for (int t : {1, 2}) rows.push_back({m, "Q4_K_M", t, uniform(5, 200), uniform(5, 200), uniform(5, 200), uniform(50, 400)});
  std::ofstream out(dir + "/decode-vs-llamacpp.csv");
  out << "machine,cpu_model,qmvlab_commit,peer,model,model_file,weights,threads,tokens,rounds,qmvlab_tok_s,"
         "llamacpp_tok_s,llamacpp_norepack_tok_s,ratio,roofline_tok_s,qmvlab_roofline_pct,llamacpp_roofline_pct,"
         "qmvlab_plan,command\n";
  auto line = [&](const Row& r) {
    out << fmt::format("m,cpu,abc,llama.cpp 0c1e570 (ggml 0.25.3),{},f.gguf,{},{},64,3,{},{},{},{},{},{},{},auto,\"x, y\"\n",
                       r.model, r.weights, r.threads, r.qmv, r.llama, r.norepack, r.qmv / r.llama, r.roof,
                       100 * r.qmv / r.roof, 100 * r.llama / r.roof);
  };
  // An earlier run of the first model, replaced by the later row.
  line({rows[0].model, rows[0].weights, rows[0].threads, 1, 2, 3, 4});
  for (const Row& r : rows) line(r);
  out.close();
  const ResultsSummary s = summarize_results(dir);
  EXPECT_EQ(s.peer, "llama.cpp 0c1e570 (ggml 0.25.3)");
  ASSERT_EQ(s.peer_decode.size(), rows.size());
  const std::string text = summary_text(s);
  for (std::size_t i = 0; i < rows.size(); ++i) {
    EXPECT_NEAR(s.peer_decode[i].ratio, rows[i].qmv / rows[i].llama, 1e-9);
    EXPECT_NE(text.find(fmt::format("{:.1f} / {:.1f}", rows[i].llama, rows[i].norepack)), std::string::npos) << text;
    EXPECT_NE(text.find(fmt::format("{:.0f}% / {:.0f}%", 100 * rows[i].qmv / rows[i].roof, 100 * rows[i].llama / rows[i].roof)),
              std::string::npos)
        << text;
  }
  EXPECT_NE(text.find("peer: llama.cpp 0c1e570 (ggml 0.25.3)\n"), std::string::npos) << text;
  EXPECT_EQ(text.find("not measured (no decode-vs-llamacpp.csv)"), std::string::npos) << text;
}

// Beside the decode against llama.cpp, the default plan against another one (the main
// job's plan `tune` found): medians per plan, each as a ratio to the default's, and no
// roofline share for runs that measured none.
TEST(Summary, PlansAreSetAgainstTheDefaultOne) {
  const std::string dir = fresh_dir("summary_plans");
  std::ofstream(dir + "/decode-vs-llamacpp.csv")
      << "model,threads,qmvlab_tok_s,llamacpp_tok_s\nsynthetic tinyllama-1.1b,2,30,15\n";
  const std::vector<double> by_default = {uniform(20, 40), uniform(20, 40), uniform(20, 40)};
  const std::vector<double> tuned = {uniform(20, 40), uniform(20, 40), uniform(20, 40)};
  const std::string tuned_plan = "attn_q.q4_K=q4_K.cpu.avx2_r8x4_q8k";
  {
    std::ofstream out(dir + "/decode.csv");
    out << "model,plan,threads,decode_tok_s,roofline_tok_s,roofline_pct\n";
    for (std::size_t i = 0; i < 3; ++i) {
      out << fmt::format("synthetic tinyllama-1.1b,*=auto,2,{},0,0\n", by_default[i]);
      out << fmt::format("synthetic tinyllama-1.1b,{},2,{},0,0\n", tuned_plan, tuned[i]);
    }
  }
  auto median3 = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[1];
  };
  const std::string text = summary_text(summarize_results(dir));
  EXPECT_NE(text.find("qmvlab's plans (decode.csv)"), std::string::npos) << text;
  const auto def = text.find("| default (auto) ");
  const auto other = text.find("| " + tuned_plan + " ");
  ASSERT_NE(def, std::string::npos) << text;
  ASSERT_NE(other, std::string::npos) << text;
  const std::string def_row = text.substr(def, text.find('\n', def) - def);
  const std::string other_row = text.substr(other, text.find('\n', other) - other);
  EXPECT_NE(def_row.find(fmt::format("| {:.1f} ", median3(by_default))), std::string::npos) << def_row;
  EXPECT_NE(def_row.find("| 1.00 "), std::string::npos) << def_row;
  EXPECT_NE(other_row.find(fmt::format("| {:.2f} ", median3(tuned) / median3(by_default))), std::string::npos)
      << other_row;
  // --no-peak runs: no roofline, not 0%.
  EXPECT_EQ(def_row.find("0%"), std::string::npos) << def_row;
}

TEST(Summary, ThePeakLineSaysTheLoopAndThePages) {
  const std::string dir = fresh_dir("summary_peak");
  const RunContext ctx{"m", "cpu", "none", "gcc", "abc", "qmvlab peak"};
  const int pct = uniform_int(1, 100);
  PeakRow paged{2, 1 << 30, 5, 38.5, 37.25};
  paged.read_loop = "avx2.s2.pf512";
  paged.huge_page_pct = pct;
  {
    CsvWriter w(dir + "/peak.csv", peak_header(), false);
    w.write(peak_fields(ctx, PeakRow{1, 1 << 30, 5, 19.5, 19.25}));  // an older row: loop and pages unknown
    w.write(peak_fields(ctx, paged));
  }
  const std::string text = summary_text(summarize_results(dir));
  EXPECT_NE(text.find(fmt::format("peak read 19.50 GB/s (1 thread), 38.50 GB/s (2 threads, avx2.s2.pf512, {}% in "
                                  "huge pages)",
                                  pct)),
            std::string::npos)
      << text;
}

// Rows written under a machine's former name are reported under the name it has now, by
// the folder summary, the bench and sweep readers and compare.
TEST(Summary, AFormerMachineNameReadsAsTheCurrentOne) {
  const std::string dir = fresh_dir("summary_former_machine");
  const RunContext old_ctx{"amd-epyc-2c", "AMD EPYC", "none", "gcc", "abc", "qmvlab bench"};
  {
    CsvWriter w(dir + "/bench.csv", bench_header(), false);
    w.write(bench_fields(old_ctx, timed("q4_K.cpu.avx2_q8k", "q8_K", 4096, 4096, 2, uniform(50, 500), "before", 1)));
    CsvWriter p(dir + "/peak.csv", peak_header(), false);
    RunContext masked = old_ctx;
    masked.machine += "-isa-avx2-fma-f16c";
    p.write(peak_fields(masked, PeakRow{1, 1 << 30, 5, 19.5, 19.25}));
  }
  EXPECT_EQ(read_timed_csv(dir + "/bench.csv").machine, "amd-zen3-2c");
  EXPECT_EQ(read_results_csv(dir + "/bench.csv").machine, "amd-zen3-2c");
  // The folder's context comes from its peak file here (no sweep, no decode).
  const ResultsSummary s = summarize_results(dir);
  EXPECT_EQ(s.machine, "amd-zen3-2c-isa-avx2-fma-f16c");
  const std::string text = summary_text(s);
  EXPECT_NE(text.find("machine amd-zen3-2c-isa-avx2-fma-f16c (AMD EPYC)"), std::string::npos) << text;
  EXPECT_EQ(text.find("amd-epyc"), std::string::npos) << text;
  const auto r = qmvlab("report " + dir + "/bench.csv");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("machine amd-zen3-2c (AMD EPYC)"), std::string::npos) << r.output;
}

TEST(SummaryCli, MarkdownEmbedsThePlotsPresent) {
  const std::string dir = fresh_dir("summary_md");
  const RandomSweep rs = random_sweep(true);
  write_sweep(dir + "/default.csv", rs.lines);
  std::set<std::string> pngs;
  const int n = uniform_int(1, 4);
  for (int i = 0; i < n; ++i) pngs.insert(fmt::format("plot{}{}.png", uniform_int(0, 999), i % 2 ? "-leaderboard" : ""));
  for (const auto& p : pngs) std::ofstream(dir + "/" + p) << "png";
  std::ofstream(dir + "/notes.txt") << "x";

  const std::string elsewhere = fresh_dir("summary_md_out") + "/R.md";
  const auto r = qmvlab("report --summary " + dir + " --markdown " + elsewhere);
  ASSERT_EQ(r.code, 0) << r.output;
  std::stringstream md;
  md << std::ifstream(elsewhere).rdbuf();
  EXPECT_EQ(testing::count_lines(md.str(), "!["), static_cast<int>(pngs.size())) << md.str();
  const std::string rel = fs::path(dir).lexically_relative(fs::path(elsewhere).parent_path()).generic_string();
  for (const auto& p : pngs) EXPECT_NE(md.str().find("](" + rel + "/" + p + ")"), std::string::npos) << p << md.str();
  EXPECT_EQ(md.str().find("notes.txt"), std::string::npos);
  EXPECT_NE(md.str().find("### Per shape"), std::string::npos);
  // The terminal report is the short one.
  EXPECT_EQ(r.output.find("### Per shape"), std::string::npos);

  // By default the Markdown goes beside the CSVs, the plots by their file names.
  const auto d = qmvlab("report --summary " + dir);
  ASSERT_EQ(d.code, 0) << d.output;
  std::stringstream md2;
  md2 << std::ifstream(dir + "/REPORT.md").rdbuf();
  for (const auto& p : pngs) EXPECT_NE(md2.str().find("](" + p + ")"), std::string::npos) << p << md2.str();
}

TEST(SummaryCli, BrokenCsvIsOneLineAndNonZero) {
  const std::string dir = fresh_dir("summary_broken");
  RandomSweep rs = random_sweep(false);
  write_sweep(dir + "/default.csv", rs.lines);
  // A timed row whose time is not a number.
  std::stringstream text;
  text << std::ifstream(dir + "/default.csv").rdbuf();
  std::string csv = text.str();
  std::size_t i = 0;
  while (rs.lines[i].status != "ok") ++i;
  const std::string bad = fmt::format("{}", rs.lines[i].row.time_median_us);
  const std::size_t at = csv.find("," + bad + ",");
  ASSERT_NE(at, std::string::npos);
  // Not a number, NaN, an infinity and a negative time: each refused with file, line and column.
  for (const auto& [value, why] : std::vector<std::pair<std::string, std::string>>{
           {"fast", "is not a number"}, {"nan", "is not a finite number"}, {"inf", "is not a finite number"},
           {"-5.5", "is negative"}}) {
    std::string damaged = csv;
    damaged.replace(at + 1, bad.size(), value);
    std::ofstream(dir + "/default.csv") << damaged;
    expect_error("report --summary " + dir + " --no-markdown",
                 fmt::format("default.csv: line {}: column time_median_us: '{}' {}", i + 2, value, why));
  }
  expect_error("report --summary " + dir + "/missing", "no such folder");
  // Neither files nor a folder.
  EXPECT_NE(qmvlab("report").code, 0);
}

// A status no sweep writes is refused by every reader of timed rows (report's, the
// summary's, compare's), naming the file, the line and the column.
TEST(SummaryCli, AnUnknownStatusIsRefused) {
  const std::string bogus = std::string(QMV_SOURCE_DIR) + "/tests/bad_input/files/sweep_status_bogus.csv";
  const std::string message = "sweep_status_bogus.csv: line 2: column status: 'bogus' is not a sweep status";
  EXPECT_THROW(
      try { (void)read_timed_csv(bogus); } catch (const std::runtime_error& e) {
        EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
        throw;
      },
      std::runtime_error);
  EXPECT_THROW((void)read_results_csv(bogus), CompareError);
  const std::string dir = fresh_dir("summary_bogus_status");
  fs::copy_file(bogus, dir + "/default.csv");
  expect_error("report --summary " + dir + " --no-markdown",
               "default.csv: line 2: column status: 'bogus' is not a sweep status");
}

// `qmvlab report FILE` and `qmvlab compare` on bench CSVs with ggml rows.
std::vector<BenchRow> bench_rows(std::map<GroupKey, std::vector<double>>& ratios) {
  std::vector<BenchRow> rows;
  for (const std::string w : {"q4_0", "q6_K"})
    for (auto [r, c] : std::vector<std::pair<int, int>>{{4096, 4096}, {1024, 4096}})
      for (int t : {1, 2}) {
        const double tq = uniform(100, 900), aq = uniform(0, 50), tg = uniform(100, 900);
        rows.push_back(timed(w + ".cpu.avx2_q8k", "q8_K", r, c, t, tq, "before", aq));
        rows.push_back(timed(w + ".ggml.cpu", "f32", r, c, t, tg, "in_call", 0));
        ratios[{w, t}].push_back(tg / (tq + aq));
      }
  return rows;
}

TEST(SummaryCli, ReportAndCompareShowThePeerRatio) {
  std::map<GroupKey, std::vector<double>> ra, rb;
  const auto a = bench_rows(ra), b = bench_rows(rb);
  write_bench(tmp("peer_a.csv"), a);
  write_bench(tmp("peer_b.csv"), b);
  const auto r = qmvlab("report " + tmp("peer_a.csv"));
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("qmvlab against ggml"), std::string::npos) << r.output;
  const auto groups_a = peer_groups(peer_points(timed_rows(a)));
  for (const PeerGroup& g : groups_a) {
    EXPECT_NEAR(g.ratio_geomean, geomean_by_product(ra.at({g.weight_type, g.threads})), 1e-9);
    EXPECT_NE(r.output.find(ratio_range(g.ratio_geomean, g.ratio_min, g.ratio_max, g.ratio_shapes)), std::string::npos)
        << r.output;
  }

  const auto c = qmvlab("compare " + tmp("peer_a.csv") + " " + tmp("peer_b.csv"));
  ASSERT_EQ(c.code, 0) << c.output;
  EXPECT_NE(c.output.find("where qmvlab stands against ggml"), std::string::npos) << c.output;
  const PeerComparison p = compare_peers(read_results_csv(tmp("peer_a.csv")), read_results_csv(tmp("peer_b.csv")));
  EXPECT_TRUE(p.same_threads);
  ASSERT_EQ(p.rows.size(), ra.size());
  for (const auto& row : p.rows) {
    EXPECT_NEAR(row.a.ratio_geomean, geomean_by_product(ra.at({row.weight_type, row.threads_a})), 1e-9);
    EXPECT_NEAR(row.b.ratio_geomean, geomean_by_product(rb.at({row.weight_type, row.threads_b})), 1e-9);
  }
  // Only one side with ggml rows: one line says so.
  std::vector<BenchRow> plain;
  for (const auto& x : b)
    if (!is_peer_kernel(x.kernel)) plain.push_back(x);
  write_bench(tmp("peer_plain.csv"), plain);
  const auto one = qmvlab("compare " + tmp("peer_a.csv") + " " + tmp("peer_plain.csv"));
  ASSERT_EQ(one.code, 0) << one.output;
  EXPECT_NE(one.output.find("peer ratio: only A has ggml rows"), std::string::npos) << one.output;
  // By shape, ggml's rows stay out of qmvlab's match.
  const auto by_shape = qmvlab("compare " + tmp("peer_a.csv") + " " + tmp("peer_b.csv") + " --by shape");
  ASSERT_EQ(by_shape.code, 0) << by_shape.output;
  EXPECT_EQ(by_shape.output.find("ggml.cpu ("), std::string::npos) << by_shape.output;
  EXPECT_NE(by_shape.output.find(fmt::format("ggml rows left out of the match by shape: {} in A", a.size() / 2)),
            std::string::npos)
      << by_shape.output;
}

}  // namespace
}  // namespace qmv
