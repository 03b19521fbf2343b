#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "harness/csv.h"
#include "harness/experiment.h"
#include "harness/gate.h"
#include "tests/scoped_env.h"
#include "tests/test_seed.h"

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
  if (g() % 2) {  // a kernel with a weight transform
    r.prepare_us = u(g);
    r.prepared_bytes = 1 + static_cast<std::int64_t>(g() % (1ull << 36));
  }
  r.n = 1 + static_cast<int>(g() % 8);
  return r;
}

TEST(Csv, EscapesCommasQuotesAndNewlines) {
  EXPECT_EQ(csv_escape("plain"), "plain");
  EXPECT_EQ(csv_escape("a,b"), "\"a,b\"");
  EXPECT_EQ(csv_escape("say \"hi\""), "\"say \"\"hi\"\"\"");
}

TEST(Csv, BenchRowsRoundTripExactly) {
  std::mt19937_64 g(qmv::testing::fresh_seed());
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
    // Written as the shortest text that reads back to the same double, and read with
    // std::from_chars, which rounds correctly.
    EXPECT_EQ(back[i].time_median_us, rows[i].time_median_us);
    EXPECT_EQ(back[i].gbps_median, rows[i].gbps_median);
    EXPECT_EQ(back[i].peak_pct, rows[i].peak_pct);
    EXPECT_EQ(back[i].gflops, rows[i].gflops);
    EXPECT_EQ(back[i].prepare_us, rows[i].prepare_us);
    EXPECT_EQ(back[i].prepared_bytes, rows[i].prepared_bytes);
    EXPECT_EQ(back[i].n, rows[i].n);
  }
}

// The weight transform's columns follow act_quant_median_us whatever was selected, so
// every CPU bench has one header; a kernel without a transform leaves them empty.
TEST(Csv, TheWeightTransformColumnsAreAlwaysThereAndEmptyWithoutOne) {
  for (bool gpu : {false, true}) {
    const auto h = bench_header(gpu);
    const auto at = std::find(h.begin(), h.end(), "act_quant_median_us");
    ASSERT_LT(at + 2, h.end());
    EXPECT_EQ(at[1], "prepare_us");
    EXPECT_EQ(at[2], "prepared_bytes");
    std::mt19937_64 g(qmv::testing::fresh_seed());
    BenchRow r = random_bench_row(g, 0);
    r.prepare_us = 0, r.prepared_bytes = 0;
    const auto f = bench_fields(RunContext{}, r, gpu);
    ASSERT_EQ(f.size(), h.size());
    EXPECT_EQ(f[static_cast<std::size_t>(at - h.begin()) + 1], "");
    EXPECT_EQ(f[static_cast<std::size_t>(at - h.begin()) + 2], "");
  }
}

