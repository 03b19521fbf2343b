// GPU timing and its results files. Without a device: the GPU columns of the bench
// and peak CSVs round-trip, old files without them still read, a GPU results file
// compares with a CPU one, the datasheet arithmetic, and run_bench skipping a CUDA
// kernel with the device's absence as the reason. With a device: CUDA events against
// the host clock, the measured copy peak against the datasheet, and run_bench timing a
// CUDA kernel (with the Q8_1 quantizer columns for a Q8_1 kernel) and a batch kernel
// at each count of vectors.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "harness/bench.h"
#include "harness/compare.h"
#include "harness/csv.h"
#include "harness/peak.h"
#include "kernels/cuda/cuda_device.h"
#include "kernels/registry.h"
#include "tests/test_seed.h"

namespace qmv {
namespace {

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

std::string temp_path(const std::string& name) {
  const std::string dir = std::string(QMV_TEST_TMP) + "/cuda_bench";
  std::filesystem::create_directories(dir);
  return dir + "/" + name;
}

BenchRow random_row(const std::string& kernel, bool gpu) {
  BenchRow r;
  r.kernel = kernel;
  r.op = "matvec";
  r.weight_type = "q4_K";
  r.act_format = gpu ? "q8_1" : "q8_K";
  r.backend = gpu ? "cuda" : "cpu";
  r.rows = uniform_int(1, 20000), r.cols = 256 * uniform_int(1, 60), r.threads = uniform_int(1, 8);
  r.cache = "cold";
  r.tile_rows = 64, r.min_parallel_rows = 128;
  r.repetitions = uniform_int(1, 20);
  r.time_min_us = uniform(1, 10), r.time_median_us = uniform(10, 20), r.time_max_us = uniform(20, 30);
  r.bytes_per_call = uniform_int(1, 1 << 30);
  r.gbps_median = uniform(1, 3000), r.gbps_best = uniform(1, 3000), r.peak_gbps = uniform(1, 3000);
  r.peak_pct = uniform(0, 100), r.gflops = uniform(1, 100);
  if (gpu) {
    r.launches_per_rep = uniform_int(10, 100000);
    r.quant_median_us = uniform(1, 5), r.time_with_quant_median_us = uniform(10, 30);
    r.datasheet_gbps = uniform(1000, 5000), r.datasheet_pct = uniform(1, 99);
    r.rotation_bytes = uniform_int(1 << 20, 1 << 30);
    r.gpu_name = "Test GPU, " + std::to_string(uniform_int(1, 999)) + " GB";  // a comma to escape
    r.gpu_driver = std::to_string(uniform_int(12, 13)) + "." + std::to_string(uniform_int(0, 9));
    r.gpu_sm_count = uniform_int(1, 200), r.gpu_sm_clock_mhz = uniform_int(500, 3000);
    r.gpu_mem_clock_mhz = uniform_int(500, 3000), r.gpu_bus_bits = 64 * uniform_int(1, 100);
    r.gpu_l2_bytes = uniform_int(1 << 20, 1 << 27);
  }
  return r;
}

void expect_same(const BenchRow& a, const BenchRow& b) {
  EXPECT_EQ(a.kernel, b.kernel);
  EXPECT_EQ(a.backend, b.backend);
  EXPECT_EQ(a.rows, b.rows);
  EXPECT_DOUBLE_EQ(a.time_median_us, b.time_median_us);  // the CPU columns' reader is not bit-exact
  EXPECT_EQ(a.launches_per_rep, b.launches_per_rep);
  EXPECT_EQ(a.quant_median_us, b.quant_median_us);
  EXPECT_EQ(a.time_with_quant_median_us, b.time_with_quant_median_us);
  EXPECT_EQ(a.datasheet_gbps, b.datasheet_gbps);
  EXPECT_EQ(a.datasheet_pct, b.datasheet_pct);
  EXPECT_EQ(a.rotation_bytes, b.rotation_bytes);
  EXPECT_EQ(a.gpu_name, b.gpu_name);
  EXPECT_EQ(a.gpu_driver, b.gpu_driver);
  EXPECT_EQ(a.gpu_sm_count, b.gpu_sm_count);
  EXPECT_EQ(a.gpu_sm_clock_mhz, b.gpu_sm_clock_mhz);
  EXPECT_EQ(a.gpu_mem_clock_mhz, b.gpu_mem_clock_mhz);
  EXPECT_EQ(a.gpu_bus_bits, b.gpu_bus_bits);
  EXPECT_EQ(a.gpu_l2_bytes, b.gpu_l2_bytes);
}

TEST(CudaBenchCsv, GpuColumnsRoundTripBesideCpuRows) {
  const std::string path = temp_path("gpu-bench.csv");
  const RunContext ctx{"m", "cpu", "gpu", "gcc", "abc", "qmvlab bench"};
  std::vector<BenchRow> rows;
  for (int i = 0; i < 6; ++i) rows.push_back(random_row("q4_K.x." + std::to_string(i), i % 2 == 1));
  {
    CsvWriter w(path, bench_header(true), false);
    for (const auto& r : rows) w.write(bench_fields(ctx, r, true));
  }
  EXPECT_EQ(detect_csv_kind(path), CsvKind::Bench);
  const auto back = read_bench_csv(path);
  ASSERT_EQ(back.size(), rows.size());
  for (std::size_t i = 0; i < rows.size(); ++i) expect_same(rows[i], back[i]);
  // A CPU row leaves the GPU columns empty.
  std::ifstream in(path);
  std::string header, cpu_line;
  std::getline(in, header);
  std::getline(in, cpu_line);
  EXPECT_NE(header.find("time_with_quant_median_us"), std::string::npos);
  EXPECT_NE(cpu_line.find(",,,,,,,,,,,,,"), std::string::npos) << cpu_line;
  // Appending CPU-only columns to it is refused by name.
  EXPECT_THROW(CsvWriter(path, bench_header(false), true), std::runtime_error);
}

TEST(CudaBenchCsv, FilesWithoutGpuColumnsReadAsBefore) {
  const std::string path = temp_path("cpu-bench.csv");
  const RunContext ctx{"m", "cpu", "none", "gcc", "abc", "qmvlab bench"};
  const BenchRow row = random_row("q4_K.cpu.x", false);
  { CsvWriter(path, bench_header(), false).write(bench_fields(ctx, row)); }
  EXPECT_EQ(detect_csv_kind(path), CsvKind::Bench);
  const auto back = read_bench_csv(path);
  ASSERT_EQ(back.size(), 1u);
  expect_same(row, back[0]);
  EXPECT_TRUE(back[0].gpu_name.empty());
  // A damaged GPU number is named.
  const std::string bad = temp_path("bad-gpu-bench.csv");
  BenchRow g = random_row("q4_K.cuda.x", true);
  auto fields = bench_fields(ctx, g, true);
  const auto header = bench_header(true);
  fields[std::find(header.begin(), header.end(), "gpu_sm_count") - header.begin()] = "many";
  { CsvWriter(bad, header, false).write(fields); }
  try {
    read_bench_csv(bad);
    ADD_FAILURE() << "a non-number in gpu_sm_count was read";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("gpu_sm_count"), std::string::npos) << e.what();
  }
}

TEST(CudaBenchCsv, PeakRowsWithDeviceAndDatasheetRoundTrip) {
  const std::string path = temp_path("peak.csv");
  const RunContext ctx{"m", "cpu", "gpu", "gcc", "abc", "qmvlab peak"};
  const PeakRow cpu{uniform_int(1, 64), 1 << 30, 7, uniform(1, 100), uniform(1, 100)};
  const PeakRow gpu{0, 1 << 30, 7, uniform(1000, 4000), uniform(1000, 4000), "cuda", uniform(1000, 5000)};
  {
    CsvWriter w(path, peak_header(true), false);
    w.write(peak_fields(ctx, cpu, true));
    w.write(peak_fields(ctx, gpu, true));
  }
  EXPECT_EQ(detect_csv_kind(path), CsvKind::Peak);
  const auto back = read_peak_csv(path);
  ASSERT_EQ(back.size(), 2u);
  EXPECT_EQ(back[0].device, "cpu");
  EXPECT_EQ(back[0].threads, cpu.threads);
  EXPECT_EQ(back[0].datasheet_gbps, 0);
  EXPECT_EQ(back[1].device, "cuda");
  EXPECT_DOUBLE_EQ(back[1].gbps_best, gpu.gbps_best);
  EXPECT_EQ(back[1].datasheet_gbps, gpu.datasheet_gbps);
  const std::string old = temp_path("old-peak.csv");
  { CsvWriter(old, peak_header(), false).write(peak_fields(ctx, cpu)); }
  EXPECT_EQ(detect_csv_kind(old), CsvKind::Peak);
  ASSERT_EQ(read_peak_csv(old).size(), 1u);
  EXPECT_EQ(read_peak_csv(old)[0].device, "cpu");
}

// `qmvlab compare --by shape` sets a GPU file beside a CPU one.
TEST(CudaBenchCsv, GpuRowsCompareWithCpuRowsByShape) {
  const std::string cpu_path = temp_path("cmp-cpu.csv"), gpu_path = temp_path("cmp-gpu.csv");
  BenchRow c = random_row("q4_K.cpu.avx2_q8k", false), g = random_row("q4_K.cuda.dp4a_q8_1", true);
  g.rows = c.rows, g.cols = c.cols;
  {
    CsvWriter w(cpu_path, bench_header(), false);
    w.write(bench_fields({"cpu-box", "cpu", "none", "gcc", "a", "x"}, c));
  }
  {
    CsvWriter w(gpu_path, bench_header(true), false);
    w.write(bench_fields({"gpu-box", "cpu", "Test GPU", "gcc", "a", "x"}, g, true));
  }
  const ResultsFile a = read_results_csv(cpu_path), b = read_results_csv(gpu_path);
  const Comparison cmp = compare_results(a, b, CompareBy::Shape, Metric::Time);
  ASSERT_EQ(cmp.matched.size(), 1u);
  EXPECT_EQ(cmp.matched[0].b.kernel, "q4_K.cuda.dp4a_q8_1");
  EXPECT_DOUBLE_EQ(cmp.matched[0].ratio, c.time_median_us / g.time_median_us);
}

// The datasheet figure is two transfers per memory clock over the bus: an H100 SXM's
// HBM3 at 2619 MHz on 5120 bits is NVIDIA's 3.35 TB/s.
TEST(CudaBenchCsv, DatasheetBandwidthFromClockAndBus) {
  cuda::DeviceInfo d;
  d.memory_clock_khz = 2619000;
  d.memory_bus_bits = 5120;
  EXPECT_NEAR(d.datasheet_gbps(), 3352.3, 0.1);
  d.memory_clock_khz = uniform_int(100000, 4000000);
  d.memory_bus_bits = 32 * uniform_int(1, 200);
  EXPECT_NEAR(d.datasheet_gbps(), 2.0 * d.memory_clock_khz * 1e3 * d.memory_bus_bits / 8 / 1e9, 1e-9);
}

// A window size is a byte count or a matrix's bytes; anything else is refused, naming it.
TEST(GpuWindowRead, SizesAreBytesOrAMatrixOfAType) {
  const std::int64_t rows = uniform_int(1, 20000), blocks = uniform_int(1, 60);
  EXPECT_EQ(parse_window_bytes(fmt::format("q4_K:{}x{}", rows, 256 * blocks)),
            static_cast<std::size_t>(rows * blocks * 144));
  EXPECT_EQ(parse_window_bytes(fmt::format("Q6_K:{}x{}", rows, 256 * blocks)),
            static_cast<std::size_t>(rows * blocks * 210));
  EXPECT_EQ(parse_window_bytes(fmt::format("q8_0:{}x{}", rows, 32 * blocks)),
            static_cast<std::size_t>(rows * blocks * 34));
  const int bytes = uniform_int(16, 1 << 30);
  EXPECT_EQ(parse_window_bytes(std::to_string(bytes)), static_cast<std::size_t>(bytes));
  for (const char* bad : {"q9_K:16x256", "q4_K:16x100", "q4_K:16by256", "q4_K:", "12MiB", "8", "", "-5"}) {
    try {
      parse_window_bytes(bad);
      ADD_FAILURE() << "'" << bad << "' was taken";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("'") + bad + "'"), std::string::npos) << e.what();
    }
  }
}

