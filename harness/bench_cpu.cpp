// The CPU half of run_bench: Google Benchmark times each point's calls, repetitions of
// all points interleaved with the peak's read loops, over weight arenas several times
// the last-level cache (cold) or one copy (warm).
#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <set>
#include <stdexcept>
#include <tuple>

#include "harness/bench_points.h"
#include "harness/data.h"
#include "harness/machine.h"
#include "harness/peak.h"
#include "kernels/activation_quantizers.h"
#include "kernels/cpu_tiling.h"
#include "kernels/weight_memory.h"

namespace qmv::bench_detail {
namespace {

// The interleaved read loops' buffer (weight memory, as every buffer timed), made once
// per process and kept while the size asked for stays the same: a sweep's groups then
// all read the same pages, mapped at its first group rather than after others' have
// come and gone. Its share in huge pages is reported with the rows' peak, as a buffer
// in ordinary pages reads slower than weights in huge ones.
WeightMemory& peak_buffer_of_process() {
  static WeightMemory buffer;
  return buffer;
}

const WeightMemory& in_run_peak_buffer(std::size_t bytes) {
  WeightMemory& buffer = peak_buffer_of_process();
  if (buffer.bytes() != bytes) {
    buffer = WeightMemory();  // the old one goes before the new one is mapped
    buffer = WeightMemory(bytes);
    auto* words = static_cast<std::uint64_t*>(buffer.data());
    for (std::size_t i = 0; i < bytes / 8; ++i) words[i] = i * 0x9e3779b97f4a7c15ull + 1;
  }
  return buffer;
}

// Random valid blocks of one weight type, several times the last-level cache. A
// matrix of that type is just its rows' blocks back to back, so every shape is a
// window into the arena: a cold call reads the window after the previous call's, and
// the window it reads was last touched a whole arena ago, long evicted. One arena per
// type serves every point, which is what lets repetitions of different points
// interleave without re-filling gigabytes in between. Weight memory, as the kernels'
// prepared copies and the peak's buffer: the same pages for every read timed.
struct WeightArena {
  std::size_t bytes = 0;
  WeightMemory memory;
  std::uint8_t* data() const { return static_cast<std::uint8_t*>(memory.data()); }
};

WeightArena make_arena(WeightType type, std::size_t min_bytes, std::uint64_t seed) {
  // Timing does not depend on the values: 256 distinct rows tiled over the arena keep
  // the fill short while every byte is part of a valid block.
  const Shape tile_shape{256, 4096};
  const auto tile = random_quantized_matrix(type, tile_shape, seed);
  WeightArena a;
  a.bytes = (min_bytes / tile.size() + 1) * tile.size();
  a.memory = WeightMemory(a.bytes);
  for (std::size_t off = 0; off < a.bytes; off += tile.size())
    std::memcpy(a.data() + off, tile.data(), tile.size());
  return a;
}

// The first build of a (kernel, shape)'s prepared copies: the median wall time of one
// copy's prepare() and the bytes of one copy (BenchRow::prepare_us, prepared_bytes).
struct FirstPrepare {
  double median_us = 0;
  std::size_t bytes = 0;
};
// Kernels with the same weight transform make the same copies of a window, so they
// share a rotation: one per transform and shape, not one per kernel.
using PrepareFn = decltype(KernelSpec::prepare);
using PrepareKey = std::tuple<PrepareFn, std::int64_t, std::int64_t>;  // transform, rows, cols
PrepareKey prepare_key(const KernelSpec& k, Shape s) { return {k.prepare, s.rows, s.cols}; }

// The windows a cold point's calls go round: `target` bytes of them (at least two), or
// as many as the arena holds.
std::size_t rotation_windows(std::size_t stride, std::size_t arena_windows, std::size_t target) {
  return std::min(arena_windows, std::max<std::size_t>(2, (target + stride - 1) / stride));
}

// The prepared copies (KernelSpec::prepare) of each (transform, shape)'s weight windows,
// shared by the kernels of that transform and their points of other thread counts.
// Rotations stay alive while they fit in a quarter of the RAM: an interleaved run then
// prepares each once, and no point's timing follows the freeing and faulting-in of
// another's copies, which slows the reads after it (harness/README.md, "Prepared
// weights"). Past that, the oldest are dropped and re-made at their next turn, the same
// work. A rotation only has to outrun the caches, so it holds copies of the first
// rotation_windows(), not the whole arena.
struct PreparedStore {
  struct Rotation {
    std::vector<PreparedMatrix> slots;
    std::size_t bytes = 0;
    std::uint64_t made = 0;  // order of building, for dropping the oldest
    // The copy the next call reads, whichever kernel makes it: each call reads the copy
    // after the one read last, never one read a few calls ago.
    std::size_t next = 0;
  };
  std::map<PrepareKey, Rotation> rotations;
  std::size_t held_bytes = 0, budget_bytes = 0;
  std::uint64_t builds = 0;
  // Only the first build counts: a re-made rotation is the same work.
  std::map<PrepareKey, FirstPrepare> first_builds;

