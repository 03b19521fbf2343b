// The CPU read peak: every loop of the read family sums exactly the words it is given,
// the ISA mask decides which loops run, peak CSVs carry the winning loop (older files
// without it still read), and a cold bench makes each row a share of the read loop it
// timed among the kernels. No timing is checked.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "harness/bench.h"
#include "harness/bench_points.h"
#include "harness/csv.h"
#include "harness/peak.h"
#include "kernels/availability.h"
#include "kernels/cpu_features.h"
#include "kernels/kernel.h"
#include "kernels/registry.h"
#include "tests/test_seed.h"

namespace qmv {
namespace {

constexpr std::uint32_t kAvx2Only = CpuFeature::AVX2 | CpuFeature::FMA | CpuFeature::F16C;

class ScopedMask {
 public:
  explicit ScopedMask(std::uint32_t allowed) : previous_(cpu_feature_mask()) { set_cpu_feature_mask(allowed); }
  ~ScopedMask() { set_cpu_feature_mask(previous_); }

 private:
  std::uint32_t previous_;
};

std::string temp_path(const std::string& name) {
  const std::string dir = std::string(QMV_TEST_TMP) + "/peak";
  std::filesystem::create_directories(dir);
  return dir + "/" + name;
}

std::uint64_t plain_sum(const std::uint64_t* p, std::size_t n) {
  std::uint64_t s = 0;
  for (std::size_t i = 0; i < n; ++i) s += p[i];
  return s;
}

bool runs_here(const ReadLoop& l) { return missing_cpu_features(l.features) == 0; }

TEST(ReadLoops, TheFamilyCoversStreamsWidthsTilesAndPrefetch) {
  std::set<int> streams, widths, tiled_streams;
  bool with_prefetch = false, without_prefetch = false, far_apart = false;
  std::set<std::string> names;
  for (const ReadLoop& l : all_read_loops()) {
    streams.insert(l.streams);
    widths.insert(l.vector_bits);
    (l.prefetch_bytes > 0 ? with_prefetch : without_prefetch) = true;
    if (l.tile_bytes > 0) {
      tiled_streams.insert(l.streams);
      EXPECT_EQ(l.tile_bytes % 128, 0) << l.name;
      EXPECT_NE(l.name.find(".t"), std::string::npos) << l.name;
    } else {
      far_apart = true;
    }
    EXPECT_TRUE(names.insert(l.name).second) << "two loops named " << l.name;
    EXPECT_EQ(l.name.find(','), std::string::npos) << "a CSV field: " << l.name;
    ASSERT_NE(l.sum, nullptr) << l.name;
  }
  EXPECT_EQ(streams, (std::set<int>{1, 2, 4, 8}));
  EXPECT_EQ(tiled_streams, (std::set<int>{2, 4, 8}));
  EXPECT_TRUE(far_apart);
  EXPECT_TRUE(with_prefetch && without_prefetch);
#if defined(__x86_64__)
  EXPECT_TRUE(widths.count(256) && widths.count(512)) << "256- and 512-bit loads";
#endif
}

// Random words around and inside the range: a loop that reads one word too many or too
// few, or drops a stream's remainder, gets another sum.
TEST(ReadLoops, EveryLoopSumsExactlyItsWordsAtAnySizeAndAlignment) {
  std::mt19937_64 rng(20240514);
  std::vector<std::uint64_t> buf(3 * 65536 + 64);
  for (auto& w : buf) w = rng();
  const std::size_t sizes[] = {0, 1, 3, 7, 8, 15, 16, 17, 127, 128, 129, 255, 1023, 1031, 4099, 65536 + 13, 3 * 65536 + 1};
  int loops_run = 0;
  for (const ReadLoop& l : all_read_loops()) {
    if (!runs_here(l)) continue;
    ++loops_run;
    for (std::size_t n : sizes)
      for (std::size_t offset : {std::size_t(0), std::size_t(1), std::size_t(3), std::size_t(5)}) {
        if (offset + n + 8 > buf.size()) continue;
        const std::uint64_t* p = buf.data() + offset;
        ASSERT_EQ(l.sum(p, n), plain_sum(p, n)) << l.name << " words " << n << " offset " << offset;
      }
  }
  EXPECT_GT(loops_run, 0);
}

TEST(ReadLoops, ThreadsSplitTheBufferWithoutLosingOrRepeatingWords) {
  std::mt19937_64 rng(7);
  std::vector<std::uint64_t> buf(200003);
  for (auto& w : buf) w = rng();
  for (const ReadLoop& l : usable_read_loops())
    for (int threads : {1, 2, 3})
      for (std::size_t n : {std::size_t(5), std::size_t(1001), buf.size() - 2}) {
        const std::uint64_t* p = buf.data() + 1;  // not on a cache line
        ASSERT_EQ(read_with_threads(l, p, n, threads), plain_sum(p, n))
            << l.name << " threads " << threads << " words " << n;
      }
}

TEST(InterleavedRead, EachPassReadsTheNextSliceRoundTheSpans) {
  std::mt19937_64 rng(testing::fresh_seed());
  // Three spans of odd lengths: slices cross from one to the next and wrap round.
  std::vector<std::vector<std::uint64_t>> memory = {std::vector<std::uint64_t>(1000 + rng() % 500),
                                                    std::vector<std::uint64_t>(37), std::vector<std::uint64_t>(517)};
  std::vector<std::uint64_t> all;
  std::vector<std::span<const std::byte>> spans;
  for (auto& m : memory) {
    for (auto& w : m) all.push_back(w = rng());
    spans.push_back(std::as_bytes(std::span<const std::uint64_t>(m)));
  }
  const std::size_t slice_words = 300 + rng() % 300;
  const ReadLoop loop = usable_read_loops().front();
  InterleavedRead read(loop, spans, 2, slice_words * sizeof(std::uint64_t));
  EXPECT_EQ(read.median_gbps(), 0.0);
  std::uint64_t expected = 0;
  const int passes = 11;  // round the spans more than twice
  for (int p = 0; p < passes; ++p) {
    read.pass();
    for (std::size_t i = 0; i < slice_words; ++i) expected += all[(p * slice_words + i) % all.size()];
    ASSERT_EQ(read.checksum(), expected) << "after pass " << p;
  }
  EXPECT_EQ(read.passes(), passes);
  EXPECT_GT(read.median_gbps(), 0.0);
  EXPECT_EQ(read.loop_name(), loop.name);
  // Two threads: each pass timed a round trip between them as well.
  ASSERT_EQ(read.pass_round_trip_ns().size(), static_cast<std::size_t>(passes));
  for (double ns : read.pass_round_trip_ns()) EXPECT_TRUE(std::isfinite(ns) && ns > 0) << ns;
  std::vector<double> sorted = read.pass_round_trip_ns();
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(read.median_round_trip_ns(), sorted[passes / 2]);
  // One thread has no other to hand a line to.
  InterleavedRead alone(loop, spans, 1, slice_words * sizeof(std::uint64_t));
  alone.pass();
  EXPECT_TRUE(alone.pass_round_trip_ns().empty());
  EXPECT_EQ(alone.median_round_trip_ns(), 0.0);
}

TEST(OnePlacement, RoundTripsOverThreeTimesApartAreTwoPlacements) {
  std::mt19937_64 g(testing::fresh_seed());
  std::uniform_real_distribution<double> shortest(40, 400), within(1, 2.99), beyond(3.01, 8);
  for (int trial = 0; trial < 20; ++trial) {
    const double s = shortest(g);
    std::vector<double> ns = {s, s * within(g), s * within(g), 0};  // 0: a run not timed
    std::shuffle(ns.begin(), ns.end(), g);
    EXPECT_TRUE(one_placement(ns)) << s;
    ns.push_back(s * beyond(g));
    std::shuffle(ns.begin(), ns.end(), g);
    EXPECT_FALSE(one_placement(ns)) << s;
  }
  EXPECT_TRUE(one_placement(std::vector<double>{}));
}

TEST(ThreadRoundTrip, TimesAHandOverOnlyBetweenTwoThreads) {
  const double ns = thread_round_trip_ns(16);
  EXPECT_TRUE(std::isfinite(ns) && ns > 0) << ns;
  EXPECT_EQ(thread_round_trip_ns(0), 0.0);
}

TEST(InterleavedRead, RefusesASliceLongerThanItsMemoryOrAMisalignedSpan) {
  std::vector<std::uint64_t> words(64, 1);
  const auto bytes = std::as_bytes(std::span<const std::uint64_t>(words));
  const ReadLoop loop = usable_read_loops().front();
  EXPECT_THROW(InterleavedRead(loop, {bytes}, 1, bytes.size() + 8), std::invalid_argument);
  EXPECT_THROW(InterleavedRead(loop, {bytes}, 1, 0), std::invalid_argument);
  EXPECT_THROW(InterleavedRead(loop, {bytes.subspan(4)}, 1, 64), std::invalid_argument);
  EXPECT_NO_THROW(InterleavedRead(loop, {bytes}, 1, bytes.size()));
}

TEST(InterleavedRead, TheSliceIsAQuarterOfTheWeightsAtMost256MiBAndNoneWhenCached) {
  constexpr std::size_t MiB = std::size_t{1} << 20;
  EXPECT_EQ(read_between_slice_bytes(4000 * MiB, 32 * MiB), 256 * MiB);
  EXPECT_EQ(read_between_slice_bytes(640 * MiB, 32 * MiB), 160 * MiB);
  EXPECT_EQ(read_between_slice_bytes(640 * MiB + 12345, 32 * MiB) % 4096, 0u);
  EXPECT_EQ(read_between_slice_bytes(256 * MiB, 32 * MiB), 64 * MiB);
  EXPECT_EQ(read_between_slice_bytes(255 * MiB, 32 * MiB), 0u);  // a slice would sit in the cache
  EXPECT_EQ(read_between_slice_bytes(0, 0), 0u);
}

TEST(ReadLoops, TheIsaMaskDecidesTheWidths) {
  const auto widths = [] {
    std::set<int> w;
    for (const ReadLoop& l : usable_read_loops()) w.insert(l.vector_bits);
    return w;
  };
  {
    ScopedMask mask(kAvx2Only);
    for (const ReadLoop& l : usable_read_loops()) {
      EXPECT_NE(l.vector_bits, 512) << l.name;
      EXPECT_EQ(l.features & static_cast<std::uint32_t>(CpuFeature::AVX512F), 0u) << l.name;
    }
    if (!missing_cpu_features(static_cast<std::uint32_t>(CpuFeature::AVX2))) {
      EXPECT_EQ(widths(), std::set<int>{256}) << "AVX2 loads, not the baseline's, where AVX2 runs";
    }
  }
  {
    ScopedMask mask(0);
    EXPECT_EQ(widths(), std::set<int>{128}) << "nothing beyond the baseline ISA";
  }
  if (!missing_cpu_features(static_cast<std::uint32_t>(CpuFeature::AVX512F))) {
    EXPECT_EQ(widths(), (std::set<int>{256, 512})) << "no mask, AVX512F present";
  }
}

// A small buffer: this checks the bookkeeping, not the speed.
TEST(ReadPeak, TriesEveryUsableLoopAndReportsTheWinner) {
  const std::size_t bytes = std::size_t(4) << 20;
  const PeakResult r = measure_read_bandwidth(2, 2, {}, bytes);
  const std::vector<ReadLoop> usable = usable_read_loops();
  EXPECT_EQ(r.threads, 2);
  EXPECT_EQ(r.bytes, bytes);
  ASSERT_EQ(r.loops.size(), usable.size());
  std::set<std::string> names;
  for (const ReadLoop& l : usable) names.insert(l.name);
  for (std::size_t i = 0; i < r.loops.size(); ++i) {
    EXPECT_TRUE(names.count(r.loops[i].name)) << r.loops[i].name;
    EXPECT_GT(r.loops[i].best_gbps, 0);
    EXPECT_LE(r.loops[i].median_gbps, r.loops[i].best_gbps);
    if (i > 0) {
      EXPECT_GE(r.loops[i - 1].best_gbps, r.loops[i].best_gbps) << "best first";
    }
  }
  EXPECT_TRUE(names.count(r.read_loop)) << r.read_loop;
  EXPECT_EQ(r.repetitions, 4) << "two screening passes and two repetitions";
  const auto winner = std::find_if(r.loops.begin(), r.loops.end(), [&](const auto& l) { return l.name == r.read_loop; });
  ASSERT_NE(winner, r.loops.end());
  EXPECT_EQ(r.best_gbps, winner->best_gbps);
  EXPECT_EQ(r.median_gbps, winner->median_gbps);
  // No finalist beats the winner; a loop with only its screening passes may, by luck alone.
  for (const ReadLoopSpeed& l : r.loops) {
    if (l.repetitions > 2) {
      EXPECT_LE(l.best_gbps, r.best_gbps) << l.name;
    }
  }
  // The finalists, the winner first, are the loops timed beyond their screening pass.
  ASSERT_EQ(r.finalists.size(), std::min<std::size_t>(3, r.loops.size()));
  EXPECT_EQ(r.finalists.front(), r.read_loop);
  for (const std::string& f : r.finalists) {
    const auto l = std::find_if(r.loops.begin(), r.loops.end(), [&](const auto& x) { return x.name == f; });
    ASSERT_NE(l, r.loops.end()) << f;
    EXPECT_EQ(l->repetitions, 4) << f;
  }
}

TEST(ReadPeak, UnderTheAvx2MaskNo512BitLoopRuns) {
  ScopedMask mask(kAvx2Only);
  const PeakResult r = measure_read_bandwidth(1, 1, {}, std::size_t(2) << 20);
  ASSERT_FALSE(r.loops.empty());
  for (const ReadLoopSpeed& l : r.loops) EXPECT_EQ(l.name.rfind("avx512", 0), std::string::npos) << l.name;
  EXPECT_EQ(r.read_loop.rfind("avx512", 0), std::string::npos) << r.read_loop;
  EXPECT_THROW(measure_read_bandwidth(1, 1, "avx512.s1", std::size_t(1) << 20), std::invalid_argument);
}

TEST(ReadPeak, OneLoopAloneWhenNamed) {
  const ReadLoop l = usable_read_loops().back();  // a copy: the vector is a temporary
  const PeakResult r = measure_read_bandwidth(1, 3, l.name, std::size_t(1) << 20);
  EXPECT_EQ(r.read_loop, l.name);
  ASSERT_EQ(r.loops.size(), 1u);
  EXPECT_EQ(r.repetitions, 3);
  EXPECT_THROW(measure_read_bandwidth(1, 1, "no.such.loop", std::size_t(1) << 20), std::invalid_argument);
}

TEST(Handover, EachRoundIsMeasuredAndATeamIsNeeded) {
  int seen = 0;
  const auto rounds = measure_handover(2, 2, usable_read_loops().front().name, std::size_t(8) << 20,
                                       [&](const HandoverRound&, int i) { EXPECT_EQ(i, seen++); });
  ASSERT_EQ(rounds.size(), 2u);
  EXPECT_EQ(seen, 2);
  for (const HandoverRound& r : rounds) {
    EXPECT_TRUE(std::isfinite(r.read_gbps) && r.read_gbps > 0);
    EXPECT_TRUE(std::isfinite(r.region_us) && r.region_us > 0);
    EXPECT_TRUE(std::isfinite(r.handover_us) && r.handover_us > 0);
  }
  EXPECT_THROW(measure_handover(1, 1, usable_read_loops().front().name, std::size_t(8) << 20), std::invalid_argument);
  EXPECT_THROW(measure_handover(2, 1, "no.such.loop", std::size_t(8) << 20), std::invalid_argument);
}

TEST(Handover, RoundsOfTwoReadSpeedsSplitAtTheWidestGap) {
  std::mt19937 g(testing::fresh_seed());
  std::uniform_real_distribution<double> jitter(-1.0, 1.0);
  // Four slow rounds and three fast ones, shuffled; each speed's costs its own.
  std::vector<HandoverRound> rounds;
  for (int i = 0; i < 4; ++i) rounds.push_back({35 + jitter(g), 0.5 + 0.01 * i, 0.8 + 0.01 * i});
  for (int i = 0; i < 3; ++i) rounds.push_back({60 + jitter(g), 1.2 + 0.01 * i, 1.7 + 0.01 * i});
  std::shuffle(rounds.begin(), rounds.end(), g);
  const auto two = group_by_read_speed(rounds);
  ASSERT_EQ(two.size(), 2u);
  EXPECT_EQ(two[0].rounds, 4);
  EXPECT_EQ(two[1].rounds, 3);
  EXPECT_LT(two[0].read_max_gbps, 37);
  EXPECT_GT(two[1].read_min_gbps, 58);
  EXPECT_DOUBLE_EQ(two[0].region_us, 0.52);  // the upper median of 0.50..0.53
  EXPECT_DOUBLE_EQ(two[1].handover_us, 1.71);
  // One speed, within 1.3x: one group of every round.
  std::vector<HandoverRound> one = {{35, 0.5, 0.8}, {40, 0.6, 0.9}, {44, 0.7, 1.0}};
  const auto whole = group_by_read_speed(one);
  ASSERT_EQ(whole.size(), 1u);
  EXPECT_EQ(whole[0].rounds, 3);
  EXPECT_DOUBLE_EQ(whole[0].read_min_gbps, 35);
  EXPECT_DOUBLE_EQ(whole[0].read_max_gbps, 44);
  EXPECT_DOUBLE_EQ(whole[0].region_us, 0.6);
  EXPECT_TRUE(group_by_read_speed({}).empty());
}

TEST(PeakCsv, RowsRoundTripWithTheirReadLoop) {
  const RunContext ctx{"m", "cpu", "gpu0", "gcc", "abc", "qmvlab peak"};
  std::mt19937_64 rng(99);
  std::uniform_real_distribution<double> u(1, 100);
  for (bool gpu : {false, true}) {
    PeakRow cpu{2, 1 << 30, 8, u(rng), u(rng)};
    cpu.read_loop = "avx2.s4.pf2k";
    PeakRow read{0, 1 << 30, 7, 1000 * u(rng), 1000 * u(rng), "cuda-read", 3350, "vec4 unroll 8"};
    const std::string path = temp_path(gpu ? "gpu.csv" : "cpu.csv");
    {
      CsvWriter w(path, peak_header(gpu), false);
      w.write(peak_fields(ctx, cpu, gpu));
      if (gpu) w.write(peak_fields(ctx, read, gpu));
    }
    EXPECT_EQ(detect_csv_kind(path), CsvKind::Peak);
    const auto back = read_peak_csv(path);
    ASSERT_EQ(back.size(), gpu ? 2u : 1u);
    EXPECT_EQ(back[0].read_loop, cpu.read_loop);
    EXPECT_EQ(back[0].gbps_best, cpu.gbps_best);
    EXPECT_EQ(back[0].gbps_median, cpu.gbps_median);
    EXPECT_EQ(back[0].repetitions, 8);
    EXPECT_EQ(back[0].device, "cpu");
    if (gpu) {
      EXPECT_EQ(back[1].read_loop, read.read_loop);
      EXPECT_EQ(back[1].device, "cuda-read");
      EXPECT_EQ(back[1].datasheet_gbps, 3350);
    }
  }
}

// As `qmvlab peak --out` wrote them before the read_loop column.
TEST(PeakCsv, FilesWithoutTheReadLoopColumnStillRead) {
  const std::string cpu = temp_path("old-cpu.csv");
  std::ofstream(cpu) << "machine,cpu_model,gpu,compiler,git_commit,threads,buffer_bytes,repetitions,gbps_best,"
                        "gbps_median,command\n"
                        "box,Xeon,none,gcc 12,abc,1,2013265920,7,13.84,13.82,build/qmvlab peak\n"
                        "box,Xeon,none,gcc 12,abc,2,2013265920,7,26.97,26.90,build/qmvlab peak\n";
  EXPECT_EQ(detect_csv_kind(cpu), CsvKind::Peak);
  const auto rows = read_peak_csv(cpu);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[1].threads, 2);
  EXPECT_EQ(rows[1].gbps_best, 26.97);
  EXPECT_EQ(rows[1].read_loop, "");
  EXPECT_EQ(rows[1].device, "cpu");