TEST(GpuWindowRead, WithoutADeviceSaysWhy) {
#ifdef QMV_HAVE_CUDA
  if (cuda::current_device().present) GTEST_SKIP() << "a CUDA device is present (a device test measures it)";
#endif
  const GpuWindowReadResult w = measure_gpu_window_read(std::size_t(1) << 20, uniform_int(0, 1) == 1, 2);
  EXPECT_FALSE(w.measured);
  EXPECT_FALSE(w.why_not.empty());
}

#ifdef QMV_HAVE_CUDA

// A CUDA kernel whose launch is the NaN fill of its output: real device work of a
// known size, no matvec arithmetic needed.
Status fill_output(const MatVecArgs& a) {
  const std::string err = cuda::poison_device_floats(a.y, static_cast<std::size_t>(a.shape.rows), a.stream);
  return err.empty() ? Status::Ok() : Status::Error(err);
}

KernelSpec fill_spec(const char* name, ActFormat act) {
  KernelSpec k;
  k.name = name;
  k.weight = WeightType::Q4_K;
  k.act = act;
  k.backend = Backend::CUDA;
  k.shape_rule = kSuperBlockColsRule;
  k.supports = supports_superblock_cols;
  k.run = fill_output;
  return k;
}

TEST(CudaBench, TimesCudaKernelsWithEventsOrSaysWhyNot) {
  const KernelSpec f32 = fill_spec("q4_K.cuda.test_fill", ActFormat::F32);
  const KernelSpec q81 = fill_spec("q4_K.cuda.test_fill_q8_1", ActFormat::Q8_1);
  BenchConfig cfg;
  cfg.threads = {2, 1};
  cfg.repetitions = 3;
  cfg.min_time_s = 0.01;
  const std::vector<Shape> shapes = {{4096, 4096}, {67, 14336}};
  const BenchOutcome out = run_bench({&f32, &q81}, shapes, cfg, {});
  const cuda::DeviceInfo& dev = cuda::current_device();
  if (!dev.present) {
    ASSERT_EQ(out.skipped.size(), 4u);
    for (const auto& s : out.skipped) EXPECT_EQ(s.reason.rfind("unavailable: no CUDA device", 0), 0u) << s.reason;
    GTEST_SKIP() << dev.why_absent << " (the bench skipped the CUDA kernels with that reason)";
  }
  ASSERT_TRUE(out.skipped.empty()) << out.skipped[0].reason;
  ASSERT_EQ(out.rows.size(), 4u);
  const GpuPeakResult& peak = gpu_peak();
  ASSERT_TRUE(peak.measured) << peak.why_not;
  for (const BenchRow& r : out.rows) {
    SCOPED_TRACE(r.kernel + " " + std::to_string(r.rows) + "x" + std::to_string(r.cols));
    EXPECT_EQ(r.backend, "cuda");
    EXPECT_EQ(r.threads, 2) << "a CUDA point is timed once, with the first thread count";
    EXPECT_EQ(r.repetitions, 3);
    EXPECT_GT(r.time_min_us, 0);
    EXPECT_LE(r.time_min_us, r.time_median_us);
    EXPECT_LE(r.time_median_us, r.time_max_us);
    EXPECT_GE(r.launches_per_rep, 10);
    EXPECT_EQ(r.peak_gbps, peak.roofline_gbps()) << "the read peak, not the copy's " << peak.best_gbps;
    EXPECT_NEAR(r.peak_pct, 100 * r.gbps_median / r.peak_gbps, 1e-9);
    EXPECT_EQ(r.gpu_name, dev.name);
    EXPECT_EQ(r.gpu_sm_count, dev.sm_count);
    EXPECT_GT(r.datasheet_gbps, 0);
    // Cold: the copies rotated through are several times the L2.
    EXPECT_GE(static_cast<std::size_t>(r.rotation_bytes), 4 * dev.l2_bytes);
    if (r.act_format == "q8_1") {
      EXPECT_GT(r.quant_median_us, 0);
      EXPECT_GT(r.time_with_quant_median_us, r.quant_median_us * 0.5);
    } else {
      EXPECT_EQ(r.quant_median_us, 0);
      EXPECT_EQ(r.time_with_quant_median_us, 0);
    }
  }
}

