#include "harness/bench.h"

#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "harness/data.h"
#include "harness/machine.h"
#include "harness/peak.h"

namespace qmv {
namespace {

struct Point {
  const KernelSpec* spec;
  Shape shape;
  int threads;
  std::string name;  // unique benchmark name
};

struct FreeDeleter {
  void operator()(std::uint8_t* p) const { std::free(p); }
};

// Random valid blocks of one weight type, several times the last-level cache. A
// matrix of that type is just its rows' blocks back to back, so every shape is a
// window into the arena: a cold call reads the window after the previous call's, and
// the window it reads was last touched a whole arena ago, long evicted. One arena per
// type serves every point, which is what lets repetitions of different points
// interleave without re-filling gigabytes in between.
struct WeightArena {
  std::size_t bytes = 0;
  std::unique_ptr<std::uint8_t, FreeDeleter> data;
};

WeightArena make_arena(WeightType type, std::size_t min_bytes, std::uint64_t seed) {
  // Timing does not depend on the values: 256 distinct rows tiled over the arena keep
  // the fill short while every byte is part of a valid block.
  const Shape tile_shape{256, 4096};
  const auto tile = random_quantized_matrix(type, tile_shape, seed);
  WeightArena a;
  a.bytes = (min_bytes / tile.size() + 1) * tile.size();
  a.data.reset(static_cast<std::uint8_t*>(std::aligned_alloc(64, (a.bytes + 63) / 64 * 64)));
  if (!a.data) throw std::bad_alloc();
  for (std::size_t off = 0; off < a.bytes; off += tile.size())
    std::memcpy(a.data.get() + off, tile.data(), tile.size());
  return a;
}

std::size_t matrix_bytes(const Point& pt) {
  const int matrices = pt.spec->op == OpKind::FusedUpGate ? 2 : 1;
  return matrices * static_cast<std::size_t>(pt.shape.rows) * row_bytes(pt.spec->weight, pt.shape.cols);
}

// Collects the per-repetition time of each point.
class Collector : public benchmark::BenchmarkReporter {
 public:
  std::map<std::string, std::vector<double>> seconds_per_call;
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
      if (on_run) on_run(name, static_cast<std::int64_t>(v.size()) == r.repetitions);
    }
  }
};

BenchRow make_row(const Point& pt, std::vector<double> t, const BenchConfig& cfg,
                  const std::map<int, double>& peak_gbps) {
  std::sort(t.begin(), t.end());
  const KernelSpec& spec = *pt.spec;
  BenchRow r;
  r.kernel = spec.name;
  r.op = std::string(to_string(spec.op));
  r.weight_type = std::string(to_string(spec.weight));
  r.act_format = std::string(to_string(spec.act));
  r.backend = std::string(to_string(spec.backend));
  r.rows = pt.shape.rows;
  r.cols = pt.shape.cols;
  r.threads = pt.threads;
  r.cache = cfg.warm ? "warm" : "cold";
  r.tile_rows = cpu_tiling().tile_rows;
  r.min_parallel_rows = cpu_tiling().min_parallel_rows;
  r.repetitions = static_cast<int>(t.size());
  r.time_min_us = t.front() * 1e6;
  r.time_median_us = t[t.size() / 2] * 1e6;
  r.time_max_us = t.back() * 1e6;
  r.bytes_per_call = static_cast<std::int64_t>(bytes_moved(spec, pt.shape));
  r.gbps_median = static_cast<double>(r.bytes_per_call) / (r.time_median_us * 1e3);
  r.gbps_best = static_cast<double>(r.bytes_per_call) / (r.time_min_us * 1e3);
  const auto peak = peak_gbps.find(pt.threads);
  r.peak_gbps = peak == peak_gbps.end() ? 0.0 : peak->second;
  r.peak_pct = r.peak_gbps > 0 ? 100.0 * r.gbps_median / r.peak_gbps : 0.0;
  r.gflops = flops(spec, pt.shape) / (r.time_median_us * 1e3);
  return r;
}

}  // namespace