  const std::string gpu = temp_path("old-gpu.csv");
  std::ofstream(gpu) << "machine,cpu_model,gpu,compiler,git_commit,threads,buffer_bytes,repetitions,gbps_best,"
                        "gbps_median,device,datasheet_gbps,command\n"
                        "box,Xeon,H100,gcc 12,abc,0,1073741824,7,3000,2900,cuda,3350,build/qmvlab peak\n";
  EXPECT_EQ(detect_csv_kind(gpu), CsvKind::Peak);
  const auto g = read_peak_csv(gpu);
  ASSERT_EQ(g.size(), 1u);
  EXPECT_EQ(g[0].device, "cuda");
  EXPECT_EQ(g[0].read_loop, "");
  EXPECT_EQ(g[0].datasheet_gbps, 3350);
}

// Two cheap kernels available on every x86 machine, timed cold on 1 and 2 threads.
std::vector<const KernelSpec*> two_scalar_kernels() {
  std::vector<const KernelSpec*> ks;
  for (const char* name : {"q4_K.cpu.scalar_f32", "f32.cpu.scalar"}) {
    const KernelSpec* k = global_registry().find(name);
    if (!k) throw std::logic_error(std::string("no kernel ") + name);
    ks.push_back(k);
  }
  return ks;
}

BenchConfig quick_cold_bench() {
  BenchConfig b;
  b.threads = {1, 2};
  b.repetitions = 3;
  b.min_time_s = 0.002;
  b.seed = qmv::testing::fresh_seed();
  b.peak_buffer_bytes = std::size_t{16} << 20;
  return b;
}

// A read loop picked at random from those this machine runs.
std::string some_usable_loop() {
  const auto loops = usable_read_loops();
  std::mt19937 rng(qmv::testing::fresh_seed());
  return loops[std::uniform_int_distribution<std::size_t>(0, loops.size() - 1)(rng)].name;
}

// A peak no real read comes near: a row that keeps it was not given the interleaved one.
constexpr double kGivenPeak = 1e-6;

TEST(InterleavedPeak, ColdRowsAreAShareOfTheReadLoopTimedAmongThem) {
  BenchConfig cfg = quick_cold_bench();
  const std::string loop = some_usable_loop();
  cfg.peak_read_loops = {{1, {loop}}, {2, {loop}}};
  const BenchOutcome out = run_bench(two_scalar_kernels(), {{64, 512}, {128, 256}}, cfg, {{1, kGivenPeak}, {2, kGivenPeak}});
  ASSERT_TRUE(out.skipped.empty()) << out.skipped.front().kernel << ": " << out.skipped.front().reason;
  ASSERT_EQ(out.rows.size(), 8u);
  ASSERT_EQ(out.interleaved_peak_gbps.size(), 2u) << loop;
  for (const auto& [threads, gbps] : out.interleaved_peak_gbps) {
    // 16 MiB read at 10 MB/s would take 1.6 s a pass: any machine reads far faster.
    EXPECT_GT(gbps, 0.01) << loop << ", " << threads << " thread(s)";
    EXPECT_TRUE(std::isfinite(gbps));
  }
  for (const BenchRow& r : out.rows) {
    EXPECT_EQ(r.peak_gbps, out.interleaved_peak_gbps.at(r.threads)) << r.kernel << " " << r.threads;
    EXPECT_NEAR(r.peak_pct, 100.0 * r.gbps_median / r.peak_gbps, 1e-9 * r.peak_pct) << r.kernel;
  }
  // Each repetition keeps its own time, in the order run, and the read speed nearest it:
  // one of the loop's (or 0 between two that disagree).
  for (const BenchRow& r : out.rows) {
    ASSERT_EQ(r.rep_us.size(), static_cast<std::size_t>(r.repetitions)) << r.kernel;
    ASSERT_EQ(r.rep_read_gbps.size(), r.rep_us.size()) << r.kernel;
    EXPECT_DOUBLE_EQ(bench_detail::median(r.rep_us), r.time_median_us) << r.kernel;
    for (const double gbps : r.rep_read_gbps) {
      EXPECT_TRUE(gbps == 0 || (gbps > 0.01 && std::isfinite(gbps))) << r.kernel << ": " << gbps;
    }
  }
  // The loops' buffer's share in huge pages is measured (-1: not measured).
  EXPECT_GE(out.interleaved_peak_huge_page_share, 0.0);
  EXPECT_LE(out.interleaved_peak_huge_page_share, 1.0);
}

TEST(InterleavedPeak, WithSeveralLoopsTheRowsPeakIsTheHighestOfTheirMedians) {
  BenchConfig cfg = quick_cold_bench();
  const auto usable = usable_read_loops();
  std::vector<std::string> loops;
  for (std::size_t i = 0; i < usable.size() && loops.size() < 3; i += 1 + usable.size() / 3)
    loops.push_back(usable[i].name);
  ASSERT_GE(loops.size(), 2u);
  cfg.peak_read_loops = {{1, loops}, {2, loops}};
  const BenchOutcome out = run_bench(two_scalar_kernels(), {{64, 512}}, cfg, {{1, kGivenPeak}, {2, kGivenPeak}});
  ASSERT_EQ(out.rows.size(), 4u);
  for (int threads : {1, 2}) {
    ASSERT_EQ(out.interleaved_loop_gbps.at(threads).size(), loops.size()) << "every loop is timed, one shape or not";
    double highest = 0;
    for (const auto& [loop, gbps] : out.interleaved_loop_gbps.at(threads)) {
      EXPECT_NE(std::find(loops.begin(), loops.end(), loop), loops.end()) << loop;
      EXPECT_GT(gbps, 0.01) << loop;
      highest = std::max(highest, gbps);
    }
    EXPECT_EQ(out.interleaved_peak_gbps.at(threads), highest);
    EXPECT_EQ(out.interleaved_loop_gbps.at(threads).at(out.interleaved_peak_loop.at(threads)), highest);
  }
  for (const BenchRow& r : out.rows) EXPECT_EQ(r.peak_gbps, out.interleaved_peak_gbps.at(r.threads)) << r.kernel;
}

TEST(InterleavedPeak, ThreadCountsWithoutALoopAndWarmRunsKeepThePeakGiven) {
  BenchConfig cfg = quick_cold_bench();
  cfg.peak_read_loops = {{1, {some_usable_loop()}}};
  const std::map<int, double> given{{1, kGivenPeak}, {2, 2 * kGivenPeak}};
  const BenchOutcome cold = run_bench(two_scalar_kernels(), {{64, 512}}, cfg, given);
  ASSERT_EQ(cold.rows.size(), 4u);
  ASSERT_EQ(cold.interleaved_peak_gbps.size(), 1u);
  for (const BenchRow& r : cold.rows) {
    EXPECT_EQ(r.peak_gbps, r.threads == 1 ? cold.interleaved_peak_gbps.at(1) : given.at(2)) << r.kernel;
    EXPECT_EQ(r.rep_read_gbps.size(), r.threads == 1 ? 3u : 0u) << "only beside a loop: " << r.kernel;
  }

  cfg.warm = true;
  const BenchOutcome warm = run_bench(two_scalar_kernels(), {{64, 512}}, cfg, given);
  ASSERT_EQ(warm.rows.size(), 4u);
  EXPECT_TRUE(warm.interleaved_peak_gbps.empty());
  EXPECT_EQ(warm.interleaved_peak_huge_page_share, -1.0);
  for (const BenchRow& r : warm.rows) {
    EXPECT_EQ(r.peak_gbps, given.at(r.threads)) << r.kernel;
    EXPECT_TRUE(r.rep_read_gbps.empty()) << r.kernel;
  }

  // Not interleaved, the reads run apart from most repetitions: no speed per repetition.
  cfg.warm = false;
  cfg.interleave = false;
  const BenchOutcome apart = run_bench(two_scalar_kernels(), {{64, 512}}, cfg, given);
  ASSERT_EQ(apart.rows.size(), 4u);
  for (const BenchRow& r : apart.rows) EXPECT_TRUE(r.rep_read_gbps.empty()) << r.kernel;
}

TEST(InterleavedPeak, ARepetitionTakesTheSpeedOfTheReadNearestIt) {
  std::mt19937_64 rng(qmv::testing::fresh_seed());
  const double slow = std::uniform_real_distribution<double>(20, 40)(rng), fast = slow * 1.6;
  const double slow2 = slow * 1.1;  // one speed with `slow` (within kSameReadSpeed)
  // Reads ending at 3 s (slow), 9 s (fast), 13 s (slow2), 17 s (fast), given out of order.
  const std::vector<std::pair<double, double>> reads{{13, slow2}, {3, slow}, {17, fast}, {9, fast}};
  const std::vector<double> at{0, 4, 5, 7, 10, 11, 15, 20};
  const std::vector<double> got = bench_detail::nearest_read_speeds(at, reads);
  ASSERT_EQ(got.size(), at.size());
  EXPECT_EQ(got[0], slow);   // only a read after it
  EXPECT_EQ(got[1], slow);   // 1 after the slow one, 5 before the fast one
  EXPECT_EQ(got[2], slow);
  EXPECT_EQ(got[3], fast);   // 2 before the fast one, 4 after the slow one
  EXPECT_EQ(got[4], fast);
  EXPECT_EQ(got[5], 0.0);    // 2 from the fast one and 2 from slow2: they disagree
  EXPECT_EQ(got[6], 0.0);    // the same between slow2 and the fast one at 17
  EXPECT_EQ(got[7], fast);   // only a read before it
  // Equally near two reads of one speed: their mean.
  const std::vector<double> between = bench_detail::nearest_read_speeds({8}, {{3, slow}, {13, slow2}});
  EXPECT_DOUBLE_EQ(between.at(0), (slow + slow2) / 2);
  EXPECT_EQ(bench_detail::nearest_read_speeds({1, 2}, {}), (std::vector<double>{0, 0}));
  EXPECT_EQ(bench_detail::nearest_read_speeds({-1}, reads), (std::vector<double>{0}));  // when unknown
}

TEST(InterleavedPeak, ARepetitionIsTheCallOfItsIterationsNearestItsTime) {
  std::mt19937_64 rng(qmv::testing::fresh_seed());
  const double t = std::uniform_real_distribution<double>(1e-6, 1e-3)(rng);
  // Probing calls (fewer iterations), then the repetitions, one of whose time per call
  // the report's is nearest; the report lists them in another order.
  const std::vector<bench_detail::BenchCall> calls{
      {1.0, 10, t * 1.3}, {2.0, 100, t}, {3.0, 100, t * 1.2}, {4.0, 100, t * 0.9}, {5.0, 7, t}};
  const std::vector<double> ended =
      bench_detail::repetitions_ended(calls, {100, 100, 100, 100}, {t * 0.91, t * 1.19, t * 1.01, t});
  EXPECT_EQ(ended, (std::vector<double>{4.0, 3.0, 2.0, -1.0}));  // the fourth finds no call left
}

// Cold, every point's calls go round at least cold_rotation_bytes() of weights, a kernel
// with a weight transform (its prepared copies) as one without (the arena's windows), so
// no kernel reads part of its weights from a cache the others do not; warm, one copy.
TEST(ColdRotation, EveryColdPointGoesRoundTheColdFootprintAndAWarmOneReadsOneCopy) {
  std::vector<const KernelSpec*> kernels = two_scalar_kernels();
  const KernelSpec* transformed = nullptr;
  for (const KernelSpec& k : global_registry().all())
    if (k.backend == Backend::CPU && k.prepare && k.op == OpKind::MatVec && k.peer.empty() &&
        k.supports({64, 512}) && availability(k).available)
      transformed = &k;
  ASSERT_NE(transformed, nullptr) << "every build has a row-interleaved kernel this CPU runs";
  kernels.push_back(transformed);
  BenchConfig cfg = quick_cold_bench();
  cfg.threads = {1};
  cfg.repetitions = 1;
  const BenchOutcome cold = run_bench(kernels, {{64, 512}}, cfg, {{1, kGivenPeak}});
  ASSERT_EQ(cold.rows.size(), kernels.size());
  for (const BenchRow& r : cold.rows)
    EXPECT_GE(r.rotation_bytes, static_cast<std::int64_t>(cold_rotation_bytes())) << r.kernel;
  // A footprint asked for (bench --cold-mib): the fewest whole windows that cover it.
  std::mt19937_64 rng(qmv::testing::fresh_seed("rotation"));
  cfg.rotation_bytes = std::uniform_int_distribution<std::size_t>(1 << 20, 64 << 20)(rng);
  const BenchOutcome asked = run_bench(kernels, {{64, 512}}, cfg, {{1, kGivenPeak}});
  ASSERT_EQ(asked.rows.size(), kernels.size());
  for (const BenchRow& r : asked.rows) {
    const auto window = static_cast<std::int64_t>(64 * row_bytes(global_registry().find(r.kernel)->weight, 512));
    EXPECT_EQ(r.rotation_bytes % window, 0) << r.kernel;
    EXPECT_GE(r.rotation_bytes, static_cast<std::int64_t>(cfg.rotation_bytes)) << r.kernel;
    EXPECT_LT(r.rotation_bytes, static_cast<std::int64_t>(cfg.rotation_bytes) + window) << r.kernel;
  }
  cfg.warm = true;
  const BenchOutcome warm = run_bench(kernels, {{64, 512}}, cfg, {{1, kGivenPeak}});
  ASSERT_EQ(warm.rows.size(), kernels.size());
  for (const BenchRow& r : warm.rows) {
    const KernelSpec& k = *global_registry().find(r.kernel);
    EXPECT_EQ(r.rotation_bytes, static_cast<std::int64_t>(64 * row_bytes(k.weight, 512))) << r.kernel;
  }
}

TEST(InterleavedPeak, AnUnknownReadLoopIsRefused) {
  BenchConfig cfg = quick_cold_bench();
  cfg.peak_read_loops = {{1, {some_usable_loop(), "avx2.s3.pf7"}}};
  EXPECT_THROW(run_bench(two_scalar_kernels(), {{64, 512}}, cfg, {{1, kGivenPeak}}), std::invalid_argument);
}

}  // namespace
}  // namespace qmv