// A batch kernel is timed once per count of vectors it takes, on buffers holding that
// many: without them its launch is refused (the buffers are short of n vectors).
TEST(CudaBench, TimesABatchKernelForEachCount) {
  const KernelSpec* k = global_registry().find("q4_K.cuda.halfwarp_batch_dp4a_q8_1");
  ASSERT_NE(k, nullptr);
  ASSERT_GE(k->max_n, 4);
  BenchConfig cfg;
  cfg.repetitions = 2;
  cfg.min_time_s = 0.005;
  cfg.vectors = {1, 2, 4, k->max_n + 1};
  const Shape shape{4096, 4096};
  const BenchOutcome out = run_bench({k}, {shape}, cfg, {});
  const cuda::DeviceInfo& dev = cuda::current_device();
  if (!dev.present) GTEST_SKIP() << dev.why_absent << " (the bench skipped " << k->name << ")";
  ASSERT_TRUE(out.skipped.empty()) << out.skipped[0].reason;
  ASSERT_EQ(out.rows.size(), 3u) << "n = 1, 2 and 4; " << k->max_n + 1 << " is past max_n";
  std::vector<int> counts;
  for (const BenchRow& r : out.rows) {
    SCOPED_TRACE(r.kernel + " n=" + std::to_string(r.n));
    counts.push_back(r.n);
    EXPECT_EQ(r.bytes_per_call, static_cast<std::int64_t>(bytes_moved(*k, shape, r.n)));
    EXPECT_NEAR(r.gflops, flops(*k, shape, r.n) / (r.time_median_us * 1e3), 1e-9 * r.gflops);
    EXPECT_GT(r.quant_median_us, 0) << "the Q8_1 quantizer of n vectors";
  }
  std::sort(counts.begin(), counts.end());
  EXPECT_EQ(counts, (std::vector<int>{1, 2, 4}));
}

