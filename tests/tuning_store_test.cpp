// The tuning store (harness/tuning_store.h) and the `auto` plan built on it
// (harness/auto_plan.h): what is kept, what is refused, and what auto picks from it.
#include "harness/tuning_store.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <tuple>
#include <utility>

#include "harness/accuracy.h"
#include "harness/auto_plan.h"
#include "harness/machine.h"
#include "harness/peak.h"
#include "kernels/availability.h"
#include "kernels/build_id.h"
#include "kernels/cpu_tiling.h"
#include "kernels/former_names.h"
#include "kernels/registry.h"
#include "model/batch_forward.h"
#include "tests/cli_run.h"
#include "tests/scoped_env.h"
#include "tests/tiny_model.h"
#include "tests/test_seed.h"

namespace qmv {
namespace {

// Run outside CTest (which sets it), the qmvlab runs of this binary still keep their
// measurements out of results/<machine>/tuning.csv.
[[maybe_unused]] const bool kTestStore = ::setenv("QMV_TUNING_STORE", QMV_TEST_TMP "/tuning.csv", 0) == 0;

// A fresh store file of this test's own.
std::string store_path(const std::string& name) {
  const std::string dir = std::string(QMV_TEST_TMP) + "/tuning_store/" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/" + name + ".csv";
  std::filesystem::remove(path);
  std::filesystem::remove(path + ".damaged");
  return path;
}

// A row of `scope` for `kernel` as a bench run would write it.
TuningRow kernel_row(const std::string& kernel, std::int64_t rows, std::int64_t cols, double time_us, int threads = 1,
                     const StoreScope& scope = StoreScope::here()) {
  const KernelSpec* k = global_registry().find(kernel);
  EXPECT_NE(k, nullptr) << kernel;
  BenchRow b;
  b.kernel = kernel;
  b.op = std::string(to_string(k->op));
  b.weight_type = std::string(to_string(k->weight));
  b.backend = std::string(to_string(k->backend));
  if (k->backend == Backend::CUDA) b.gpu_name = "NVIDIA " + scope.gpu_machine;
  b.rows = rows;
  b.cols = cols;
  b.threads = threads;
  b.cache = "cold";
  b.repetitions = 3;
  b.time_median_us = time_us;
  b.gbps_median = static_cast<double>(bytes_moved(*k, {rows, cols})) / (time_us * 1e3);
  b.rotation_bytes = static_cast<std::int64_t>(cold_rotation_bytes());
  return tuning_row(b, "test", scope);
}

// A row of a batch kernel called with `n` vectors, `time_us` per call.
TuningRow batch_row(const std::string& kernel, std::int64_t rows, std::int64_t cols, int n, double time_us,
                    int threads = 1) {
  TuningRow r = kernel_row(kernel, rows, cols, time_us, threads);
  r.n = n;
  r.gbps = static_cast<double>(bytes_moved(*global_registry().find(kernel), {rows, cols}, n)) / (time_us * 1e3);
  return r;
}

// A time in microseconds drawn afresh, so no test leans on one figure.
double fresh_time_us(const char* what) {
  std::mt19937_64 rng(qmv::testing::fresh_seed(what));
  return std::uniform_real_distribution<double>(5, 500)(rng);
}

std::vector<std::string> kernels_of(const std::vector<TuningRow>& rows) {
  std::vector<std::string> out;
  for (const TuningRow& r : rows) out.push_back(r.kernel + "@" + std::to_string(r.rows));
  return out;
}

TEST(TuningStore, RowsComeBackAsWritten) {
  const TuningStore store(store_path("round_trip"));
  const TuningRow a = kernel_row("q4_K.cpu.scalar_f32", 4096, 4096, 812.5);
  const TuningRow b = kernel_row("q6_K.cpu.scalar_f32", 11008, 4096, 1999.25, 2);
  const TuningRow p = peak_tuning_row(2, 37.25, "avx2.s4.pf2k", 9, "test");
  ASSERT_EQ(store.add({a, b, p}), "");
  const auto rows = store.read_all();
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[0].kernel, a.kernel);
  EXPECT_EQ(rows[0].kernel_build, kernel_build_id(*global_registry().find(a.kernel)));
  EXPECT_NE(rows[0].kernel_build, "unknown");
  EXPECT_EQ(rows[0].machine, machine_info().machine);
  EXPECT_EQ(rows[0].rows, 4096);
  EXPECT_DOUBLE_EQ(rows[0].time_median_us, 812.5);
  EXPECT_EQ(rows[1].threads, 2);
  EXPECT_EQ(rows[1].op, "matvec");
  EXPECT_EQ(rows[1].weight_type, "q6_K");
  EXPECT_DOUBLE_EQ(rows[1].time_median_us, 1999.25);
  EXPECT_EQ(rows[0].measured_at, a.measured_at);
  EXPECT_EQ(rows[2].kind, "peak");
  EXPECT_DOUBLE_EQ(store.peak(2)->gbps, 37.25);
  EXPECT_EQ(store.peak(2)->kernel, "avx2.s4.pf2k");
  EXPECT_FALSE(store.peak(1).has_value());
  EXPECT_EQ(store.usable_rows().size(), 3u);
}

TEST(TuningStore, ANewerRowReplacesTheOneOfItsKey) {
  const TuningStore store(store_path("replace"));
  ASSERT_EQ(store.add({kernel_row("q4_K.cpu.scalar_f32", 256, 256, 50)}), "");
  ASSERT_EQ(store.add({kernel_row("q4_K.cpu.scalar_f32", 256, 256, 40), kernel_row("q4_K.cpu.scalar_f32", 512, 256, 90)}),
            "");
  const auto rows = store.read_all();
  ASSERT_EQ(rows.size(), 2u) << ::testing::PrintToString(kernels_of(rows));
  EXPECT_DOUBLE_EQ(rows[0].time_median_us, 40);
  EXPECT_EQ(rows[1].rows, 512);
}

// A cold row measured while the memory read at `read_gbps`.
TuningRow row_at_speed(const std::string& kernel, std::int64_t rows, double time_us, double read_gbps) {
  TuningRow r = kernel_row(kernel, rows, 256, time_us);
  r.read_gbps = read_gbps;
  return r;
}

std::vector<double> read_speeds_of(const std::vector<TuningRow>& rows) {
  std::vector<double> out;
  for (const TuningRow& r : rows) out.push_back(r.read_gbps);
  std::sort(out.begin(), out.end());
  return out;
}

TEST(TuningStore, ARowAtAnotherReadSpeedStaysBesideTheNewerOne) {
  // Speeds in tenths, which the file's six digits keep exactly.
  const auto tenths = [](double gbps) { return std::round(gbps * 10) / 10; };
  std::mt19937_64 rng(qmv::testing::fresh_seed());
  const double slow = tenths(std::uniform_real_distribution<double>(25, 40)(rng)), fast = tenths(slow * 1.7);
  const TuningStore store(store_path("read_speeds"));
  const std::string k = "q4_K.cpu.scalar_f32";
  ASSERT_EQ(store.add({row_at_speed(k, 256, 50, slow)}), "");
  ASSERT_EQ(store.add({row_at_speed(k, 256, 30, fast)}), "");
  EXPECT_EQ(read_speeds_of(store.read_all()), (std::vector<double>{slow, fast}));
  // Within kSameReadSpeed of the slow one: the same speed, a newer measurement of it.
  const double slow_again = tenths(slow * 1.1);
  ASSERT_EQ(store.add({row_at_speed(k, 256, 45, slow_again)}), "");
  auto rows = store.read_all();
  ASSERT_EQ(read_speeds_of(rows), (std::vector<double>{slow_again, fast}));
  for (const TuningRow& r : rows) EXPECT_DOUBLE_EQ(r.time_median_us, r.read_gbps == fast ? 30 : 45);
  // A key keeps three speeds; a fourth displaces the oldest (the fast one, now).
  const double faster = tenths(fast * 1.6), fastest = tenths(faster * 1.6);
  ASSERT_EQ(store.add({row_at_speed(k, 256, 20, faster)}), "");
  ASSERT_EQ(store.add({row_at_speed(k, 256, 10, fastest)}), "");
  EXPECT_EQ(read_speeds_of(store.read_all()), (std::vector<double>{slow_again, faster, fastest}));
  // A row of unknown speed is the newest of every speed; one of a known speed replaces it.
  ASSERT_EQ(store.add({row_at_speed(k, 256, 15, 0)}), "");
  EXPECT_EQ(read_speeds_of(store.read_all()), (std::vector<double>{0}));
  ASSERT_EQ(store.add({row_at_speed(k, 256, 40, slow)}), "");
  EXPECT_EQ(read_speeds_of(store.read_all()), (std::vector<double>{slow}));
}

TEST(TuningStore, SameReadSpeedIsWithinItsRatio) {
  EXPECT_TRUE(same_read_speed(33, 33 * kSameReadSpeed));
  EXPECT_FALSE(same_read_speed(33, 33 * kSameReadSpeed * 1.001));
  EXPECT_FALSE(same_read_speed(57, 33));
  EXPECT_TRUE(same_read_speed(0, 57));
  EXPECT_TRUE(same_read_speed(33, 0));
}

// A decode whose memory halves its speed midway, its tokens slowing with it: spell by
// spell it reads the share it holds throughout; one median read for the run would set
// every token against one of the speeds. Without a change of speed it is the share of
// the median read.
TEST(TuningStore, TheRooflineShareBySpellSetsEachTokenAgainstItsOwnSpeed) {
  std::mt19937_64 g(qmv::testing::fresh_seed());
  const int steps = std::uniform_int_distribution<int>(24, 60)(g);
  const double share = std::uniform_real_distribution<double>(0.6, 0.95)(g);
  const double fast = std::uniform_real_distribution<double>(40, 90)(g), slow = fast / 2;
  // Fewer fast steps than slow: the run's median read is the slow speed.
  const int slow_from = std::uniform_int_distribution<int>(steps / 4, steps / 3)(g);
  // Each spell's passes at its speed, a few of them off by as much up as down (the
  // median stays the speed, and no two neighbours differ by kSameReadSpeed).
  std::uniform_real_distribution<double> off(0.01, 0.08);
  std::vector<double> step_s, step_bytes, passes;  // pass k runs between steps k and k + 1
  for (int i = 0; i < steps; ++i) {
    const double bytes = std::uniform_real_distribution<double>(1e8, 2e8)(g);
    step_bytes.push_back(bytes);
    step_s.push_back(bytes / ((i < slow_from ? fast : slow) * 1e9) / share);
  }
  for (int k = 0; k + 1 < steps; ++k) passes.push_back(k + 1 < slow_from ? fast : slow);
  for (const int k : {1, 2}) {  // one pass up and one down in each spell
    const double d = off(g);
    passes[static_cast<std::size_t>(k)] *= k == 1 ? 1 + d : 1 - d;
    passes[static_cast<std::size_t>(slow_from + k)] *= k == 1 ? 1 + d : 1 - d;
  }
  ASSERT_EQ(read_speed_changes(passes), 1);
  EXPECT_NEAR(roofline_pct_by_spell(step_s, step_bytes, passes), 100 * share, 1e-9);
  // The run's median read is one of the speeds: against it the tokens read otherwise.
  double bytes = 0, seconds = 0;
  for (int i = 0; i < steps; ++i) {
    bytes += step_bytes[static_cast<std::size_t>(i)];
    seconds += step_s[static_cast<std::size_t>(i)];
  }
  const double run_median = median_of(passes);
  EXPECT_GT(std::abs(100 * bytes / (run_median * 1e9) / seconds - 100 * share), 5.0);

  // Steady, noisy passes: one spell, the share of their median read.
  std::vector<double> steady;
  std::uniform_real_distribution<double> noise(0.92, 1.08);
  for (int k = 0; k + 1 < steps; ++k) steady.push_back(fast * noise(g));
  ASSERT_EQ(read_speed_changes(steady), 0);
  const double median = median_of(steady);
  EXPECT_NEAR(roofline_pct_by_spell(step_s, step_bytes, steady), 100 * bytes / (median * 1e9) / seconds, 1e-9);
  // A stalled pass or two in the steady run are not a speed: the same share.
  std::vector<double> stalled = steady;
  const std::size_t at = std::uniform_int_distribution<std::size_t>(0, stalled.size() - 2)(g);
  stalled[at] = stalled[at + 1] = fast / 3;
  ASSERT_EQ(read_speed_changes(stalled), at == 0 || at + 2 == stalled.size() ? 1 : 2);
  std::vector<double> unstalled = steady;
  unstalled.erase(unstalled.begin() + static_cast<std::ptrdiff_t>(at),
                  unstalled.begin() + static_cast<std::ptrdiff_t>(at + 2));
  const double steady_median = median_of(unstalled);
  // Each step meets the median of a long spell beside its pass: the steady passes on
  // either side of the stall, each spell's median near the steady one. Set against the
  // stall, its two steps alone would lift the share by a tenth at least (60 steps).
  const double steady_share = 100 * bytes / (steady_median * 1e9) / seconds;
  EXPECT_NEAR(roofline_pct_by_spell(step_s, step_bytes, stalled), steady_share, steady_share * 0.05);

  EXPECT_EQ(roofline_pct_by_spell(step_s, step_bytes, {}), 0.0);
  EXPECT_EQ(roofline_pct_by_spell({}, {}, passes), 0.0);
  EXPECT_EQ(roofline_pct_by_spell(step_s, {1.0}, passes), 0.0);
}

TEST(TuningStore, ReadSpeedChangesCountNeighboursNotTheSameSpeed) {
  std::mt19937_64 g(qmv::testing::fresh_seed());
  const double base = std::uniform_real_distribution<double>(30, 40)(g);
  EXPECT_EQ(read_speed_changes(std::vector<double>{}), 0);
  EXPECT_EQ(read_speed_changes(std::vector<double>{base}), 0);
  EXPECT_EQ(read_speed_changes(std::vector<double>{base, base * 1.2, base, base * 0.85}), 0);
  EXPECT_EQ(read_speed_changes(std::vector<double>{base, base * 1.3, base * 1.3, base}), 2);
  EXPECT_EQ(read_speed_changes(std::vector<double>{base * 1.7, base, base * 1.7, base, base}), 3);
}

// A bench row of the scalar Q4_K kernel on 256x256, under decode's row tiling.
BenchRow scalar_bench_row(int threads, const std::string& cache, int repetitions, double time_us) {
  BenchRow b;
  b.kernel = "q4_K.cpu.scalar_f32";
  b.op = "matvec";
  b.weight_type = "q4_K";
  b.backend = "cpu";
  b.rows = b.cols = 256;
  b.threads = threads;
  b.cache = cache;
  b.repetitions = repetitions;
  b.time_median_us = time_us;
  b.gbps_median = 10;
  b.tile_rows = CpuTiling{}.tile_rows;
  b.min_parallel_rows = CpuTiling{}.min_parallel_rows;
  return b;
}

TEST(TuningStore, BenchRowsKeepTheReadSpeedTimedBesideThem) {
  const std::string path = store_path("bench_read_speed");
  const qmv::testing::ScopedEnv one_file({{"QMV_TUNING_STORE", path}});
  std::vector<BenchRow> rows;
  for (const int threads : {1, 2})
    for (const char* cache : {"cold", "warm"})
      rows.push_back(scalar_bench_row(threads, cache, 3, fresh_time_us("bench row")));
  record_in_store(rows, "bench", {{2, 41.5}});
  std::map<std::pair<int, std::string>, double> speeds;
  for (const TuningRow& r : TuningStore(path).read_all()) speeds[{r.threads, r.cache}] = r.read_gbps;
  // Only a cold row of a thread count the loops were timed on has a speed.
  EXPECT_EQ(speeds, (std::map<std::pair<int, std::string>, double>{
                        {{1, "cold"}, 0}, {{1, "warm"}, 0}, {{2, "cold"}, 41.5}, {{2, "warm"}, 0}}));
}

TEST(TuningStore, RepetitionsAreGroupedByTheReadSpeedTheyMet) {
  std::mt19937_64 rng(qmv::testing::fresh_seed());
  std::uniform_real_distribution<double> jitter(0.97, 1.03);
  const double slow = std::uniform_real_distribution<double>(25, 40)(rng), fast = slow * 1.6;
  const double slow_us = std::uniform_real_distribution<double>(100, 400)(rng), fast_us = slow_us / 1.5;
  // Five repetitions at the slow speed, three at the fast one, interleaved, one of
  // unknown speed and one alone at a third speed.
  std::vector<double> us, read;
  for (int i = 0; i < 5; ++i) {
    us.push_back(slow_us * jitter(rng));
    read.push_back(slow * jitter(rng));
    if (i < 3) {
      us.push_back(fast_us * jitter(rng));
      read.push_back(fast * jitter(rng));
    }
  }
  us.push_back(1);
  read.push_back(0);
  us.push_back(2);
  read.push_back(fast * 2);
  const auto upper_median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  std::vector<double> slow_times, fast_times;
  for (std::size_t i = 0; i + 2 < us.size(); ++i) (read[i] < slow * 1.1 ? slow_times : fast_times).push_back(us[i]);
  const std::vector<RepsAtSpeed> groups = reps_by_read_speed(us, read);
  ASSERT_EQ(groups.size(), 2u);
  EXPECT_EQ(groups[0].repetitions, 5);
  EXPECT_EQ(groups[1].repetitions, 3);
  EXPECT_EQ(groups[0].time_median_us, upper_median(slow_times));
  EXPECT_EQ(groups[1].time_median_us, upper_median(fast_times));
  EXPECT_NEAR(groups[0].read_gbps, slow, 0.04 * slow);
  EXPECT_NEAR(groups[1].read_gbps, fast, 0.04 * fast);
  // A repetition faster than the memory it was given cannot have met that speed.
  const double bytes = slow * 1e3 * slow_us;  // read at exactly `slow` in slow_us
  EXPECT_EQ(reps_by_read_speed({slow_us, slow_us}, {slow, slow}, bytes).size(), 1u);
  EXPECT_TRUE(reps_by_read_speed({slow_us / 1.3, slow_us / 1.3}, {slow, slow}, bytes).empty());
  EXPECT_EQ(reps_by_read_speed({slow_us / 1.3, slow_us / 1.3}, {slow, slow}).size(), 1u);  // unchecked
  // A single repetition is a group of all there are; none known, no group.
  EXPECT_EQ(reps_by_read_speed({42}, {slow}).size(), 1u);
  EXPECT_TRUE(reps_by_read_speed({42, 43}, {0, 0}).empty());
}

TEST(TuningStore, ABenchRowsRepetitionsAtTwoReadSpeedsBecomeARowAtEach) {
  const std::string path = store_path("bench_two_speeds");
  const qmv::testing::ScopedEnv one_file({{"QMV_TUNING_STORE", path}});
  std::mt19937_64 rng(qmv::testing::fresh_seed());
  const double slow = std::round(std::uniform_real_distribution<double>(25, 40)(rng)), fast = slow * 1.5;
  const double slow_us = std::round(std::uniform_real_distribution<double>(100, 400)(rng)), fast_us = slow_us - 37;
  BenchRow b = scalar_bench_row(2, "cold", 5, slow_us);
  b.rep_us = {slow_us, fast_us, slow_us + 1, fast_us + 1, slow_us - 1};
  b.rep_read_gbps = {slow, fast, slow, fast, slow};
  BenchRow warm = b;
  warm.cache = "warm";
  record_in_store({b, warm}, "bench", {{2, 41.5}});
  std::map<std::pair<std::string, double>, std::pair<double, int>> got;  // (cache, read) -> (time, reps)
  for (const TuningRow& r : TuningStore(path).read_all())
    got[{r.cache, r.read_gbps}] = {r.time_median_us, r.repetitions};
  // Each speed's row has its own repetitions' median; the warm row no speed.
  EXPECT_EQ(got, (std::map<std::pair<std::string, double>, std::pair<double, int>>{
                     {{"cold", slow}, {slow_us, 3}}, {{"cold", fast}, {fast_us + 1, 2}}, {{"warm", 0}, {slow_us, 5}}}));
}

TEST(TuningStore, RowsOfAnotherMachineMaskOrKernelBuildAreNotUsed) {
  const TuningStore store(store_path("foreign"));
  TuningRow mine = kernel_row("q4_K.cpu.scalar_f32", 256, 256, 50);
  TuningRow other_machine = kernel_row("q4_K.cpu.scalar_f32", 512, 256, 50);
  other_machine.machine = "amd-zen9-2c";
  TuningRow other_mask = kernel_row("q4_K.cpu.scalar_f32", 768, 256, 50);
  other_mask.isa = "avx2";
  TuningRow other_build = kernel_row("q4_K.cpu.scalar_f32", 1024, 256, 50);
  other_build.kernel_build = "0123456789ab";
  TuningRow gone = kernel_row("q4_K.cpu.scalar_f32", 1280, 256, 50);
  gone.kernel = "q4_K.cpu.removed_long_ago";
  TuningRow other_peak = peak_tuning_row(1, 30, "avx2.s2", 5, "test");
  other_peak.machine = "amd-zen9-2c";
  ASSERT_EQ(store.add({mine, other_machine, other_mask, other_build, gone, other_peak}), "");
  EXPECT_EQ(store.read_all().size(), 6u);
  const auto usable = store.usable_rows();
  ASSERT_EQ(usable.size(), 1u) << ::testing::PrintToString(kernels_of(usable));
  EXPECT_EQ(usable[0].rows, 256);
  EXPECT_FALSE(store.peak(1).has_value());
}

// A cold row is a kernel's speed from memory only when its calls went round enough
// weights to outrun the caches; one timed on a smaller rotation (as every row was before
// the column) read part of them from the last-level cache. A warm row has no such bound.
TEST(TuningStore, ColdRowsOfARotationTheCachesCouldHoldAreNotUsed) {
  const TuningStore store(store_path("rotation"));
  std::mt19937_64 rng(qmv::testing::fresh_seed("rotation"));
  const auto cold = static_cast<std::int64_t>(cold_rotation_bytes());
  TuningRow enough = kernel_row("q4_K.cpu.scalar_f32", 256, 256, 50);
  enough.rotation_bytes = std::uniform_int_distribution<std::int64_t>(cold, 4 * cold)(rng);
  TuningRow small = kernel_row("q4_K.cpu.scalar_f32", 512, 256, 50);
  small.rotation_bytes = std::uniform_int_distribution<std::int64_t>(1, cold - 1)(rng);
  TuningRow unknown = kernel_row("q4_K.cpu.scalar_f32", 768, 256, 50);
  unknown.rotation_bytes = 0;
  TuningRow warm = kernel_row("q4_K.cpu.scalar_f32", 1024, 256, 50);
  warm.cache = "warm";
  warm.rotation_bytes = std::uniform_int_distribution<std::int64_t>(1, cold - 1)(rng);
  ASSERT_EQ(store.add({enough, small, unknown, warm}), "");
  const auto rows = store.read_all();
  ASSERT_EQ(rows.size(), 4u);
  EXPECT_EQ(rows[0].rotation_bytes, enough.rotation_bytes);
  EXPECT_EQ(rows[1].rotation_bytes, small.rotation_bytes);
  const auto usable = store.usable_rows();
  EXPECT_EQ(kernels_of(usable), (std::vector<std::string>{"q4_K.cpu.scalar_f32@256", "q4_K.cpu.scalar_f32@1024"}));
}

// `bench --cold-mib` below the cold footprint times what the caches can answer in part:
// its rows go to the CSV, never to the store, where they would displace cold rows.
TEST(TuningStore, ABenchOverLessThanTheColdFootprintLeavesTheStoreAlone) {
  const std::string path = store_path("cold_mib");
  const qmv::testing::ScopedEnv env({{"QMV_TUNING_STORE", path}});
  std::mt19937_64 rng(qmv::testing::fresh_seed("cold mib"));
  const int mib = std::uniform_int_distribution<int>(1, 64)(rng);
  const std::string args =
      "bench --kernels q4_K.cpu.scalar_f32 --shapes 64x256 --threads 1 --reps 1 --min-time 0.001 --peak-reps 1 "
      "--peak-buffer-mib 16";
  const qmv::testing::CliRun small = qmv::testing::qmvlab(args + " --cold-mib " + std::to_string(mib));
  ASSERT_EQ(small.code, 0) << small.output;
  EXPECT_NE(small.output.find(fmt::format("not added to the tuning store: timed over {} MiB", mib)), std::string::npos)
      << small.output;
  EXPECT_FALSE(std::filesystem::exists(path));
  const qmv::testing::CliRun cold = qmv::testing::qmvlab(args);
  ASSERT_EQ(cold.code, 0) << cold.output;
  const auto rows = TuningStore(path).usable_rows();
  ASSERT_EQ(rows.size(), 1u) << cold.output;
  EXPECT_GE(rows[0].rotation_bytes, static_cast<std::int64_t>(cold_rotation_bytes()));
}

// A Q4_K CUDA kernel auto could weigh (one with a known build); null in a build
// without CUDA, which registers none.
const KernelSpec* some_cuda_kernel() {
  for (const KernelSpec& k : global_registry().all())
    if (k.backend == Backend::CUDA && k.weight == WeightType::Q4_K && kernel_build_id(k) != "unknown") return &k;
  return nullptr;
}
constexpr const char* kNoCudaKernels = "this build registers no CUDA kernels (QMV_CUDA=OFF): CUDA rows not tested";

TEST(TuningStore, RowsOfACudaKernelBelongToTheirGpuAndArchitecture) {
  const TuningStore store(store_path("gpu"));
  StoreScope h200 = StoreScope::here();
  h200.gpu_machine = "nvidia-h200";
  h200.gpu_arch = "sm_90";
  if (!some_cuda_kernel()) GTEST_SKIP() << kNoCudaKernels;
  const std::string cuda = some_cuda_kernel()->name;
  const TuningRow on_h200 = kernel_row(cuda, 256, 256, 5, 1, h200);
  EXPECT_EQ(on_h200.machine, "nvidia-h200");
  EXPECT_EQ(on_h200.isa, "sm_90");
  EXPECT_EQ(on_h200.cpu_model, "NVIDIA nvidia-h200");
  StoreScope h100 = h200;
  h100.gpu_machine = "nvidia-h100-80gb-hbm3";
  StoreScope sm80 = h200;
  sm80.gpu_arch = "sm_80";
  // A CUDA row under the CPU's name, as a writer that ignored the device would leave.
  TuningRow under_the_cpu = kernel_row(cuda, 1280, 256, 5, 1, h200);
  under_the_cpu.machine = h200.cpu_machine;
  under_the_cpu.isa = h200.cpu_isa;
  const TuningRow cpu_row = kernel_row("q4_K.cpu.scalar_f32", 256, 256, 50, 1, h200);
  EXPECT_EQ(cpu_row.machine, machine_info().machine);
  ASSERT_EQ(store.add({on_h200, kernel_row(cuda, 512, 256, 5, 1, h100), kernel_row(cuda, 768, 256, 5, 1, sm80),
                       under_the_cpu, cpu_row}),
            "");
  EXPECT_EQ(kernels_of(store.usable_rows(nullptr, h200)),
            (std::vector<std::string>{cuda + "@256", "q4_K.cpu.scalar_f32@256"}));
  EXPECT_EQ(kernels_of(store.usable_rows(nullptr, h100)),
            (std::vector<std::string>{cuda + "@512", "q4_K.cpu.scalar_f32@256"}));
  // Without a device no CUDA row is used; the CPU's rows still are.
  StoreScope no_gpu = h200;
  no_gpu.gpu_machine.clear();
  no_gpu.gpu_arch.clear();
  EXPECT_EQ(kernels_of(store.usable_rows(nullptr, no_gpu)), (std::vector<std::string>{"q4_K.cpu.scalar_f32@256"}));
}

TEST(TuningStore, BenchRowsGoToTheStoreOfTheirBackend) {
  // Unset, each backend has its own file: the GPU's folder where a device is here.
  {
    const qmv::testing::ScopedEnv unset({{"QMV_TUNING_STORE", std::nullopt}});
    const std::string cpu = TuningStore::default_path(Backend::CPU);
    EXPECT_NE(cpu.find("results/" + machine_info().machine + "/tuning.csv"), std::string::npos) << cpu;
    const std::string gpu_folder = machine_info().gpu_machine.empty() ? machine_info().machine : machine_info().gpu_machine;
    EXPECT_NE(TuningStore::default_path(Backend::CUDA).find("results/" + gpu_folder + "/tuning.csv"), std::string::npos);
  }
  const std::string path = store_path("record");
  const qmv::testing::ScopedEnv one_file({{"QMV_TUNING_STORE", path}});
  auto bench_row = [](const KernelSpec& k, const std::string& cache) {
    BenchRow b;
    b.kernel = k.name;
    b.op = std::string(to_string(k.op));
    b.weight_type = std::string(to_string(k.weight));
    b.backend = std::string(to_string(k.backend));
    b.rows = b.cols = 256;
    b.threads = 1;
    b.cache = cache;
    b.tile_rows = CpuTiling{}.tile_rows;
    b.min_parallel_rows = CpuTiling{}.min_parallel_rows;
    b.repetitions = 3;
    b.time_median_us = 10;
    b.gbps_median = 4;
    return b;
  };
  if (!some_cuda_kernel()) GTEST_SKIP() << kNoCudaKernels;
  const KernelSpec& cuda = *some_cuda_kernel();
  BenchRow failed = bench_row(*global_registry().find("q4_K.cpu.scalar_f32"), "cold");
  failed.rows = 512;
  failed.time_median_us = failed.gbps_median = 0;
  record_in_store({bench_row(*global_registry().find("q4_K.cpu.scalar_f32"), "cold"), failed,
                   bench_row(cuda, "cold"), bench_row(cuda, "warm")},
                  "test");
  // The CPU row; the cold CUDA row under the GPU's name where a device is here, else none;
  // never a failed point or a warm GPU one.
  std::vector<std::string> expected = {"q4_K.cpu.scalar_f32@256"};
  if (!machine_info().gpu_machine.empty()) expected.push_back(cuda.name + "@256");
  const auto rows = TuningStore(path).read_all();
  EXPECT_EQ(kernels_of(rows), expected);
  for (const TuningRow& r : rows)
    EXPECT_EQ(r.machine, r.kernel == cuda.name ? machine_info().gpu_machine : machine_info().machine);
}

// The store's text with `edit` applied, written back.
void rewrite(const std::string& path, const std::function<void(std::string&)>& edit) {
  std::ifstream in(path);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  edit(text);
  std::ofstream(path, std::ios::trunc) << text;
}

// The store file as a writer before its last `count` columns left it.
void drop_last_columns(const std::string& path, int count) {
  rewrite(path, [count](std::string& text) {
    std::string out;
    for (std::size_t at = 0; at < text.size();) {
      const std::size_t end = text.find('\n', at);
      std::string line = text.substr(at, end - at);
      for (int i = 0; i < count; ++i) line.erase(line.rfind(','));
      out += line + "\n";
      at = end + 1;
    }
    text = out;
  });
}

// Replaces the field of `column` in the first row of a store's text.
void set_first_row_field(std::string& text, const std::string& column, const std::string& value) {
  const auto columns = tuning_store_header();
  const auto index = std::find(columns.begin(), columns.end(), column) - columns.begin();
  std::size_t at = text.find('\n') + 1;
  for (int i = 0; i < index; ++i) at = text.find(',', at) + 1;
  text.replace(at, text.find_first_of(",\n", at) - at, value);
}

TEST(TuningStore, ADamagedStoreIsIgnoredWithOneLineAndRewrittenAside) {
  const std::vector<std::pair<std::string, std::function<void(std::string&)>>> damages = {
      {"truncated mid-row", [](std::string& t) { t.resize(t.size() - 25); }},
      {"garbled bytes",
       [](std::string& t) {
         std::mt19937 rng(qmv::testing::fresh_seed());
         for (std::size_t i = t.size() / 2; i < t.size(); i += 7) t[i] = static_cast<char>(rng() % 256);
       }},
      {"not a number", [](std::string& t) { set_first_row_field(t, "rows", "twelve"); }},
      {"a NaN speed", [](std::string& t) { set_first_row_field(t, "gbps", "nan"); }},
      {"an unknown kind", [](std::string& t) { set_first_row_field(t, "kind", "wisdom"); }},
      {"a negative read speed", [](std::string& t) { set_first_row_field(t, "read_gbps", "-33"); }},
      {"an infinite read speed", [](std::string& t) { set_first_row_field(t, "read_gbps", "inf"); }},
      {"a column gone", [](std::string& t) { t.replace(t.find("kernel_build"), 12, "kernel_bild"); }},
      {"empty", [](std::string& t) { t.clear(); }},
  };
  for (const auto& [what, damage] : damages) {
    SCOPED_TRACE(what);
    const std::string path = store_path("damaged");
    const TuningStore store(path);
    ASSERT_EQ(store.add({kernel_row("q4_K.cpu.scalar_f32", 256, 256, 50), kernel_row("q4_K.cpu.scalar_f32", 512, 256, 60)}),
              "");
    rewrite(path, damage);
    std::string warning;
    EXPECT_TRUE(store.usable_rows(&warning).empty());
    EXPECT_NE(warning.find("tuning store ignored"), std::string::npos) << warning;
    EXPECT_NE(warning.find(path), std::string::npos) << warning;
    EXPECT_EQ(warning.find('\n'), std::string::npos) << warning;
    // Writing again keeps the damaged file for inspection and starts afresh.
    ASSERT_EQ(store.add({kernel_row("q4_K.cpu.scalar_f32", 768, 256, 70)}), "");
    EXPECT_TRUE(std::filesystem::exists(path + ".damaged"));
    const auto rows = store.usable_rows(&warning);
    ASSERT_EQ(rows.size(), 1u);
    EXPECT_EQ(rows[0].rows, 768);
  }
}

TEST(TuningStore, ConcurrentWritersKeepEveryRow) {
  const std::string path = store_path("concurrent");
  constexpr int kWriters = 3, kRowsEach = 25;
  std::vector<pid_t> children;
  for (int w = 0; w < kWriters; ++w) {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      const TuningStore store(path);
      int failures = 0;
      // One add per row: each a read, merge and rename racing the other writers'.
      for (int i = 0; i < kRowsEach; ++i)
        failures += !store.add({kernel_row("q4_K.cpu.scalar_f32", 256 * (1 + w * kRowsEach + i), 256, 10.0 + i)}).empty();
      ::_exit(failures == 0 ? 0 : 1);
    }
    children.push_back(pid);
  }
  for (const pid_t pid : children) {
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  const auto rows = TuningStore(path).read_all();
  EXPECT_EQ(rows.size(), static_cast<std::size_t>(kWriters * kRowsEach));
  std::set<std::int64_t> shapes;
  for (const TuningRow& r : rows) shapes.insert(r.rows);
  EXPECT_EQ(shapes.size(), static_cast<std::size_t>(kWriters * kRowsEach));
}

TEST(TuningStore, RowsKeepTheirCountOfVectors) {
  const TuningStore store(store_path("n"));
  const std::string kernel = "q4_K.cpu.scalar_batch_f32";
  const double t = fresh_time_us("batch row");
  ASSERT_EQ(store.add({batch_row(kernel, 256, 256, 1, t), batch_row(kernel, 256, 256, 2, 1.5 * t),
                       batch_row(kernel, 256, 256, 4, 2.5 * t)}),
            "");
  // n is part of the key: a newer row of one count replaces only that count's.
  ASSERT_EQ(store.add({batch_row(kernel, 256, 256, 2, 1.25 * t)}), "");
  const auto rows = store.read_all();
  ASSERT_EQ(rows.size(), 3u) << ::testing::PrintToString(kernels_of(rows));
  EXPECT_EQ(rows[0].n, 1);
  EXPECT_EQ(rows[1].n, 2);
  EXPECT_EQ(rows[2].n, 4);
  EXPECT_DOUBLE_EQ(rows[0].time_median_us, std::stod(fmt::format("{:.6g}", t)));
  EXPECT_DOUBLE_EQ(rows[1].time_median_us, std::stod(fmt::format("{:.6g}", 1.25 * t)));
  EXPECT_DOUBLE_EQ(rows[2].time_median_us, std::stod(fmt::format("{:.6g}", 2.5 * t)));
  EXPECT_EQ(rows[2].op, "matvec_batch");
  EXPECT_EQ(store.usable_rows().size(), 3u);
  // Only a batch kernel takes more than one vector per call: another such row is damage.
  rewrite(store.path(), [](std::string& text) { text.replace(text.rfind("matvec_batch"), 12, "matvec"); });
  std::string warning;
  EXPECT_TRUE(store.usable_rows(&warning).empty());
  EXPECT_NE(warning.find("only a batch kernel"), std::string::npos) << warning;
}

TEST(TuningStore, AFileWrittenBeforeTheNColumnReadsAsOneVectorPerCall) {
  const std::string path = store_path("before_n");
  const TuningStore store(path);
  const double t = fresh_time_us("old store");
  ASSERT_EQ(store.add({kernel_row("q4_K.cpu.scalar_f32", 256, 256, t), kernel_row("q6_K.cpu.scalar_f32", 512, 256, 2 * t)}),
            "");
  // The file as a writer before the column left it: the columns from n on gone.
  drop_last_columns(path, 3);
  {
    std::ifstream in(path);
    std::string header;
    std::getline(in, header);
    ASSERT_EQ(header.find(",n"), std::string::npos) << header;
    ASSERT_NE(header.find("git_commit"), std::string::npos) << header;
  }
  std::string warning;
  EXPECT_TRUE(store.usable_rows(&warning).empty()) << "cold rows of an unknown rotation";
  EXPECT_TRUE(warning.empty()) << warning;
  const auto rows = store.read_all();
  ASSERT_EQ(rows.size(), 2u);
  for (const TuningRow& r : rows) EXPECT_EQ(r.n, 1) << r.kernel;
  // Written again, it gains the column and keeps its rows.
  ASSERT_EQ(store.add({batch_row("q4_K.cpu.scalar_batch_f32", 256, 256, 4, 3 * t)}), "");
  const auto again = store.read_all();
  ASSERT_EQ(again.size(), 3u);
  EXPECT_EQ(again[0].n, 1);
  EXPECT_EQ(again[1].n, 1);
  EXPECT_EQ(again[2].n, 4);
  EXPECT_FALSE(std::filesystem::exists(path + ".damaged"));
}

TEST(TuningStore, AFileWrittenBeforeTheReadSpeedColumnReadsAsUnknownSpeed) {
  const std::string path = store_path("before_read_gbps");
  const TuningStore store(path);
  ASSERT_EQ(store.add({row_at_speed("q4_K.cpu.scalar_f32", 256, fresh_time_us("old"), 33)}), "");
  drop_last_columns(path, 2);  // read_gbps and rotation_bytes
  std::string warning;
  const auto rows = store.read_all();
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].read_gbps, 0);
  EXPECT_EQ(rows[0].rotation_bytes, 0);
  EXPECT_EQ(rows[0].n, 1);
  EXPECT_TRUE(store.usable_rows(&warning).empty()) << "a cold row of an unknown rotation";
  EXPECT_TRUE(warning.empty()) << warning;
}