BenchOutcome run_bench(const std::vector<const KernelSpec*>& kernels, const std::vector<Shape>& shapes,
                       const BenchConfig& cfg, const std::map<int, double>& peak_gbps,
                       const std::function<void(const BenchRow&, int, int)>& on_row,
                       const std::function<void(int, int)>& on_progress) {
  BenchOutcome out;
  std::vector<Point> points;
  for (const KernelSpec* k : kernels) {
    const Availability av = availability(*k);
    for (Shape s : shapes) {
      if (!av.available) {
        out.skipped.push_back({k->name, s, "unavailable: " + av.reason});
      } else if (!k->supports(s)) {
        out.skipped.push_back({k->name, s, "shape not supported (needs " + k->shape_rule + ")"});
      } else if (k->backend != Backend::CPU) {
        out.skipped.push_back({k->name, s, "GPU kernels are not timed by this harness yet"});
      } else {
        for (int t : cfg.threads)
          points.push_back({k, s, t,
                            fmt::format("{}/{}/threads:{}/{}", k->name, to_string(s), t,
                                        cfg.warm ? "warm" : "cold")});
      }
    }
  }
  if (points.empty()) return out;

  // Buffers shared by all points: one weight arena per type, one prepared activation
  // per (format, cols), outputs of the largest row count.
  // A run over every kernel holds an arena for each of the eleven weight types: their
  // cold size is capped so that together they stay within half the RAM (on the 23 GiB
  // VM that still leaves each above twice the last-level cache).
  std::map<WeightType, std::size_t> arena_need;
  for (const Point& pt : points) arena_need[pt.spec->weight] = 0;
  std::size_t cold_bytes = cold_buffer_bytes();
  if (const std::size_t ram = machine_info().ram_bytes; ram > 0)
    cold_bytes = std::min(cold_bytes, ram / 2 / arena_need.size());
  std::int64_t max_rows = 0;
  for (const Point& pt : points) {
    auto& need = arena_need[pt.spec->weight];
    need = std::max(need, cfg.warm ? matrix_bytes(pt) : std::max(cold_bytes, 2 * matrix_bytes(pt)));
    max_rows = std::max(max_rows, pt.shape.rows);
  }
  std::map<WeightType, WeightArena> arenas;
  for (const auto& [type, need] : arena_need) arenas.emplace(type, make_arena(type, need, cfg.seed));
  std::map<std::pair<ActFormat, std::int64_t>, std::vector<std::uint8_t>> activations;
  for (const Point& pt : points) {
    auto& x = activations[{pt.spec->act, pt.shape.cols}];
    if (!x.empty()) continue;
    const auto xf = gaussian_vector(pt.shape.cols, cfg.seed + 1);
    x.resize(row_bytes(pt.spec->act, pt.shape.cols));
    quantize_activation(pt.spec->act, xf.data(), x.data(), pt.shape.cols);
  }
  std::vector<float> y(static_cast<std::size_t>(max_rows)), y2(static_cast<std::size_t>(max_rows));

  std::map<std::string, std::size_t> index_of;
  benchmark::ClearRegisteredBenchmarks();
  for (std::size_t i = 0; i < points.size(); ++i) {
    const Point& pt = points[i];
    index_of[pt.name] = i;
    const WeightArena& arena = arenas.at(pt.spec->weight);
    const std::vector<std::uint8_t>& x = activations.at({pt.spec->act, pt.shape.cols});
    const std::size_t stride = matrix_bytes(pt);
    const std::size_t slots = cfg.warm ? 1 : arena.bytes / stride;
    const bool fused = pt.spec->op == OpKind::FusedUpGate;
    MatVecArgs args;
    args.shape = pt.shape;
    args.w_bytes = args.w2_bytes = fused ? stride / 2 : stride;
    args.x = x.data();
    args.x_bytes = x.size();
    args.y = y.data();
    args.y_len = static_cast<std::size_t>(pt.shape.rows);
    args.y2 = fused ? y2.data() : nullptr;
    args.y2_len = fused ? args.y_len : 0;
    args.threads = pt.threads;
    benchmark::RegisterBenchmark(
        pt.name.c_str(),
        [spec = pt.spec, base = arena.data.get(), stride, slots, fused, args](benchmark::State& st) mutable {
          std::size_t slot = 0;
          for (auto _ : st) {
            args.w = base + slot * stride;
            args.w2 = fused ? base + slot * stride + stride / 2 : nullptr;
            if (const Status s = invoke(*spec, args); !s.ok()) {
              st.SkipWithError(s.error.c_str());
              break;
            }
            benchmark::ClobberMemory();
            if (++slot == slots) slot = 0;
          }
        })
        ->UseRealTime()
        ->MinTime(cfg.min_time_s)
        ->Repetitions(cfg.repetitions);
  }

  // Google Benchmark takes its interleaving switch as a command-line flag.
  std::string interleave_flag =
      std::string("--benchmark_enable_random_interleaving=") + (cfg.interleave ? "true" : "false");
  std::string prog = "qmvlab";
  char* argv[] = {prog.data(), interleave_flag.data(), nullptr};
  int argc = 2;
  benchmark::Initialize(&argc, argv);

  Collector collector;
  int points_done = 0, runs_done = 0;
  const int total_points = static_cast<int>(points.size());
  const int total_runs = total_points * cfg.repetitions;
  collector.on_run = [&](const std::string& name, bool point_done) {
    const Point& pt = points[index_of.at(name)];
    if (auto e = collector.errors.find(name); e != collector.errors.end()) {
      out.skipped.push_back({pt.spec->name, pt.shape, "kernel error: " + e->second});
      ++points_done;
      runs_done += cfg.repetitions;
      return;
    }
    ++runs_done;
    if (on_progress) on_progress(runs_done, total_runs);
    if (!point_done) return;
    ++points_done;
    out.rows.push_back(make_row(pt, collector.seconds_per_call[name], cfg, peak_gbps));
    if (on_row) on_row(out.rows.back(), points_done, total_points);
  };
  benchmark::RunSpecifiedBenchmarks(&collector);
  benchmark::ClearRegisteredBenchmarks();
  return out;
}

}  // namespace qmv