TEST(CudaBench, EventTimesAgreeWithTheHostClock) {
  const cuda::DeviceInfo& dev = cuda::current_device();
  if (!dev.present) GTEST_SKIP() << dev.why_absent;
  const std::size_t bytes = std::size_t(256) << 20;
  cuda::DeviceBuffer a, b;
  ASSERT_TRUE(a.resize(bytes, "a").ok());
  ASSERT_TRUE(b.resize(bytes, "b").ok());
  cuda::Stream stream;
  cuda::EventTimer timer;
  auto time = [&](int copies, double& event_ms, double& host_ms) {
    ASSERT_TRUE(cuda::synchronize(stream.get(), "idle").ok());
    const auto t0 = std::chrono::steady_clock::now();
    ASSERT_TRUE(timer.start(stream.get()).ok());
    for (int i = 0; i < copies; ++i) ASSERT_TRUE(cuda::copy_on_device(b.get(), a.get(), bytes, stream.get(), "c").ok());
    ASSERT_TRUE(timer.stop(stream.get()).ok());
    ASSERT_TRUE(timer.elapsed_ms(event_ms, "copies").ok());
    host_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  };
  double one = 0, one_host = 0, eight = 0, eight_host = 0;
  time(1, one, one_host);  // warm-up
  time(1, one, one_host);
  time(8, eight, eight_host);
  EXPECT_GT(one, 0);
  EXPECT_LE(one, one_host * 1.05 + 0.05) << "the events saw more time than passed on the host";
  EXPECT_LE(eight, eight_host * 1.05 + 0.05);
  EXPECT_GT(eight / one, 6.0);
  EXPECT_LT(eight / one, 10.0);
}