// A store written before kernels were renamed (kernels/former_names.h): its rows are
// read under the kernels' names now, used where their build is this one's, replaced by a
// newer measurement of the same key, and written back under the name now.
TEST(TuningStore, ARowUnderAFormerKernelNameIsReadUnderItsNameNow) {
  const std::string path = store_path("former_names");
  const TuningStore store(path);
  const double t = fresh_time_us("former names");
  ASSERT_EQ(store.add({kernel_row("q4_K.cpu.avx2_x4_q8k", 256, 256, t), kernel_row("f16.cpu.avx2_x4", 512, 256, 2 * t),
                       kernel_row("q4_K.cpu.avx512vnni_x4_q8k", 768, 256, 3 * t)}),
            "");
  // The file as the store kept it before the renames: each row under a former name
  // (the last one two renames old).
  rewrite(path, [](std::string& text) {
    for (const auto& [now, former] : {std::pair<std::string, std::string>{",q4_K.cpu.avx2_x4_q8k,", ",q4_K.cpu.avx2_4row_q8k,"},
                                      {",f16.cpu.avx2_x4,", ",f16.cpu.avx2_4row,"},
                                      {",q4_K.cpu.avx512vnni_x4_q8k,", ",q4_K.cpu.avx512_vnni_4row,"}}) {
      ASSERT_NE(text.find(now), std::string::npos) << now;
      text.replace(text.find(now), now.size(), former);
    }
  });
  const auto rows = store.read_all();
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[0].kernel, "q4_K.cpu.avx2_x4_q8k");
  EXPECT_EQ(rows[1].kernel, "f16.cpu.avx2_x4");
  EXPECT_EQ(rows[2].kernel, "q4_K.cpu.avx512vnni_x4_q8k");
  std::string warning;
  const auto usable = store.usable_rows(&warning);
  EXPECT_TRUE(warning.empty()) << warning;
  ASSERT_EQ(usable.size(), 3u) << ::testing::PrintToString(kernels_of(usable));
  EXPECT_EQ(usable[0].kernel, "q4_K.cpu.avx2_x4_q8k");
  EXPECT_NEAR(usable[0].time_median_us, t, 1e-5 * t);  // six significant digits kept
  // A newer measurement under the name now replaces the row of the former name.
  ASSERT_EQ(store.add({kernel_row("q4_K.cpu.avx2_x4_q8k", 256, 256, t / 2)}), "");
  const auto again = store.read_all();
  ASSERT_EQ(again.size(), 3u) << ::testing::PrintToString(kernels_of(again));
  EXPECT_NEAR(again[0].time_median_us, t / 2, 1e-5 * t);
  std::ifstream in(path);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  for (const char* former : {"4row", "avx512_vnni"}) EXPECT_EQ(text.find(former), std::string::npos) << text;
}