// Files from before the weight transform's columns, and from before the act_quant ones,
// are bench files still, read with the columns they lack as 0; the sweep's bench columns
// stay those of the files before the weight transform's, so existing sweeps resume.
TEST(Csv, OlderBenchFilesStillRead) {
  std::mt19937_64 g(qmv::testing::fresh_seed());
  const RunContext ctx{"m", "cpu", "none", "gcc", "abc", "qmvlab bench"};
  for (bool gpu : {false, true}) {
    // Newest first: before n, before the weight transform's, before act_quant.
    const auto headers = legacy_bench_headers(gpu);
    ASSERT_EQ(headers.size(), 3u);
    for (std::size_t v = 0; v < headers.size(); ++v) {
      const auto& old = headers[v];
      EXPECT_EQ(std::count(old.begin(), old.end(), "n"), 0);
      EXPECT_EQ(std::count(old.begin(), old.end(), "prepare_us"), v == 0 ? 1 : 0);
      EXPECT_EQ(std::count(old.begin(), old.end(), "act_quant"), v <= 1 ? 1 : 0);
      const std::string path = temp_path(fmt::format("old-{}-{}.csv", gpu, v));
      std::vector<BenchRow> rows;
      {
        CsvWriter w(path, old, false);
        const auto full = bench_header(gpu);
        for (int i = 0; i < 3; ++i) {
          rows.push_back(random_bench_row(g, i));
          rows.back().act_quant = "before";
          rows.back().act_quant_median_us = 1.5;
          rows.back().n = 4;
          const auto all = bench_fields(ctx, rows.back(), gpu);
          std::vector<std::string> f;
          for (const auto& c : old)
            f.push_back(all[static_cast<std::size_t>(std::find(full.begin(), full.end(), c) - full.begin())]);
          w.write(f);
        }
      }
      EXPECT_EQ(detect_csv_kind(path), CsvKind::Bench) << path;
      const auto back = read_bench_csv(path);
      ASSERT_EQ(back.size(), rows.size());
      for (std::size_t i = 0; i < rows.size(); ++i) {
        EXPECT_EQ(back[i].time_median_us, rows[i].time_median_us);
        EXPECT_EQ(back[i].prepare_us, v == 0 ? rows[i].prepare_us : 0);
        EXPECT_EQ(back[i].prepared_bytes, v == 0 ? rows[i].prepared_bytes : 0);
        EXPECT_EQ(back[i].act_quant_median_us, v <= 1 ? 1.5 : 0);
        EXPECT_EQ(back[i].n, 1);  // a file without the column: one vector per call
      }
    }
  }
  const auto sweep = sweep_header();
  // The bench columns but the weight transform's.
  std::vector<std::string> bench_part = bench_header();
  std::erase(bench_part, "prepare_us");
  std::erase(bench_part, "prepared_bytes");
  ASSERT_GT(sweep.size(), bench_part.size());
  EXPECT_TRUE(std::equal(bench_part.begin(), bench_part.end(), sweep.begin()));
  EXPECT_EQ(sweep_bench_fields(ctx, random_bench_row(g, 0)).size(), bench_part.size());
}

TEST(Csv, CheckAndPeakRowsRoundTrip) {
  const RunContext ctx{"m", "cpu", "none", "gcc", "abc", "qmvlab check"};
  const std::string path = temp_path("check.csv");
  CheckRow c;
  c.kernel = "q6_K.cpu.scalar_f32";
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
  EXPECT_EQ(back[0].nmse_kernel, c.nmse_kernel);
  EXPECT_EQ(back[0].failure, c.failure);
  EXPECT_FALSE(back[0].passed);

  const std::string ppath = temp_path("peak.csv");
  PeakRow paged{2, 1 << 30, 7, 17.5, 16.25};
  paged.read_loop = "avx2.s4.pf512";
  paged.huge_page_pct = 87.5;
  {
    CsvWriter w(ppath, peak_header(), false);
    w.write(peak_fields(ctx, paged));
    w.write(peak_fields(ctx, PeakRow{1, 1 << 30, 7, 9.5, 9.25}));  // pages unknown
  }
  EXPECT_EQ(detect_csv_kind(ppath), CsvKind::Peak);
  const auto peaks = read_peak_csv(ppath);
  ASSERT_EQ(peaks.size(), 2u);
  EXPECT_EQ(peaks[0].threads, 2);
  EXPECT_EQ(peaks[0].gbps_best, 17.5);
  EXPECT_EQ(peaks[0].read_loop, "avx2.s4.pf512");
  EXPECT_EQ(peaks[0].huge_page_pct, 87.5);
  EXPECT_LT(peaks[1].huge_page_pct, 0);
}