TEST(CudaBench, CopyPeakIsBelowTheDatasheet) {
  const cuda::DeviceInfo& dev = cuda::current_device();
  if (!dev.present) GTEST_SKIP() << dev.why_absent;
  const GpuPeakResult p = measure_gpu_peaks(3);
  ASSERT_TRUE(p.measured) << p.why_not;
  EXPECT_EQ(p.repetitions, 3);
  EXPECT_LE(p.median_gbps, p.best_gbps);
  EXPECT_GT(p.datasheet_gbps, 0);
  EXPECT_LT(p.best_gbps, p.datasheet_gbps * 1.05) << "a copy cannot beat the memory's datasheet";
  EXPECT_GT(p.best_gbps, p.datasheet_gbps * 0.3);
  EXPECT_GE(p.bytes, 4 * dev.l2_bytes);
}

// The read-only peak: below the datasheet, above the copy's share of it that a copy's
// write traffic costs, past the L2, and the winning loop named.
TEST(CudaBench, ReadPeakIsBelowTheDatasheetAndAboveHalfTheCopy) {
  const cuda::DeviceInfo& dev = cuda::current_device();
  if (!dev.present) GTEST_SKIP() << dev.why_absent;
  const GpuPeakResult p = measure_gpu_peaks(3);
  ASSERT_TRUE(p.measured) << p.why_not;
  ASSERT_TRUE(p.read_measured) << p.read_loop;
  std::printf("read peak %.1f GB/s (%s), copy %.1f GB/s, datasheet %.1f GB/s\n", p.read_best_gbps,
              p.read_loop.c_str(), p.best_gbps, p.datasheet_gbps);
  EXPECT_LE(p.read_median_gbps, p.read_best_gbps);
  EXPECT_LT(p.read_best_gbps, p.datasheet_gbps * 1.05) << "a read cannot beat the memory's datasheet";
  EXPECT_GT(p.read_best_gbps, p.best_gbps * 0.5) << "reading alone moves fewer bytes than a copy's reads";
  EXPECT_GE(p.read_bytes, 4 * dev.l2_bytes);
  EXPECT_FALSE(p.read_loop.empty());
  EXPECT_EQ(p.roofline_gbps(), p.read_best_gbps);
}