// The committed stores (results/<machine>/tuning.csv) were written before kernels were
// renamed: every row still reads, under the name its kernel has now.
TEST(TuningStore, CommittedStoresReadUnderTheKernelsNamesNow) {
  int stores = 0, renamed = 0;
  for (const auto& dir : std::filesystem::directory_iterator(std::filesystem::path(QMV_SOURCE_DIR) / "results")) {
    const std::filesystem::path path = dir.path() / "tuning.csv";
    if (!std::filesystem::is_regular_file(path)) continue;
    ++stores;
    std::ifstream in(path);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const auto lines = std::count(text.begin(), text.end(), '\n');
    std::vector<TuningRow> rows;
    ASSERT_NO_THROW(rows = TuningStore(path.string()).read_all()) << path;
    EXPECT_EQ(static_cast<long>(rows.size()), lines - 1) << path << ": every row read";
    std::set<std::string> kernels;
    for (const TuningRow& r : rows) {
      EXPECT_EQ(current_kernel_name(r.kernel), r.kernel) << path << ": " << r.kernel << " read under a former name";
      kernels.insert(r.kernel);
    }
    for (const FormerName& f : former_kernel_names()) {
      if (text.find("," + std::string(f.former) + ",") == std::string::npos) continue;
      ++renamed;
      EXPECT_TRUE(kernels.count(std::string(f.current))) << path << ": " << f.former << " is not read as " << f.current;
    }
  }
  if (stores == 0) GTEST_SKIP() << "no committed tuning store under results/";
  EXPECT_GT(renamed, 0) << "the committed stores name no former kernel name: this test checks nothing";
}