  // The rotation of (k, args.shape) over the windows base + i * stride, i < count.
  Status ensure(const KernelSpec& k, MatVecArgs args, const std::uint8_t* base, std::size_t stride,
                std::size_t count, Rotation*& out) {
    const PrepareKey key = prepare_key(k, args.shape);
    if (const auto r = rotations.find(key); r != rotations.end()) {
      out = &r->second;
      return Status::Ok();
    }
    // Making room first keeps the peak of memory held near the budget.
    while (!rotations.empty() && held_bytes + count * stride > budget_bytes) {
      auto oldest = std::min_element(rotations.begin(), rotations.end(),
                                     [](const auto& a, const auto& b) { return a.second.made < b.second.made; });
      held_bytes -= oldest->second.bytes;
      rotations.erase(oldest);
    }
    Rotation rot;
    rot.made = ++builds;
    std::vector<double> us;
    for (std::size_t i = 0; i < count; ++i) {
      args.w = base + i * stride;
      // A fused kernel's window holds both its matrices, and its copy covers both.
      if (k.op == OpKind::FusedUpGate) args.w2 = base + i * stride + stride / 2;
      PreparedMatrix m;
      const auto t0 = std::chrono::steady_clock::now();
      const Status st = m.prepare(k, args);
      us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
      if (!st.ok()) return st;
      rot.bytes += m.bytes();
      rot.slots.push_back(std::move(m));
    }
    first_builds.try_emplace(key, FirstPrepare{median(us), rot.slots.front().bytes()});
    held_bytes += rot.bytes;
    out = &rotations.emplace(key, std::move(rot)).first->second;
    return Status::Ok();
  }
};

// Per-call time of the harness's activation quantization for (format, cols), alone and
// on one thread, as the model runner does it: the median of five batches.
double act_quant_median_us(ActFormat f, const std::vector<float>& x) {
  std::vector<std::uint8_t> out(row_bytes(f, static_cast<std::int64_t>(x.size())));
  const auto cols = static_cast<std::int64_t>(x.size());
  using Clock = std::chrono::steady_clock;
  int calls = 1;
  for (;;) {  // batches of at least 2 ms, well above the clock's resolution
    const auto t0 = Clock::now();
    for (int i = 0; i < calls; ++i) quantize_activation(f, x.data(), out.data(), cols);
    benchmark::DoNotOptimize(out.data());
    if (Clock::now() - t0 > std::chrono::milliseconds(2) || calls >= (1 << 20)) break;
    calls *= 2;
  }
  std::vector<double> us;
  for (int rep = 0; rep < 5; ++rep) {
    const auto t0 = Clock::now();
    for (int i = 0; i < calls; ++i) quantize_activation(f, x.data(), out.data(), cols);
    benchmark::DoNotOptimize(out.data());
    us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / calls);
  }
  std::sort(us.begin(), us.end());
  return us[us.size() / 2];
}

// Collects the per-repetition time of each point, and its count of iterations.
class Collector : public benchmark::BenchmarkReporter {
 public:
  std::map<std::string, std::vector<double>> seconds_per_call;
  std::map<std::string, std::vector<std::int64_t>> iterations;
  std::map<std::string, std::string> errors;
  std::function<void(const std::string& name, bool point_done)> on_run;