// Peak files from before the huge_page_pct column, and from before read_loop too, are
// still peak files, read with those columns empty.
// Files written before kernels were renamed (kernels/former_names.h): a bench, a check
// and a gate baseline read their rows under the kernels' names now, whatever reads them
// (report, summary, auto from a bench CSV, the gate) matching today's kernels.
TEST(Csv, RowsUnderAFormerKernelNameReadUnderItsNameNow) {
  const RunContext ctx{"m", "cpu", "none", "gcc", "abc", "qmvlab bench"};
  std::mt19937_64 g(qmv::testing::fresh_seed());
  const std::string bench = temp_path("former-names-bench.csv");
  {
    CsvWriter w(bench, bench_header(), false);
    for (const char* kernel : {"q6_K.cpu.avx2_2row_q8k", "q4_K.cuda.multiwarp_f32.w3", "q4_K.cpu.avx2_q8k"}) {
      BenchRow r = random_bench_row(g, 0);
      r.kernel = kernel;
      w.write(bench_fields(ctx, r));
    }
  }
  const auto rows = read_bench_csv(bench);
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[0].kernel, "q6_K.cpu.avx2_x2_q8k");
  EXPECT_EQ(rows[1].kernel, "q4_K.cuda.warpx3_f32");
  EXPECT_EQ(rows[2].kernel, "q4_K.cpu.avx2_q8k");

  const std::string check = temp_path("former-names-check.csv");
  {
    CsvWriter w(check, check_header(), false);
    CheckRow c;
    c.kernel = "q8_0.cuda.warp_row_dp4a_q8_1";
    c.rows = 67;
    c.cols = 512;
    c.activation = "gaussian";
    c.passed = true;
    w.write(check_fields(ctx, c));
  }
  const auto checked = read_check_csv(check);
  ASSERT_EQ(checked.size(), 1u);
  EXPECT_EQ(checked[0].kernel, "q8_0.cuda.warp_dp4a_q8_1");

  const std::string baseline = temp_path("former-names-gate-baseline.csv");
  write_gate_baseline(baseline, {{"f32.cpu.avx2_4row", "f32.cpu.scalar", {67, 4128}, 1, 30.0}});
  const auto ratios = read_gate_baseline(baseline);
  ASSERT_EQ(ratios.size(), 1u);
  EXPECT_EQ(ratios[0].kernel, "f32.cpu.avx2_x4");
  EXPECT_EQ(ratios[0].reference, "f32.cpu.scalar");
}

TEST(Csv, OlderPeakFilesReadWithoutTheNewerColumns) {
  const RunContext ctx = current_context("qmvlab peak");
  const PeakRow row{2, 1 << 30, 7, 17.5, 16.25, "cpu", 0, "avx512.s8", 100};
  const std::vector<std::string> fields = peak_fields(ctx, row);
  const std::vector<std::string> header = peak_header();
  for (const auto& legacy : legacy_peak_headers()) {
    const std::string path = temp_path("old-peak.csv");
    {
      CsvWriter w(path, legacy, false);
      std::vector<std::string> f;
      for (const std::string& column : legacy)
        f.push_back(fields[std::find(header.begin(), header.end(), column) - header.begin()]);
      w.write(f);
    }
    SCOPED_TRACE(fmt::format("{} columns", legacy.size()));
    EXPECT_EQ(detect_csv_kind(path), CsvKind::Peak);
    const auto back = read_peak_csv(path);
    ASSERT_EQ(back.size(), 1u);
    EXPECT_EQ(back[0].gbps_best, 17.5);
    EXPECT_LT(back[0].huge_page_pct, 0);
    const bool has_loop = std::find(legacy.begin(), legacy.end(), "read_loop") != legacy.end();
    EXPECT_EQ(back[0].read_loop, has_loop ? "avx512.s8" : "");
  }
  EXPECT_EQ(legacy_peak_headers().size(), 2u);
}