TEST(TuningStore, BatchRowsAreRecordedWithTheirCount) {
  const std::string path = store_path("record_batch");
  const qmv::testing::ScopedEnv one_file({{"QMV_TUNING_STORE", path}});
  const KernelSpec& batch = *global_registry().find("q4_K.cpu.scalar_batch_f32");
  BenchRow b;
  b.kernel = batch.name;
  b.op = std::string(to_string(batch.op));
  b.weight_type = std::string(to_string(batch.weight));
  b.backend = "cpu";
  b.rows = b.cols = 256;
  b.threads = 1;
  b.cache = "cold";
  b.tile_rows = CpuTiling{}.tile_rows;
  b.min_parallel_rows = CpuTiling{}.min_parallel_rows;
  b.repetitions = 3;
  b.time_median_us = fresh_time_us("record batch");
  b.gbps_median = 4;
  std::vector<BenchRow> rows;
  for (int n : {1, 3, 8}) {
    rows.push_back(b);
    rows.back().n = n;
  }
  // A row of another tiling than decode's is still left out, whatever its n.
  rows.push_back(rows.back());
  rows.back().rows = 512;
  rows.back().tile_rows += 1;
  record_in_store(rows, "test");
  std::vector<int> counts;
  for (const TuningRow& r : TuningStore(path).read_all()) {
    EXPECT_EQ(r.rows, 256);
    counts.push_back(r.n);
  }
  EXPECT_EQ(counts, (std::vector<int>{1, 3, 8}));
}