  bool ReportContext(const Context&) override { return true; }
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& r : runs) {
      const std::string& name = r.run_name.function_name;
      if (r.error_occurred) {
        if (errors.emplace(name, r.error_message).second && on_run) on_run(name, true);
        continue;
      }
      if (r.run_type != Run::RT_Iteration || r.iterations == 0) continue;
      auto& v = seconds_per_call[name];
      v.push_back(r.real_accumulated_time / static_cast<double>(r.iterations));
      iterations[name].push_back(r.iterations);
      if (on_run) on_run(name, static_cast<std::int64_t>(v.size()) == r.repetitions);
    }
  }
};

// Every call of every benchmark function, by name (see BenchCall).
using CallLog = std::map<std::string, std::vector<BenchCall>>;

// Runs `loop` (a benchmark's timed loop) and logs the call.
template <class Loop>
void logged_call(benchmark::State& st, CallLog& log, const std::string& name, Loop&& loop) {
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  loop();
  const auto t1 = Clock::now();
  if (st.iterations() > 0)
    log[name].push_back({std::chrono::duration<double>(t1.time_since_epoch()).count(), st.iterations(),
                         std::chrono::duration<double>(t1 - t0).count() / static_cast<double>(st.iterations())});
}

}  // namespace

void run_cpu_points(const std::vector<Point>& points, const BenchConfig& cfg, const std::map<int, double>& peak_gbps,
                    BenchOutcome& out, Progress& progress) {
  // Buffers shared by all points: one weight arena per type, one prepared activation
  // per (format, cols), outputs of the largest row count.
  // A run over every kernel holds an arena for each of the eleven weight types: their
  // cold size is capped so that together they stay within half the RAM (with a couple
  // of GiB of RAM per weight type, each still stays far above the last-level cache).
  std::map<WeightType, std::size_t> arena_need;
  for (const Point& pt : points) arena_need[pt.spec->weight] = 0;
  std::size_t cold_bytes = cold_buffer_bytes();
  if (const std::size_t ram = machine_info().ram_bytes; ram > 0)
    cold_bytes = std::min(cold_bytes, ram / 2 / arena_need.size());
  std::int64_t max_rows = 0;
  int max_n = 1;
  for (const Point& pt : points) {
    max_n = std::max(max_n, pt.n);
    auto& need = arena_need[pt.spec->weight];
    need = std::max(need, cfg.warm ? matrix_bytes(pt)
                                   : std::max({cold_bytes, 2 * matrix_bytes(pt), cfg.rotation_bytes}));
    max_rows = std::max(max_rows, pt.shape.rows);
  }
  std::map<WeightType, WeightArena> arenas;
  for (const auto& [type, need] : arena_need) arenas.emplace(type, make_arena(type, need, cfg.seed));
  std::map<std::pair<ActFormat, std::int64_t>, std::vector<std::uint8_t>> activations;
  std::map<std::pair<ActFormat, std::int64_t>, double> quant_us;
  for (const Point& pt : points) {
    auto& x = activations[{pt.spec->act, pt.shape.cols}];
    if (!x.empty()) continue;
    // As many vectors as the largest batch takes, back to back, each its own draw.
    const std::size_t one = row_bytes(pt.spec->act, pt.shape.cols);
    x.resize(one * static_cast<std::size_t>(max_n));
    for (int v = 1; v < max_n; ++v)
      quantize_activation(pt.spec->act, gaussian_vector(pt.shape.cols, cfg.seed + 1 + v).data(), x.data() + one * v,
                          pt.shape.cols);
    const auto xf = gaussian_vector(pt.shape.cols, cfg.seed + 1);
    quantize_activation(pt.spec->act, xf.data(), x.data(), pt.shape.cols);
    if (pt.spec->act != ActFormat::F32) quant_us[{pt.spec->act, pt.shape.cols}] = act_quant_median_us(pt.spec->act, xf);
  }
  auto prepared = std::make_shared<PreparedStore>();
  prepared->budget_bytes = prepared_copies_budget_bytes();
  std::vector<float> y(static_cast<std::size_t>(max_rows) * static_cast<std::size_t>(max_n)),
      y2(static_cast<std::size_t>(max_rows));

  std::map<std::string, std::size_t> index_of;
  std::map<std::string, std::size_t> rotation_bytes_of;  // by point: the weight windows its calls go round
  auto calls = std::make_shared<CallLog>();
  benchmark::ClearRegisteredBenchmarks();
  // What each point with a weight transform hands PreparedStore::ensure.
  struct PrepareJob {
    const KernelSpec* spec;
    MatVecArgs args;
    const std::uint8_t* base;
    std::size_t stride, slots;
  };
  std::vector<PrepareJob> prepare_jobs;
  for (std::size_t i = 0; i < points.size(); ++i) {
    const Point& pt = points[i];
    index_of[pt.name] = i;
    const WeightArena& arena = arenas.at(pt.spec->weight);
    const std::vector<std::uint8_t>& x = activations.at({pt.spec->act, pt.shape.cols});
    const std::size_t stride = matrix_bytes(pt);
    const std::size_t slots =
        cfg.warm ? 1
                 : rotation_windows(stride, arena.bytes / stride,
                                    cfg.rotation_bytes ? cfg.rotation_bytes : cold_rotation_bytes());
    const bool fused = pt.spec->op == OpKind::FusedUpGate;
    MatVecArgs args;
    args.shape = pt.shape;
    args.w_bytes = args.w2_bytes = fused ? stride / 2 : stride;
    args.x = x.data();
    args.x_bytes = x.size();
    args.n = pt.n;
    args.y = y.data();
    args.y_len = static_cast<std::size_t>(pt.shape.rows) * static_cast<std::size_t>(pt.n);
    args.y2 = fused ? y2.data() : nullptr;
    args.y2_len = fused ? static_cast<std::size_t>(pt.shape.rows) : 0;
    args.threads = pt.threads;
    if (pt.spec->prepare) prepare_jobs.push_back({pt.spec, args, arena.data(), stride, slots});
    rotation_bytes_of[pt.name] = stride * slots;
    // The window a call of a kernel without a transform reads next, kept across its
    // point's repetitions as a rotation's is across its kernels.
    auto next_window = std::make_shared<std::size_t>(0);
    benchmark::RegisterBenchmark(
        pt.name.c_str(),
        [spec = pt.spec, base = arena.data(), stride, slots = slots, fused, args, prepared, calls, next_window,
         name = pt.name](benchmark::State& st) mutable {
          PreparedStore::Rotation* rotation = nullptr;
          if (spec->prepare) {
            if (const Status s = prepared->ensure(*spec, args, base, stride, slots, rotation); !s.ok()) {
              st.SkipWithError(("preparing the weights: " + s.error).c_str());
              return;
            }
            slots = rotation->slots.size();
          }
          std::size_t& slot = rotation ? rotation->next : *next_window;
          logged_call(st, *calls, name, [&] {
            for (auto _ : st) {
              args.w = base + slot * stride;
              if (rotation) args.prepared = rotation->slots[slot].handle();
              args.w2 = fused ? base + slot * stride + stride / 2 : nullptr;
              if (const Status s = invoke(*spec, args); !s.ok()) {
                st.SkipWithError(s.error.c_str());
                break;
              }
              benchmark::ClobberMemory();
              if (++slot == slots) slot = 0;
            }
          });
        })
        ->UseRealTime()
        ->MinTime(cfg.min_time_s)
        ->Repetitions(cfg.repetitions);
  }

  // The interleaved read peak: per thread count, the loops the config names, on a buffer
  // of their own (weight memory, as every buffer timed), registered together as one
  // point per shape of the run and per kReadPointEvery kernel points (at least three,
  // at least one per loop), taking turns. Each loop's peak is the median over all its
  // repetitions: samples of the machine spread over the run, as a kernel's are over its
  // shapes, where one point's few would be at the mercy of a slow spell. Their density
  // also dates the memory's speed changes within the run, for each kernel repetition's
  // read speed.
  const WeightMemory* peak_buffer = nullptr;
  struct PeakPoint {
    int threads;
    std::string loop;
  };
  std::map<std::string, PeakPoint> peak_points;  // by benchmark name
  std::map<int, std::vector<std::string>> peak_loops_of;
  std::map<int, std::set<std::pair<std::int64_t, std::int64_t>>> shapes_of;
  std::map<int, std::size_t> points_of;
  constexpr std::size_t kReadPointEvery = 6;  // a sixth more time, a read about every seventh repetition
  if (!cfg.warm)
    for (const Point& pt : points)
      if (const auto l = cfg.peak_read_loops.find(pt.threads); l != cfg.peak_read_loops.end() && !l->second.empty()) {
        peak_loops_of[pt.threads] = l->second;
        shapes_of[pt.threads].insert({pt.shape.rows, pt.shape.cols});
        ++points_of[pt.threads];
      }
  const std::size_t peak_bytes =
      (cfg.peak_buffer_bytes ? cfg.peak_buffer_bytes : cold_buffer_bytes()) / 64 * 64;
  if (!peak_loops_of.empty()) {
    peak_buffer = &in_run_peak_buffer(peak_bytes);
    out.interleaved_peak_huge_page_share = huge_page_share(peak_buffer->data(), peak_bytes);
  }
  for (const auto& [threads, names] : peak_loops_of) {
    std::vector<ReadLoop> chosen;
    for (const std::string& name : names)
      if (std::none_of(chosen.begin(), chosen.end(), [&](const ReadLoop& l) { return l.name == name; }))
        chosen.push_back(usable_read_loop(name));
    const std::size_t instances =
        std::max({std::size_t{3}, shapes_of.at(threads).size(), chosen.size(),
                  (points_of.at(threads) + kReadPointEvery - 1) / kReadPointEvery});
    for (std::size_t i = 0; i < instances; ++i) {
      const ReadLoop& loop = chosen[i % chosen.size()];
      const std::string name = fmt::format("peak/{}/threads:{}/{}", loop.name, threads, i / chosen.size() + 1);
      peak_points[name] = {threads, loop.name};
      benchmark::RegisterBenchmark(name.c_str(),
                                   [loop, buf = static_cast<const std::uint64_t*>(peak_buffer->data()),
                                    words = peak_bytes / 8, threads = threads, calls, name](benchmark::State& st) {
                                     logged_call(st, *calls, name, [&] {
                                       for (auto _ : st)
                                         benchmark::DoNotOptimize(read_with_threads(loop, buf, words, threads));
                                     });
                                   })
          ->UseRealTime()
          ->MinTime(cfg.min_time_s)
          ->Repetitions(cfg.repetitions);
    }
  }

  // An interleaved run whose rotations all fit prepares them before any timing, so the
  // first repetitions are not the ones that follow fresh page faults.
  if (cfg.interleave) {
    std::map<PrepareKey, std::size_t> need;
    for (const PrepareJob& j : prepare_jobs)
      need[prepare_key(*j.spec, j.args.shape)] = j.stride * j.slots;
    std::size_t total = 0;
    for (const auto& [key, bytes] : need) total += bytes;
    if (total <= prepared->budget_bytes)
      for (const PrepareJob& j : prepare_jobs) {
        PreparedStore::Rotation* unused = nullptr;
        // A failure here recurs at the point's turn, which reports it.
        (void)prepared->ensure(*j.spec, j.args, j.base, j.stride, j.slots, unused);
      }
  }

  // Google Benchmark takes its interleaving switch as a command-line flag.
  std::string interleave_flag =
      std::string("--benchmark_enable_random_interleaving=") + (cfg.interleave ? "true" : "false");
  std::string prog = "qmvlab";
  char* argv[] = {prog.data(), interleave_flag.data(), nullptr};
  int argc = 2;
  benchmark::Initialize(&argc, argv);

  Collector collector;
  // With an interleaved peak, the rows (and their benchmarks' names) wait for its median.
  std::vector<std::pair<std::string, BenchRow>> held_rows;
  collector.on_run = [&](const std::string& name, bool point_done) {
    if (peak_points.count(name)) return;
    const Point& pt = points[index_of.at(name)];
    if (auto e = collector.errors.find(name); e != collector.errors.end()) {
      progress.point_failed(out, pt, "kernel error: " + e->second, cfg.repetitions);
      return;
    }
    progress.run_done();
    if (!point_done) return;
    BenchRow row = make_row(pt, collector.seconds_per_call[name], cfg, peak_gbps);
    if (row.act_quant == "before") row.act_quant_median_us = quant_us.at({pt.spec->act, pt.shape.cols});
    row.rotation_bytes = static_cast<std::int64_t>(rotation_bytes_of.at(name));
    if (const auto b = prepared->first_builds.find(prepare_key(*pt.spec, pt.shape));
        b != prepared->first_builds.end()) {
      row.prepare_us = b->second.median_us;
      row.prepared_bytes = static_cast<std::int64_t>(b->second.bytes);
    }
    if (peak_loops_of.count(pt.threads))
      held_rows.emplace_back(name, std::move(row));
    else
      progress.point_done(out, std::move(row));
  };
  benchmark::RunSpecifiedBenchmarks(&collector);
  benchmark::ClearRegisteredBenchmarks();

  std::map<int, std::map<std::string, std::vector<double>>> peak_seconds;
  for (const auto& [name, pp] : peak_points)
    if (const auto t = collector.seconds_per_call.find(name); t != collector.seconds_per_call.end()) {
      std::vector<double>& s = peak_seconds[pp.threads][pp.loop];
      s.insert(s.end(), t->second.begin(), t->second.end());
    }
  for (const auto& [threads, by_loop] : peak_seconds)
    for (const auto& [loop, seconds] : by_loop) {
      if (seconds.empty()) continue;
      const double gbps = static_cast<double>(peak_bytes) / (median(seconds) * 1e9);
      out.interleaved_loop_gbps[threads][loop] = gbps;
      if (gbps > out.interleaved_peak_gbps[threads]) {
        out.interleaved_peak_gbps[threads] = gbps;
        out.interleaved_peak_loop[threads] = loop;
      }
    }
  // Each repetition's read speed, from the read loops' repetitions nearest it in time:
  // the memory's speed can change between a run's first and last minute.
  auto ended = [&](const std::string& name) {
    return repetitions_ended((*calls)[name], collector.iterations.at(name), collector.seconds_per_call.at(name));
  };
  // Every loop's repetitions count, as they read: the loops timed are the screening's
  // finalists, a few percent apart at one speed, and their medians are no guide to a
  // ratio between them when the run straddles two speeds (one median can land on each).
  std::map<int, std::vector<std::pair<double, double>>> peak_reads;
  for (const auto& [name, pp] : peak_points) {
    if (!collector.seconds_per_call.count(name)) continue;
    const std::vector<double> at = ended(name);
    const std::vector<double>& seconds = collector.seconds_per_call.at(name);
    for (std::size_t i = 0; i < at.size(); ++i)
      if (at[i] >= 0) peak_reads[pp.threads].emplace_back(at[i], static_cast<double>(peak_bytes) / (seconds[i] * 1e9));
  }
  for (auto& [name, row] : held_rows) {
    if (const auto p = out.interleaved_peak_gbps.find(row.threads); p != out.interleaved_peak_gbps.end()) {
      row.peak_gbps = p->second;
      row.peak_pct = 100.0 * row.gbps_median / row.peak_gbps;
    }
    // Only among interleaved repetitions: run one point after another, a kernel's
    // repetitions are minutes from most reads.
    if (const auto reads = peak_reads.find(row.threads); cfg.interleave && reads != peak_reads.end()) {
      for (const double s : collector.seconds_per_call.at(name)) row.rep_us.push_back(s * 1e6);
      row.rep_read_gbps = nearest_read_speeds(ended(name), reads->second);
    }
    progress.point_done(out, std::move(row));
  }
}

}  // namespace qmv::bench_detail

namespace qmv {
void release_bench_read_buffer() { bench_detail::peak_buffer_of_process() = WeightMemory(); }
}  // namespace qmv