// The ceiling of one launch per matrix: reads of a matrix-sized window, back to back and
// cold, on a stream and from a graph; no faster than the read peak of a large buffer.
TEST(CudaBench, WindowReadsOnAStreamAndFromAGraph) {
  const cuda::DeviceInfo& dev = cuda::current_device();
  if (!dev.present) GTEST_SKIP() << dev.why_absent;
  const GpuPeakResult& peak = gpu_peak();
  ASSERT_TRUE(peak.read_measured) << peak.read_loop;
  const std::size_t window = 16 * static_cast<std::size_t>(uniform_int(1 << 18, 1 << 21));
  for (const bool graph : {false, true}) {
    SCOPED_TRACE(graph ? "graph" : "stream");
    const GpuWindowReadResult w = measure_gpu_window_read(window, graph, 3);
    ASSERT_TRUE(w.measured) << w.why_not;
    std::printf("window read of %zu bytes (%s): %.1f GB/s median, %.1f%% of the read peak\n", w.window_bytes,
                graph ? "graph" : "stream", w.median_gbps, 100 * w.median_gbps / peak.read_best_gbps);
    EXPECT_EQ(w.graph, graph);
    EXPECT_EQ(w.window_bytes, window);
    EXPECT_EQ(w.arena_bytes % window, 0u);
    EXPECT_GE(w.arena_bytes + window, gpu_cold_bytes(dev.l2_bytes)) << "the windows rotate past the L2";
    EXPECT_EQ(w.repetitions, 3);
    EXPECT_GE(w.launches_per_repetition, static_cast<int>(w.arena_bytes / window));
    EXPECT_LE(w.median_gbps, w.best_gbps);
    EXPECT_LT(w.best_gbps, peak.datasheet_gbps * 1.05) << "a read cannot beat the memory's datasheet";
    EXPECT_FALSE(w.read_loop.empty());
  }
}