using qmv::testing::TinyQ4K;


// Store rows for every candidate of every matvec auto decides on `w`: `fastest` takes
// 10 us, every other kernel 20 us (cold, as the model's cache state says; a GPU streams
// its weights).
std::vector<TuningRow> rows_making_fastest(const ModelWeights& w, const std::string& fastest, int threads,
                                           Backend backend = Backend::CPU) {
  std::vector<TuningRow> rows;
  for (const AutoMatvec& m : auto_matvecs(KernelPlan{}, w))
    for (const KernelSpec* k : auto_candidates(m, backend)) {
      TuningRow r = kernel_row(k->name, m.shape.rows, m.shape.cols, k->name == fastest ? 10 : 20, threads);
      r.cache = backend == Backend::CPU ? model_cache_state(w) : "cold";
      rows.push_back(r);
    }
  return rows;
}

const PlannedMatvec& planned_op(const std::vector<PlannedMatvec>& planned, Op op) {
  const auto it = std::find_if(planned.begin(), planned.end(), [&](const PlannedMatvec& p) { return p.op == op; });
  if (it == planned.end()) throw std::runtime_error("no " + std::string(to_string(op)) + " in the plan");
  return *it;
}

// A screening pass and a finalists' pass more than kSameReadSpeed apart would leave the
// candidates' rows at two speeds, none covering the matvec: auto times them all again.
TEST(AutoPlan, PassesMoreThanOneSpeedApartAreTimedAgain) {
  std::mt19937_64 rng(qmv::testing::fresh_seed("passes"));
  std::uniform_real_distribution<double> speed(5, 120);
  auto pass = [](double gbps, int kernels) {
    std::vector<BenchRow> rows(kernels);
    for (BenchRow& r : rows) r.peak_gbps = gbps;
    return rows;
  };
  for (int i = 0; i < 200; ++i) {
    const double a = speed(rng), b = speed(rng);
    const bool one = std::max(a, b) <= kSameReadSpeed * std::min(a, b);
    EXPECT_EQ(passes_met_one_speed(pass(a, 7), pass(b, 3)), one) << a << " then " << b;
  }
  const double a = speed(rng);
  EXPECT_FALSE(passes_met_one_speed(pass(a, 5), pass(a * kSameReadSpeed * 1.01, 2)));
  EXPECT_TRUE(passes_met_one_speed(pass(a, 5), pass(a * kSameReadSpeed * 0.99, 2)));
  // A warm pass has no read loop, and a single finalist no second pass.
  EXPECT_TRUE(passes_met_one_speed(pass(0, 5), pass(0, 2)));
  EXPECT_TRUE(passes_met_one_speed(pass(a, 5), {}));
}

TEST(AutoPlan, PicksWhatTheStoreMeasuredFastestAndTheStaticOrderWhenTold) {
  const TinyQ4K m;
  AutoPlanOptions options;
  options.threads = 1;
  options.measure = false;
  const KernelSpec* static_choice = nullptr;
  for (const PlannedMatvec& p : resolve_plan(KernelPlan::static_order(), m.weights, 1))
    if (p.op == Op::AttnQ) static_choice = p.kernel;
  ASSERT_NE(static_choice, nullptr);
  // Two kernels in turn made fastest, neither of them the static order's choice.
  std::vector<std::string> others;
  for (const AutoMatvec& a : auto_matvecs(KernelPlan{}, m.weights))
    if (a.kind == OpKind::MatVec && a.shape == Shape{256, 256})
      for (const KernelSpec* k : auto_candidates(a, Backend::CPU))
        if (k != static_choice && others.size() < 2) others.push_back(k->name);
  if (others.size() < 2) GTEST_SKIP() << "fewer than three Q4_K kernels run on this CPU";
  for (const std::string& fastest : others) {
    SCOPED_TRACE(fastest);
    options.store_path = store_path("auto_" + fastest);
    ASSERT_EQ(TuningStore(options.store_path).add(rows_making_fastest(m.weights, fastest, 1)), "");
    const AutoPlanEvidence ev = auto_plan_evidence(KernelPlan{}, m.weights, options);
    EXPECT_EQ(ev.from_store, ev.matvecs);
    EXPECT_EQ(ev.measured, 0);
    const auto planned = resolve_plan(KernelPlan{}, m.weights, 1, ev.speeds);
    const PlannedMatvec& q = planned_op(planned, Op::AttnQ);
    EXPECT_EQ(q.kernel->name, fastest);
    EXPECT_NE(q.source.find("store, "), std::string::npos) << q.source;
    ASSERT_NE(q.runner_up, nullptr);
    EXPECT_NE(q.runner_up->name, fastest);
    EXPECT_GT(q.gbps, q.runner_up_gbps);
    // Told to keep the fixed order, auto ignores the measurements.
    const auto fixed = resolve_plan(KernelPlan::static_order(), m.weights, 1, ev.speeds);
    EXPECT_EQ(planned_op(fixed, Op::AttnQ).kernel, static_choice);
    EXPECT_EQ(planned_op(fixed, Op::AttnQ).source, "static order");
  }
}

TEST(AutoPlan, FusesGateAndUpOnlyWhereOneCallBeatsTwo) {
  const TinyQ4K m;
  AutoPlanOptions options;
  options.measure = false;
  const std::vector<AutoMatvec> matvecs = auto_matvecs(KernelPlan{}, m.weights);
  const auto fused = std::find_if(matvecs.begin(), matvecs.end(),
                                  [](const AutoMatvec& a) { return a.kind == OpKind::FusedUpGate; });
  if (fused == matvecs.end() || auto_candidates(*fused, Backend::CPU).empty()) GTEST_SKIP() << "no fused Q4_K kernel runs on this CPU";
  for (const double fused_us : {15.0, 25.0}) {
    SCOPED_TRACE(fused_us);
    std::vector<TuningRow> rows = rows_making_fastest(m.weights, "q4_K.cpu.scalar_f32", 1);
    for (TuningRow& r : rows)
      if (r.op == "fused_up_gate") r.time_median_us = fused_us;  // against 2 x 10 us for the best plain kernel
    options.store_path = store_path("fuse");
    ASSERT_EQ(TuningStore(options.store_path).add(rows), "");
    const auto planned = resolve_plan(KernelPlan{}, m.weights, 1, auto_plan_evidence(KernelPlan{}, m.weights, options).speeds);
    const bool fuses = std::any_of(planned.begin(), planned.end(), [](const PlannedMatvec& p) { return p.op == Op::FfnUpGate; });
    EXPECT_EQ(fuses, fused_us < 20.0);
  }
}

TEST(AutoPlan, MeasuresWhatTheStoreLacksOnceAndSavesIt) {
  const TinyQ4K m;
  AutoPlanOptions options;
  options.threads = 1;
  options.store_path = store_path("measure");
  options.screen_min_time_s = 0.002;
  options.final_min_time_s = 0.002;
  std::vector<std::string> progress;
  options.progress = [&](const std::string& line) { progress.push_back(line); };
  const AutoPlanEvidence first = auto_plan_evidence(KernelPlan{}, m.weights, options);
  EXPECT_GT(first.matvecs, 0);
  EXPECT_EQ(first.measured, first.matvecs);
  EXPECT_EQ(first.from_store, 0);
  EXPECT_EQ(static_cast<int>(progress.size()), first.matvecs);  // a line per matvec timed
  std::size_t candidates = 0;
  for (const AutoMatvec& a : auto_matvecs(KernelPlan{}, m.weights)) candidates += auto_candidates(a, Backend::CPU).size();
  EXPECT_EQ(first.speeds.size(), candidates);
  for (const KernelSpeed& s : first.speeds) EXPECT_EQ(s.source, "measured now");
  const auto planned = resolve_plan(KernelPlan{}, m.weights, 1, first.speeds);
  EXPECT_EQ(planned_op(planned, Op::AttnQ).source, "measured now");

  progress.clear();
  const AutoPlanEvidence second = auto_plan_evidence(KernelPlan{}, m.weights, options);
  EXPECT_EQ(second.measured, 0);
  EXPECT_EQ(second.from_store, second.matvecs);
  EXPECT_TRUE(progress.empty());
  EXPECT_NE(second.summary().find("nothing timed"), std::string::npos) << second.summary();
  // The same choice, now from the store.
  const auto again = resolve_plan(KernelPlan{}, m.weights, 1, second.speeds);
  EXPECT_EQ(planned_op(again, Op::AttnQ).kernel, planned_op(planned, Op::AttnQ).kernel);
  EXPECT_NE(planned_op(again, Op::AttnQ).source.find("store, "), std::string::npos);
}