// The context names the Slurm job it runs in: an array task by the array's id and its
// index (how squeue, sacct and scancel name it), any other job by its own id.
TEST(Csv, ContextNamesTheSlurmJobItRunsIn) {
  {
    const testing::ScopedEnv env(testing::no_slurm_job());
    const RunContext c = current_context("cmd");
    EXPECT_EQ(c.slurm_job_id, "");
    EXPECT_EQ(c.slurm_array_task_id, "");
    EXPECT_EQ(c.slurm_node, "");
    EXPECT_FALSE(c.machine.empty());
  }
  {
    const testing::ScopedEnv env({{"SLURM_JOB_ID", "900"}, {"SLURM_ARRAY_JOB_ID", std::nullopt},
                                  {"SLURM_ARRAY_TASK_ID", std::nullopt}, {"SLURMD_NODENAME", "gpu-a100-03"}});
    const RunContext c = current_context("cmd");
    EXPECT_EQ(c.slurm_job_id, "900");
    EXPECT_EQ(c.slurm_array_task_id, "");
    EXPECT_EQ(c.slurm_node, "gpu-a100-03");
  }
  {
    const testing::ScopedEnv env({{"SLURM_JOB_ID", "913"}, {"SLURM_ARRAY_JOB_ID", "880"},
                                  {"SLURM_ARRAY_TASK_ID", "4"}, {"SLURMD_NODENAME", "n1"}});
    const RunContext c = current_context("cmd");
    EXPECT_EQ(c.slurm_job_id, "880");
    EXPECT_EQ(c.slurm_array_task_id, "4");
    EXPECT_EQ(c.slurm_node, "n1");
  }
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

std::string file_text(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

TEST(Csv, WideningRewritesAnOlderHeaderAndKeepsEveryRow) {
  const std::vector<std::string> older = {"a", "b", "command"};
  const std::vector<std::string> wider = {"a", "b", "x_ms", "y_ms", "command"};
  std::mt19937_64 g(qmv::testing::fresh_seed());
  const std::string a1 = std::to_string(g()), b2 = std::to_string(g());
  const std::string path = temp_path("widen.csv");
  {
    CsvWriter w(path, older, false);
    w.write({a1, "plan q4_K=a,q6_K=b", "qmvlab decode --plan \"x, y\""});
    w.write({"", b2, "cmd"});
  }
  ASSERT_TRUE(widen_csv_header(path, wider, {{"z"}, older}));
  {
    CsvWriter w(path, wider, true);  // the append the widening is for
    w.write({"3", "4", "5.5", "6.5", "cmd2"});
  }
  const std::string expected = "a,b,x_ms,y_ms,command\n" + a1 +
                               ",\"plan q4_K=a,q6_K=b\",,,\"qmvlab decode --plan \"\"x, y\"\"\"\n"
                               "," + b2 + ",,,cmd\n"
                               "3,4,5.5,6.5,cmd2\n";
  EXPECT_EQ(file_text(path), expected);
  EXPECT_FALSE(widen_csv_header(path, wider, {older})) << "already in the wider header";
  EXPECT_EQ(file_text(path), expected);
}

TEST(Csv, WideningLeavesOtherFilesAlone) {
  const std::string path = temp_path("widen-other.csv");
  { CsvWriter(path, {"p", "q"}, false).write({"1", "2"}); }
  const std::string before = file_text(path);
  EXPECT_FALSE(widen_csv_header(path, {"a", "b", "command"}, {{"a", "command"}}));
  EXPECT_EQ(file_text(path), before);
  EXPECT_THROW(CsvWriter(path, {"a", "b", "command"}, true), std::runtime_error);
  EXPECT_FALSE(widen_csv_header(temp_path("widen-missing.csv"), {"a"}, {{"a"}}));
  EXPECT_FALSE(std::filesystem::exists(temp_path("widen-missing.csv")));
  // An older header with a column the new one lacks would lose data: a bug in the caller.
  { CsvWriter(path, {"a", "gone"}, false).write({"1", "2"}); }
  EXPECT_THROW(widen_csv_header(path, {"a", "b"}, {{"a", "gone"}}), std::logic_error);
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

// A copy of `from` with CRLF line ends.
void write_crlf_copy(const std::string& from, const std::string& to) {
  std::ifstream in(from, std::ios::binary);
  std::ofstream out(to, std::ios::binary | std::ios::trunc);
  for (std::string line; std::getline(in, line);) out << line << "\r\n";
}

// Every reader takes a file saved with CRLF line ends as the same file with LF: the
// header is matched without its '\r', and the rows read the same.
TEST(Csv, CrlfLineEndsReadAsLf) {
  EXPECT_EQ(header_line("a,b\r\nc,d\r\n"), "a,b");
  EXPECT_EQ(header_line("a,b"), "a,b");
  EXPECT_EQ(header_line("\r\n"), "");

  const std::string lf = temp_path("crlf-bench-lf.csv"), crlf = temp_path("crlf-bench-crlf.csv");
  {
    const RunContext ctx{"m", "cpu, with a comma", "none", "gcc", "abc", "cmd"};
    std::mt19937_64 g(3);
    CsvWriter w(lf, bench_header(), false);
    for (int i = 0; i < 5; ++i) w.write(bench_fields(ctx, random_bench_row(g, i)));
  }
  write_crlf_copy(lf, crlf);
  EXPECT_EQ(detect_csv_kind(crlf), CsvKind::Bench);
  const std::vector<BenchRow> want = read_bench_csv(lf), got = read_bench_csv(crlf);
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].kernel, want[i].kernel);
    EXPECT_EQ(got[i].rows, want[i].rows);
    EXPECT_EQ(got[i].gbps_median, want[i].gbps_median);
  }
  // Appending in the same columns goes on in the file.
  {
    const RunContext ctx{"m", "cpu", "none", "gcc", "abc", "cmd"};
    std::mt19937_64 g(4);
    CsvWriter(crlf, bench_header(), true).write(bench_fields(ctx, random_bench_row(g, 9)));
  }
  EXPECT_EQ(read_bench_csv(crlf).size(), want.size() + 1);

  const std::string sweep_lf = std::string(QMV_SOURCE_DIR) + "/tests/bad_input/files/sweep_a.csv";
  const std::string sweep_crlf = temp_path("crlf-sweep.csv");
  write_crlf_copy(sweep_lf, sweep_crlf);
  EXPECT_EQ(detect_csv_kind(sweep_crlf), CsvKind::Sweep);
  bool partial = true;
  EXPECT_EQ(read_sweep_csv(sweep_crlf, &partial).rows, read_sweep_csv(sweep_lf).rows);
  EXPECT_FALSE(partial);
  // The header alone, with its line end or cut before the '\n'; a last row cut short.
  std::string header;
  for (const auto& c : sweep_header()) header += (header.empty() ? "" : ",") + c;
  for (const std::string& text : {header + "\r\n", header + "\r"}) {
    std::ofstream(sweep_crlf, std::ios::binary | std::ios::trunc) << text;
    EXPECT_TRUE(read_sweep_csv(sweep_crlf, &partial).rows.empty());
    EXPECT_FALSE(partial);
  }
  std::ofstream(sweep_crlf, std::ios::binary | std::ios::trunc) << header << "\r\nm,cpu";
  EXPECT_TRUE(read_sweep_csv(sweep_crlf, &partial).rows.empty());
  EXPECT_TRUE(partial);
}