// --gpu-overlap: every launch of the point asks to overlap the one before, from the
// host and from a graph; without it none does.
int overlapped_launches = 0, plain_launches = 0;
Status fill_and_count_overlap(const MatVecArgs& a) {
  ++(a.overlap_previous ? overlapped_launches : plain_launches);
  return fill_output(a);
}

TEST(CudaBench, OverlapAsksEveryLaunchToOverlapTheOneBefore) {
  const cuda::DeviceInfo& dev = cuda::current_device();
  if (!dev.present) GTEST_SKIP() << dev.why_absent;
  KernelSpec k = fill_spec("q4_K.cuda.test_fill_overlap", ActFormat::Q8_1);
  k.run = fill_and_count_overlap;
  for (const bool overlap : {true, false})
    for (const bool graph : {false, true}) {
      SCOPED_TRACE(std::string(overlap ? "overlap" : "plain") + (graph ? ", graph" : ", host launches"));
      BenchConfig cfg;
      cfg.repetitions = 2;
      cfg.min_time_s = 0.005;
      cfg.gpu_graph = graph;
      cfg.gpu_overlap = overlap;
      overlapped_launches = plain_launches = 0;
      const BenchOutcome out = run_bench({&k}, {{256, 4096}}, cfg, {});
      ASSERT_EQ(out.rows.size(), 1u);
      EXPECT_GT(overlap ? overlapped_launches : plain_launches, 10);
      EXPECT_EQ(overlap ? plain_launches : overlapped_launches, 0);
    }
}

// --gpu-graph: the timed launches replayed from a graph, whole laps of the copies.
TEST(CudaBench, GraphReplayTimesWholeLapsOfTheCopies) {
  const cuda::DeviceInfo& dev = cuda::current_device();
  if (!dev.present) GTEST_SKIP() << dev.why_absent;
  const KernelSpec f32 = fill_spec("q4_K.cuda.test_fill", ActFormat::F32);
  const KernelSpec q81 = fill_spec("q4_K.cuda.test_fill_q8_1", ActFormat::Q8_1);
  BenchConfig cfg;
  cfg.repetitions = 3;
  cfg.min_time_s = 0.01;
  cfg.gpu_graph = true;
  const Shape shape{64 * uniform_int(16, 256), 4096};
  const BenchOutcome out = run_bench({&f32, &q81}, {shape}, cfg, {});
  ASSERT_TRUE(out.skipped.empty()) << out.skipped[0].reason;
  ASSERT_EQ(out.rows.size(), 2u);
  for (const BenchRow& r : out.rows) {
    SCOPED_TRACE(r.kernel);
    EXPECT_GT(r.time_min_us, 0);
    EXPECT_LE(r.time_median_us, r.time_max_us);
    const std::int64_t copy = static_cast<std::int64_t>(shape.rows) * 16 * 144;  // 256-byte aligned already
    ASSERT_EQ(r.rotation_bytes % copy, 0);
    EXPECT_EQ(r.launches_per_rep % (r.rotation_bytes / copy), 0) << "a graph replays whole laps";
    if (r.act_format == "q8_1") {
      EXPECT_GT(r.time_with_quant_median_us, 0);
    }
  }
}

#endif

}  // namespace
}  // namespace qmv