TEST(AutoPlan, OnTheGpuPicksFromTheGpusRowsAndMeasuresWhatTheyLack) {
  if (machine_info().gpu_machine.empty()) GTEST_SKIP() << "no CUDA device: the GPU's auto plan is not tested here";
  const TinyQ4K m;
  AutoPlanOptions options;
  options.backend = Backend::CUDA;
  options.store_path = store_path("gpu_measure");
  options.screen_min_time_s = options.final_min_time_s = 0.002;
  const AutoPlanEvidence first = auto_plan_evidence(KernelPlan{}, m.weights, options);
  ASSERT_GT(first.matvecs, 0);
  EXPECT_EQ(first.measured, first.matvecs);
  const AutoPlanEvidence second = auto_plan_evidence(KernelPlan{}, m.weights, options);
  EXPECT_EQ(second.measured, 0);
  EXPECT_EQ(second.from_store, second.matvecs);
  for (const TuningRow& r : TuningStore(options.store_path).read_all()) {
    EXPECT_EQ(r.machine, machine_info().gpu_machine);
    EXPECT_EQ(r.isa, machine_info().gpu_arch);
  }
  // Each Q4_K CUDA kernel in turn made fastest is what auto picks for attn_q.
  options.measure = false;
  for (const AutoMatvec& a : auto_matvecs(KernelPlan{}, m.weights)) {
    if (a.kind != OpKind::MatVec || a.shape != Shape{256, 256}) continue;
    for (const KernelSpec* fastest : auto_candidates(a, Backend::CUDA)) {
      SCOPED_TRACE(fastest->name);
      options.store_path = store_path("gpu_" + fastest->name);
      ASSERT_EQ(TuningStore(options.store_path).add(rows_making_fastest(m.weights, fastest->name, 1, Backend::CUDA)), "");
      const AutoPlanEvidence ev = auto_plan_evidence(KernelPlan{}, m.weights, options);
      EXPECT_EQ(ev.from_store, ev.matvecs);
      const auto planned = resolve_plan(KernelPlan{}, m.weights, 1, ev.speeds, Backend::CUDA);
      EXPECT_EQ(planned_op(planned, Op::AttnQ).kernel, fastest);
    }
    break;
  }
}

// The Q4_K kernels of the tiny model's attn_q that run here, auto's candidates for it.
std::vector<std::string> attn_q_kernels(const TinyQ4K& m) {
  std::vector<std::string> out;
  for (const AutoMatvec& a : auto_matvecs(KernelPlan{}, m.weights))
    if (a.kind == OpKind::MatVec && a.shape == Shape{256, 256}) {
      for (const KernelSpec* k : auto_candidates(a, Backend::CPU)) out.push_back(k->name);
      break;
    }
  return out;
}

// Two of them, or fewer.
std::vector<std::string> two_attn_q_kernels(const TinyQ4K& m) {
  std::vector<std::string> out = attn_q_kernels(m);
  if (out.size() > 2) out.resize(2);
  return out;
}

// Rows making `fastest` the fastest, each measured on `day` while the memory read at
// `read_gbps`.
std::vector<TuningRow> rows_at_speed(const ModelWeights& w, const std::string& fastest, double read_gbps,
                                     const std::string& day) {
  std::vector<TuningRow> rows = rows_making_fastest(w, fastest, 1);
  for (TuningRow& r : rows) {
    r.read_gbps = read_gbps;
    r.measured_at = day + "T12:00:00Z";
  }
  return rows;
}

// Rows for every candidate at `read_gbps`, `first` taking first_us and `second`
// second_us, every other 20 us.
std::vector<TuningRow> rows_timed(const ModelWeights& w, const std::string& first, double first_us,
                                  const std::string& second, double second_us, double read_gbps,
                                  const std::string& day) {
  std::vector<TuningRow> rows = rows_at_speed(w, first, read_gbps, day);
  for (TuningRow& r : rows) {
    r.time_median_us = r.kernel == first ? first_us : r.kernel == second ? second_us : 20;
    r.gbps = 1e3 / r.time_median_us;
  }
  return rows;
}

// Two Q4_K kernels of the tiny model's attn_q (false when fewer run here), two read
// speeds drawn afresh, whole GB/s, the fast one 1.7x the slow one, and options for one
// thread on a fresh store named `store`.
struct TwoKernelsTwoSpeeds {
  std::vector<std::string> two;
  double slow = 0, fast = 0;
  AutoPlanOptions options;
};
bool two_kernels_two_speeds(const TinyQ4K& m, const std::string& store, TwoKernelsTwoSpeeds& out) {
  out.options.threads = 1;
  out.options.store_path = store_path(store);
  out.two = two_attn_q_kernels(m);
  std::mt19937_64 rng(qmv::testing::fresh_seed());
  out.slow = std::round(std::uniform_real_distribution<double>(25, 40)(rng));
  out.fast = std::round(1.7 * out.slow);
  return out.two.size() >= 2;
}

TEST(AutoPlan, RanksOverEveryReadSpeedWhereAllCandidatesWereTimed) {
  const TinyQ4K m;
  TwoKernelsTwoSpeeds t;
  if (!two_kernels_two_speeds(m, "over_speeds", t)) GTEST_SKIP() << "fewer than two Q4_K kernels run on this CPU";
  auto& [two, slow, fast, options] = t;
  options.measure = false;
  // At the slow speed the first kernel is a little quicker; at the fast one the second
  // is four times quicker.
  ASSERT_EQ(TuningStore(options.store_path).add(rows_timed(m.weights, two[0], 10, two[1], 11, slow, "2026-01-01")), "");
  const AutoPlanEvidence one = auto_plan_evidence(KernelPlan{}, m.weights, options);
  EXPECT_EQ(one.over_speeds, 0);
  EXPECT_EQ(planned_op(resolve_plan(KernelPlan{}, m.weights, 1, one.speeds), Op::AttnQ).kernel->name, two[0]);
  ASSERT_EQ(TuningStore(options.store_path).add(rows_timed(m.weights, two[0], 20, two[1], 5, fast, "2026-01-02")), "");
  const AutoPlanEvidence both = auto_plan_evidence(KernelPlan{}, m.weights, options);
  EXPECT_EQ(both.from_store, both.matvecs);
  EXPECT_EQ(both.over_speeds, both.matvecs);
  EXPECT_NE(both.summary().find("ranked over two or more read speeds"), std::string::npos) << both.summary();
  const auto planned = resolve_plan(KernelPlan{}, m.weights, 1, both.speeds);
  const PlannedMatvec& q = planned_op(planned, Op::AttnQ);
  EXPECT_EQ(q.kernel->name, two[1]);
  EXPECT_NE(q.source.find(fmt::format("at {:.0f} and {:.0f} GB/s read", slow, fast)), std::string::npos) << q.source;
  // The figure is the geometric mean over the two speeds.
  for (const KernelSpeed& sp : both.speeds)
    if (sp.kernel == two[1] && sp.rows == 256 && sp.cols == 256) {
      EXPECT_NEAR(sp.time_median_us, std::sqrt(11.0 * 5), 1e-9);
    }
}

TEST(AutoPlan, ComparesOnlyAtSpeedsWhereEveryCandidateWasTimed) {
  const TinyQ4K m;
  TwoKernelsTwoSpeeds t;
  if (!two_kernels_two_speeds(m, "one_speed", t)) GTEST_SKIP() << "fewer than two Q4_K kernels run on this CPU";
  auto& [two, slow, fast, options] = t;
  options.screen_min_time_s = options.final_min_time_s = 0.002;
  // Every candidate at the slow speed, the first kernel fastest; at the fast speed only
  // the second, quicker than any slow figure but with nothing of its speed to set against.
  ASSERT_EQ(TuningStore(options.store_path).add(rows_timed(m.weights, two[0], 10, two[1], 20, slow, "2026-01-01")), "");
  std::vector<TuningRow> fast_rows;
  for (const TuningRow& r : rows_timed(m.weights, two[0], 20, two[1], 5, fast, "2026-01-02"))
    if (r.kernel == two[1]) fast_rows.push_back(r);
  ASSERT_EQ(TuningStore(options.store_path).add(fast_rows), "");
  std::vector<std::string> progress;
  options.progress = [&](const std::string& line) { progress.push_back(line); };
  const AutoPlanEvidence ev = auto_plan_evidence(KernelPlan{}, m.weights, options);
  EXPECT_EQ(ev.measured, 0);
  EXPECT_TRUE(progress.empty());
  EXPECT_EQ(ev.from_store, ev.matvecs);
  EXPECT_EQ(ev.over_speeds, 0);
  const auto planned = resolve_plan(KernelPlan{}, m.weights, 1, ev.speeds);
  EXPECT_EQ(planned_op(planned, Op::AttnQ).kernel->name, two[0]);
  for (const KernelSpeed& sp : ev.speeds)
    EXPECT_NE(sp.source.find(fmt::format("at {:.0f} GB/s read", slow)), std::string::npos) << sp.kernel << " " << sp.source;
  // Without the slow rows no speed has every candidate: the matvecs are timed.
  options.store_path = store_path("one_speed_missing");
  ASSERT_EQ(TuningStore(options.store_path).add(fast_rows), "");
  const AutoPlanEvidence timed = auto_plan_evidence(KernelPlan{}, m.weights, options);
  EXPECT_EQ(timed.measured, timed.matvecs);
}

// A run the host moved the threads in leaves some kernels' repetitions all at one
// speed: most candidates have rows at both. The speed most were timed at is ranked at,
// and a kernel with no row there is left out, however quick at the other speed; a
// speed only a few were timed at is not.
TEST(AutoPlan, RanksAtASpeedMostCandidatesWereTimedAtLeavingOutTheOthers) {
  const TinyQ4K m;
  TwoKernelsTwoSpeeds t;
  if (!two_kernels_two_speeds(m, "most_timed", t)) GTEST_SKIP() << "fewer than two Q4_K kernels run on this CPU";
  auto& [two, slow, fast, options] = t;
  options.measure = false;
  std::vector<std::string> candidates = attn_q_kernels(m);
  if (candidates.size() < 3) GTEST_SKIP() << "fewer than three Q4_K kernels run on this CPU";
  std::mt19937_64 rng(qmv::testing::fresh_seed("most_timed"));
  std::shuffle(candidates.begin(), candidates.end(), rng);
  // `absent` is the quickest at the slow speed and has no fast row; `winner` is second
  // there and the quickest at the fast one.
  const std::string absent = candidates[0], winner = candidates[1];
  const std::vector<TuningRow> slow_rows = rows_timed(m.weights, absent, 10, winner, 11, slow, "2026-01-01");
  const std::vector<TuningRow> fast_rows = rows_timed(m.weights, absent, 20, winner, 5, fast, "2026-01-02");
  // The fast rows of `kernels` candidates, `absent` never among them.
  auto fast_rows_of = [&](std::size_t kernels) {
    const auto first = candidates.begin() + 1, last = first + static_cast<std::ptrdiff_t>(kernels);
    std::vector<TuningRow> out;
    for (const TuningRow& r : fast_rows)
      if (std::find(first, last, r.kernel) != last) out.push_back(r);
    return out;
  };
  auto attn_q = [&](const AutoPlanEvidence& ev) {
    return planned_op(resolve_plan(KernelPlan{}, m.weights, 1, ev.speeds), Op::AttnQ).kernel->name;
  };
  const std::size_t all_but_absent = candidates.size() - 1;
  ASSERT_EQ(TuningStore(options.store_path).add(slow_rows), "");
  ASSERT_EQ(TuningStore(options.store_path).add(fast_rows_of(all_but_absent)), "");
  const AutoPlanEvidence most = auto_plan_evidence(KernelPlan{}, m.weights, options);
  EXPECT_EQ(most.from_store, most.matvecs);
  EXPECT_GE(most.over_speeds, 1);
  EXPECT_GE(most.left_out, 1);
  EXPECT_NE(most.summary().find("left out, not timed at each"), std::string::npos) << most.summary();
  EXPECT_EQ(attn_q(most), winner);
  for (const KernelSpeed& sp : most.speeds) {
    EXPECT_NE(sp.kernel, absent);
    if (sp.rows == 256 && sp.cols == 256) {
      EXPECT_NE(sp.source.find(fmt::format("at {:.0f} and {:.0f} GB/s read", slow, fast)), std::string::npos)
          << sp.kernel << " " << sp.source;
    }
  }
  // Half of them or fewer at the fast speed: it is not ranked at, and nothing is left out.
  options.store_path = store_path("half_timed");
  ASSERT_EQ(TuningStore(options.store_path).add(slow_rows), "");
  ASSERT_EQ(TuningStore(options.store_path).add(fast_rows_of(candidates.size() / 2)), "");
  const AutoPlanEvidence half = auto_plan_evidence(KernelPlan{}, m.weights, options);
  EXPECT_EQ(half.from_store, half.matvecs);
  EXPECT_EQ(half.left_out, 0);
  EXPECT_EQ(attn_q(half), absent);
}