// The text of a file and its lines.
std::vector<std::string> lines_of(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  return lines;
}

void write_lines(const std::string& path, const std::vector<std::string>& lines) {
  std::ofstream out(path, std::ios::trunc);
  for (const auto& l : lines) out << l << '\n';
}

template <class Fn>
std::string error_of(Fn fn) {
  try {
    fn();
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "no error";
}

// A fault on a random row of a random bench CSV: the error names the file, the line it
// is on (the header is line 1) and, for a bad number, the column and its text.
TEST(Csv, ReadErrorsNameFileLineAndColumn) {
  std::mt19937_64 g(qmv::testing::fresh_seed());
  const RunContext ctx{"m", "cpu", "none", "gcc", "abc", "cmd"};
  const std::string path = temp_path("broken.csv");
  const int n = 3 + static_cast<int>(g() % 20);
  {
    CsvWriter w(path, bench_header(), false);
    for (int i = 0; i < n; ++i) w.write(bench_fields(ctx, random_bench_row(g, i)));
  }
  const std::vector<std::string> good = lines_of(path);
  ASSERT_EQ(good.size(), static_cast<std::size_t>(n) + 1);
  const auto header = bench_header();
  const std::size_t row = 1 + g() % static_cast<std::size_t>(n);  // index into good: line row + 1
  const std::string at = fmt::format("broken.csv: line {}: ", row + 1);

  // Each column a number is read from, with text that is not one.
  for (const char* column :
       {"rows", "threads", "bytes_per_call", "gbps_median", "gflops", "prepare_us", "prepared_bytes"}) {
    const std::size_t c = static_cast<std::size_t>(std::find(header.begin(), header.end(), column) - header.begin());
    ASSERT_LT(c, header.size());
    std::vector<std::string> fields = bench_fields(ctx, random_bench_row(g, 0));
    fields[c] = g() % 2 ? "12abc" : "fast";
    std::vector<std::string> lines = good;
    std::string line;
    for (std::size_t i = 0; i < fields.size(); ++i) line += (i ? "," : "") + csv_escape(fields[i]);
    lines[row] = line;
    write_lines(path, lines);
    EXPECT_NE(error_of([&] { read_bench_csv(path); }).find(at + fmt::format("column {}: '{}' is not a number", column, fields[c])),
              std::string::npos)
        << error_of([&] { read_bench_csv(path); });
  }
  const auto expect_at = [&](const std::string& line_text, const std::string& want) {
    std::vector<std::string> lines = good;
    lines[row] = line_text;
    write_lines(path, lines);
    const std::string e = error_of([&] { read_bench_csv(path); });
    EXPECT_NE(e.find(at + want), std::string::npos) << e;
  };
  expect_at(good[row].substr(0, good[row].rfind(',')), "fewer fields than the header has columns");
  expect_at(good[row] + ",extra", "more fields than the header has columns");
  expect_at("\"" + good[row], "a quoted field is not closed");
  expect_at("", "fewer fields than the header has columns");

  // A fault in the header is on line 1 (the library's own message says line -1).
  std::vector<std::string> lines = good;
  lines[0] = "\"" + lines[0];
  write_lines(path, lines);
  EXPECT_NE(error_of([&] { read_bench_csv(path); }).find("broken.csv: line 1: a quoted field is not closed"),
            std::string::npos)
      << error_of([&] { read_bench_csv(path); });
  lines[0] = good[0] + ",kernel";
  write_lines(path, lines);
  EXPECT_NE(error_of([&] { read_bench_csv(path); }).find("broken.csv: line 1: column 'kernel' appears twice"),
            std::string::npos)
      << error_of([&] { read_bench_csv(path); });
  lines[0] = good[0].substr(good[0].find(',') + 1);  // no `machine` column
  write_lines(path, lines);
  EXPECT_NE(error_of([&] { read_bench_csv(path); }).find("broken.csv: not a bench CSV: the header has no column(s) machine"),
            std::string::npos)
      << error_of([&] { read_bench_csv(path); });
  write_lines(path, {});
  EXPECT_NE(error_of([&] { read_bench_csv(path); }).find("broken.csv: empty file"), std::string::npos);
}

TEST(Csv, CheckAndPeakNumbersAreReadWhole) {
  const RunContext ctx{"m", "cpu", "none", "gcc", "abc", "cmd"};
  const std::string check = temp_path("broken-check.csv");
  {
    CheckRow c;
    CsvWriter w(check, check_header(), false);
    w.write(check_fields(ctx, c));
    auto fields = check_fields(ctx, c);
    fields[5 + 8] = "-1";  // seed, after the five context columns
    w.write(fields);
  }
  EXPECT_NE(error_of([&] { read_check_csv(check); }).find("broken-check.csv: line 3: column seed: '-1' is negative"),
            std::string::npos)
      << error_of([&] { read_check_csv(check); });
  const std::string peak = temp_path("broken-peak.csv");
  {
    CsvWriter w(peak, peak_header(), false);
    auto fields = peak_fields(ctx, PeakRow{2, 1 << 30, 7, 17.5, 16.25});
    fields[5] = "99999999999";  // threads: beyond an int
    w.write(fields);
  }
  EXPECT_NE(error_of([&] { read_peak_csv(peak); }).find("broken-peak.csv: line 2: column threads: '99999999999' is out of range"),
            std::string::npos)
      << error_of([&] { read_peak_csv(peak); });
}

}  // namespace
}  // namespace qmv