// Measuring, a matvec ranked at the speed now is not covered while a candidate has no
// row there: its candidates are timed now and saved, and the next run times nothing.
// Told not to measure, the same store ranks without the kernel, as above.
TEST(AutoPlan, TimesAMatvecWhoseCandidatesLackARowAtTheSpeedNow) {
  const TinyQ4K m;
  TwoKernelsTwoSpeeds t;
  if (!two_kernels_two_speeds(m, "lacking_now", t)) GTEST_SKIP() << "fewer than two Q4_K kernels run on this CPU";
  auto& [two, slow, fast, options] = t;
  options.screen_min_time_s = options.final_min_time_s = 0.002;
  std::vector<std::string> candidates = attn_q_kernels(m);
  std::mt19937_64 rng(qmv::testing::fresh_seed("lacking_now"));
  std::shuffle(candidates.begin(), candidates.end(), rng);
  const std::string absent = candidates[0];
  ASSERT_EQ(TuningStore(options.store_path).add(rows_timed(m.weights, two[0], 10, two[1], 11, slow, "2026-01-01")),
            "");
  std::vector<TuningRow> fast_rows;
  for (const TuningRow& r : rows_timed(m.weights, two[0], 20, two[1], 5, fast, "2026-01-02"))
    if (r.kernel != absent) fast_rows.push_back(r);
  ASSERT_EQ(TuningStore(options.store_path).add(fast_rows), "");
  options.read_gbps_now = fast;

  options.measure = false;
  const AutoPlanEvidence unmeasured = auto_plan_evidence(KernelPlan{}, m.weights, options);
  EXPECT_EQ(unmeasured.measured, 0);
  EXPECT_GE(unmeasured.left_out, 1);

  options.measure = true;
  std::vector<std::string> progress;
  options.progress = [&](const std::string& line) { progress.push_back(line); };
  const AutoPlanEvidence first = auto_plan_evidence(KernelPlan{}, m.weights, options);
  EXPECT_GE(first.measured, 1);
  EXPECT_EQ(first.measured + first.from_store, first.matvecs);
  ASSERT_FALSE(progress.empty());
  EXPECT_NE(progress.front().find(fmt::format("with no row at the read speed now, {:.0f} GB/s", fast)),
            std::string::npos)
      << progress.front();
  bool absent_timed = false;
  for (const KernelSpeed& sp : first.speeds) absent_timed |= sp.kernel == absent && sp.source == "measured now";
  EXPECT_TRUE(absent_timed) << absent << " was not timed";

  progress.clear();
  const AutoPlanEvidence second = auto_plan_evidence(KernelPlan{}, m.weights, options);
  EXPECT_EQ(second.measured, 0);
  EXPECT_EQ(second.from_store, second.matvecs);
  EXPECT_TRUE(progress.empty());
}

// Where the memory reads now at one of the stored speeds, the kernels are ranked at that
// speed: the kernel quickest there, though the geometric mean over both speeds favours
// another; kernels within kTieAtSpeedNow of the quickest there tie, and the mean over
// both speeds decides between them. Told no speed, or one near neither, the mean decides.
TEST(AutoPlan, RanksAtTheSpeedTheMemoryReadsAtNow) {
  const TinyQ4K m;
  TwoKernelsTwoSpeeds t;
  if (!two_kernels_two_speeds(m, "speed_now", t)) GTEST_SKIP() << "fewer than two Q4_K kernels run on this CPU";
  auto& [two, slow, fast, options] = t;
  options.measure = false;
  std::mt19937_64 rng(qmv::testing::fresh_seed("speed_now"));
  const double first_slow_us = std::uniform_real_distribution<double>(8, 12)(rng);
  // The second kernel at the slow speed `second_slow` times the first, at the fast one
  // 0.6 against the first's 0.9: over both it ranks ahead for any `second_slow` below 1.35.
  auto store_with = [&](const std::string& name, double second_slow) {
    options.store_path = store_path(name);
    const double us = first_slow_us;
    EXPECT_EQ(TuningStore(options.store_path)
                  .add(rows_timed(m.weights, two[0], us, two[1], second_slow * us, slow, "2026-01-01")),
              "");
    EXPECT_EQ(TuningStore(options.store_path)
                  .add(rows_timed(m.weights, two[0], 0.9 * us, two[1], 0.6 * us, fast, "2026-01-02")),
              "");
  };
  auto attn_q = [&](const AutoPlanEvidence& ev) {
    return planned_op(resolve_plan(KernelPlan{}, m.weights, 1, ev.speeds), Op::AttnQ).kernel->name;
  };
  const double jitter = std::uniform_real_distribution<double>(0.92, 1.08)(rng);
  // 1.3x slower at the slow speed: out of the ranking there, whatever the fast speed says.
  store_with("speed_now", 1.3);
  for (const auto& [now, winner] : {std::pair{slow * jitter, two[0]}, std::pair{fast * jitter, two[1]}}) {
    SCOPED_TRACE(now);
    options.read_gbps_now = now;
    const AutoPlanEvidence ev = auto_plan_evidence(KernelPlan{}, m.weights, options);
    EXPECT_EQ(ev.from_store, ev.matvecs);
    EXPECT_EQ(ev.at_speed_now, ev.matvecs);
    EXPECT_EQ(ev.over_speeds, 0);
    EXPECT_DOUBLE_EQ(ev.read_gbps_now, now);
    EXPECT_NE(ev.summary().find(fmt::format("ranked at the read speed now, {:.0f} GB/s", now)), std::string::npos)
        << ev.summary();
    EXPECT_EQ(attn_q(ev), winner);
  }
  // No speed now, or one between the two and near neither: the geometric mean.
  for (const double now : {0.0, std::sqrt(slow * fast)}) {
    SCOPED_TRACE(now);
    options.read_gbps_now = now;
    const AutoPlanEvidence ev = auto_plan_evidence(KernelPlan{}, m.weights, options);
    EXPECT_EQ(ev.at_speed_now, 0);
    EXPECT_EQ(ev.over_speeds, ev.matvecs);
    EXPECT_EQ(attn_q(ev), two[1]);
  }
  // 1.02x slower at the slow speed: a tie there, and the mean over both speeds picks it.
  store_with("speed_now_tie", 1.02);
  options.read_gbps_now = slow * jitter;
  const AutoPlanEvidence tie = auto_plan_evidence(KernelPlan{}, m.weights, options);
  EXPECT_EQ(tie.at_speed_now, tie.matvecs);
  EXPECT_EQ(attn_q(tie), two[1]);
  for (const KernelSpeed& sp : tie.speeds)
    if (sp.kernel == two[1] && sp.rows == 256 && sp.cols == 256) {
      EXPECT_NEAR(sp.time_median_us, std::sqrt(1.02 * 0.6) * first_slow_us, 1e-5 * first_slow_us);  // the CSV's digits
    }
}

TEST(AutoPlan, TheSpeedNowFallsInTheNearestStoredSpeedWithinTheSameSpeedRatio) {
  std::mt19937_64 rng(qmv::testing::fresh_seed());
  const double low = std::uniform_real_distribution<double>(20, 60)(rng);
  // Two groups of rows: [low, 1.1 low] and [1.7 low, 1.8 low].
  const std::vector<std::pair<double, double>> ranges = {{low, 1.1 * low}, {1.7 * low, 1.8 * low}};
  EXPECT_EQ(group_at_speed(ranges, 1.05 * low), 0);
  EXPECT_EQ(group_at_speed(ranges, 0.85 * low), 0);    // below the slowest, within kSameReadSpeed
  EXPECT_EQ(group_at_speed(ranges, 1.3 * low), 0);     // 1.18x past the first, 1.31x short of the second
  EXPECT_EQ(group_at_speed(ranges, 1.5 * low), 1);     // 1.36x past the first, 1.13x short of the second
  EXPECT_EQ(group_at_speed(ranges, 1.75 * low), 1);
  EXPECT_EQ(group_at_speed(ranges, 2.1 * low), 1);     // 1.17x past the fastest
  EXPECT_EQ(group_at_speed(ranges, 2.4 * low), -1);    // 1.33x past it: near no stored speed
  EXPECT_EQ(group_at_speed(ranges, 0.7 * low), -1);
  EXPECT_EQ(group_at_speed(ranges, 0), -1);            // not read
  EXPECT_EQ(group_at_speed({{0, 0}, {1.7 * low, 1.8 * low}}, 1.05 * low), -1);  // a group of unknown speed
}

TEST(AutoPlan, ARowOfUnknownReadSpeedAnswersAtAnySpeed) {
  const TinyQ4K m;
  TwoKernelsTwoSpeeds t;
  if (!two_kernels_two_speeds(m, "unknown_speed", t)) GTEST_SKIP() << "fewer than two Q4_K kernels run on this CPU";
  auto& [two, slow, fast, options] = t;
  (void)fast;
  options.measure = false;
  // Every candidate at the slow speed, the first at 8 us; the second only in a row of
  // unknown speed (a file written before the column), a little quicker or slower.
  for (const double unknown_us : {7.0, 9.0}) {
    SCOPED_TRACE(unknown_us);
    options.store_path = store_path("unknown_speed");
    std::vector<TuningRow> rows = rows_timed(m.weights, two[0], 8, two[1], unknown_us, slow, "2026-01-01");
    for (TuningRow& r : rows)
      if (r.kernel == two[1]) r.read_gbps = 0;
    ASSERT_EQ(TuningStore(options.store_path).add(rows), "");
    const AutoPlanEvidence ev = auto_plan_evidence(KernelPlan{}, m.weights, options);
    EXPECT_EQ(ev.from_store, ev.matvecs);
    EXPECT_EQ(planned_op(resolve_plan(KernelPlan{}, m.weights, 1, ev.speeds), Op::AttnQ).kernel->name,
              unknown_us < 8 ? two[1] : two[0]);
  }
}

TEST(AutoPlan, WithoutTuningAnUnmeasuredMatvecTakesTheStaticOrder) {
  const TinyQ4K m;
  AutoPlanOptions options;
  options.measure = false;
  options.store_path = store_path("no_tune");
  const AutoPlanEvidence ev = auto_plan_evidence(KernelPlan{}, m.weights, options);
  EXPECT_EQ(ev.unmeasured, ev.matvecs);
  EXPECT_TRUE(ev.speeds.empty());
  EXPECT_FALSE(std::filesystem::exists(options.store_path));
  const auto planned = resolve_plan(KernelPlan{}, m.weights, 1, ev.speeds);
  const auto fixed = resolve_plan(KernelPlan::static_order(), m.weights, 1);
  EXPECT_EQ(planned_op(planned, Op::AttnQ).kernel, planned_op(fixed, Op::AttnQ).kernel);
}

// The plan `decode --batch n` makes from the store at `path` without timing: the
// one-vector plan with gate and up apart, then batch_plan on both counts' speeds.
std::vector<PlannedMatvec> stored_batch_plan(const TinyQ4K& m, const std::string& path, int n) {
  const KernelPlan apart = KernelPlan::parse_rules("ffn_up_gate=none");
  AutoPlanOptions options;
  options.measure = false;
  options.store_path = path;
  const AutoPlanEvidence one = auto_plan_evidence(apart, m.weights, options);
  options.n = n;
  const AutoPlanEvidence batch = auto_plan_evidence(apart, m.weights, options);
  EXPECT_GT(batch.matvecs, 0);
  EXPECT_EQ(batch.from_store, batch.matvecs) << batch.summary();
  EXPECT_EQ(batch.measured, 0);
  std::vector<KernelSpeed> speeds = one.speeds;
  for (const KernelSpeed& s : batch.speeds) {
    EXPECT_EQ(s.n, n) << s.kernel;
    speeds.push_back(s);
  }
  return batch_plan(resolve_plan(apart, m.weights, 1, speeds), n, 1, speeds);
}

// Store rows for a batch of `n` on the tiny model: the one-vector candidates at n = 1
// (`one` at `one_us`, the others slower), and the batch kernels at n (`batch_us` for
// those it names, the rest slower than every other way).
std::vector<TuningRow> rows_for_batch(const ModelWeights& w, int n, const std::string& one, double one_us,
                                      const std::map<std::string, double>& batch_us) {
  const KernelPlan apart = KernelPlan::parse_rules("ffn_up_gate=none");
  std::vector<TuningRow> rows;
  for (const AutoMatvec& m : auto_matvecs(apart, w)) {
    for (const KernelSpec* k : auto_candidates(m, Backend::CPU)) {
      rows.push_back(kernel_row(k->name, m.shape.rows, m.shape.cols, k->name == one ? one_us : 3 * one_us));
      rows.back().cache = model_cache_state(w);
    }
    for (const KernelSpec* k : auto_candidates(m, Backend::CPU, n)) {
      const auto named = batch_us.find(k->name);
      rows.push_back(batch_row(k->name, m.shape.rows, m.shape.cols, n,
                               named != batch_us.end() ? named->second : 10 * n * one_us));
      rows.back().cache = model_cache_state(w);
    }
  }
  return rows;
}

// Two batch kernels of the tiny model's Q4_K attn_q that run here, or fewer.
std::vector<std::string> two_batch_kernels(const TinyQ4K& m, int n) {
  std::vector<std::string> out;
  for (const AutoMatvec& a : auto_matvecs(KernelPlan::parse_rules("ffn_up_gate=none"), m.weights))
    if (a.weight == WeightType::Q4_K && a.shape == Shape{256, 256})
      for (const KernelSpec* k : auto_candidates(a, Backend::CPU, n))
        if (out.size() < 2) out.push_back(k->name);
  return out;
}

TEST(AutoPlan, ForABatchPicksTheBatchKernelTheStoreSaysIsFastestAtThatCount) {
  const TinyQ4K m;
  const std::vector<std::string> two = two_batch_kernels(m, 4);
  if (two.size() < 2) GTEST_SKIP() << "fewer than two Q4_K batch kernels of 4 vectors run on this CPU";
  const std::string& a = two[0];
  const std::string& b = two[1];
  const std::string path = store_path("batch_counts");
  const double one_us = fresh_time_us("batch one-vector time");
  // At 2 vectors `a` is faster, at 4 `b`; both beat the one-vector kernel called n times.
  ASSERT_EQ(TuningStore(path).add(rows_for_batch(m.weights, 2, "q4_K.cpu.scalar_f32", one_us,
                                                 {{a, 1.2 * one_us}, {b, 1.6 * one_us}})),
            "");
  ASSERT_EQ(TuningStore(path).add(rows_for_batch(m.weights, 4, "q4_K.cpu.scalar_f32", one_us,
                                                 {{a, 3.0 * one_us}, {b, 2.0 * one_us}})),
            "");
  for (const auto& [n, fastest, runner_up] : {std::tuple{2, a, b}, std::tuple{4, b, a}}) {
    SCOPED_TRACE(fmt::format("batch of {}", n));
    const auto plan = stored_batch_plan(m, path, n);
    for (const PlannedMatvec& p : plan) {
      if (p.weight != WeightType::Q4_K) continue;
      SCOPED_TRACE(to_string(p.op));
      EXPECT_EQ(p.kernel->name, fastest);
      EXPECT_EQ(p.batch, n);
      EXPECT_NE(p.why.find("fastest measured"), std::string::npos) << p.why;
      EXPECT_NE(p.source.find("store, "), std::string::npos) << p.source;
      ASSERT_NE(p.runner_up, nullptr);
      EXPECT_EQ(p.runner_up->name, runner_up);
      EXPECT_GT(p.gbps, p.runner_up_gbps);
    }
  }
}

TEST(AutoPlan, ForABatchKeepsTheOneVectorKernelWhereTheStoreSaysItIsFaster) {
  const TinyQ4K m;
  const std::vector<std::string> two = two_batch_kernels(m, 2);
  if (two.empty()) GTEST_SKIP() << "no Q4_K batch kernel runs on this CPU";
  const std::string path = store_path("batch_one_vector");
  const double one_us = fresh_time_us("one-vector beats batch");
  const std::string one = "q4_K.cpu.scalar_f32";
  // Twice the one-vector time is less than the fastest batch kernel's.
  ASSERT_EQ(TuningStore(path).add(rows_for_batch(m.weights, 2, one, one_us, {{two[0], 2.5 * one_us}})), "");
  const auto plan = stored_batch_plan(m, path, 2);
  for (const PlannedMatvec& p : plan) {
    if (p.weight != WeightType::Q4_K) continue;
    SCOPED_TRACE(to_string(p.op));
    EXPECT_EQ(p.kernel->name, one);
    EXPECT_EQ(p.kernel->op, OpKind::MatVec);
    EXPECT_NE(p.why.find("one-vector kernel 2 times"), std::string::npos) << p.why;
    ASSERT_NE(p.runner_up, nullptr);
    EXPECT_EQ(p.runner_up->name, two[0]);
    EXPECT_GT(p.gbps, p.runner_up_gbps);
  }
}

TEST(AutoPlan, ForABatchARowOfAnotherCountAnswersNothing) {
  const TinyQ4K m;
  if (two_batch_kernels(m, 4).empty()) GTEST_SKIP() << "no Q4_K batch kernel of 4 vectors runs on this CPU";
  const std::string path = store_path("batch_other_count");
  const double one_us = fresh_time_us("other count");
  ASSERT_EQ(TuningStore(path).add(rows_for_batch(m.weights, 2, "q4_K.cpu.scalar_f32", one_us, {})), "");
  const KernelPlan apart = KernelPlan::parse_rules("ffn_up_gate=none");
  AutoPlanOptions options;
  options.measure = false;
  options.store_path = path;
  options.n = 4;
  const AutoPlanEvidence ev = auto_plan_evidence(apart, m.weights, options);
  EXPECT_GT(ev.matvecs, 0);
  EXPECT_EQ(ev.unmeasured, ev.matvecs) << ev.summary();
  EXPECT_TRUE(ev.speeds.empty());
  EXPECT_NE(ev.summary().find("batch of 4"), std::string::npos) << ev.summary();
  // Nothing at 4 vectors: the static batch order, and the table says it was not measured.
  options.n = 1;
  std::vector<KernelSpeed> speeds = auto_plan_evidence(apart, m.weights, options).speeds;
  const auto stored = batch_plan(resolve_plan(apart, m.weights, 1, speeds), 4, 1, speeds);
  const auto fixed = batch_plan(resolve_plan(apart, m.weights, 1, speeds), 4);
  for (std::size_t i = 0; i < stored.size(); ++i) {
    EXPECT_EQ(stored[i].kernel, fixed[i].kernel) << to_string(stored[i].op);
    if (stored[i].kernel->op == OpKind::MatVecBatch) {
      EXPECT_EQ(stored[i].source, "static order") << stored[i].why;
    }
  }
}

TEST(AutoPlan, ForABatchMeasuresWhatTheStoreLacksOnceAtThatCount) {
  const TinyQ4K m;
  if (two_batch_kernels(m, 2).empty()) GTEST_SKIP() << "no Q4_K batch kernel runs on this CPU";
  const KernelPlan apart = KernelPlan::parse_rules("ffn_up_gate=none");
  AutoPlanOptions options;
  options.n = 2;
  options.store_path = store_path("batch_measure");
  options.screen_min_time_s = options.final_min_time_s = 0.002;
  std::vector<std::string> progress;
  options.progress = [&](const std::string& line) { progress.push_back(line); };
  const AutoPlanEvidence first = auto_plan_evidence(apart, m.weights, options);
  ASSERT_GT(first.matvecs, 0);
  EXPECT_EQ(first.measured, first.matvecs);
  EXPECT_EQ(static_cast<int>(progress.size()), first.matvecs);
  for (const std::string& line : progress) EXPECT_NE(line.find("matvec_batch (n = 2)"), std::string::npos) << line;
  for (const TuningRow& r : TuningStore(options.store_path).read_all()) {
    EXPECT_EQ(r.n, 2) << r.kernel;
    EXPECT_EQ(r.op, "matvec_batch") << r.kernel;
  }
  for (const KernelSpeed& s : first.speeds) EXPECT_EQ(s.source, "measured now");
  progress.clear();
  const AutoPlanEvidence second = auto_plan_evidence(apart, m.weights, options);
  EXPECT_EQ(second.measured, 0);
  EXPECT_EQ(second.from_store, second.matvecs);
  EXPECT_TRUE(progress.empty());
  // Another count is another measurement; a budget already spent times nothing.
  options.n = 3;
  options.spent_s = options.budget_s;
  const AutoPlanEvidence spent = auto_plan_evidence(apart, m.weights, options);
  EXPECT_EQ(spent.measured, 0);
  EXPECT_EQ(spent.unmeasured, spent.matvecs);
  ASSERT_FALSE(progress.empty());
  EXPECT_NE(progress.front().find("budget is spent"), std::string::npos) << progress.front();
}

}  // namespace
}  // namespace qmv
