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

// Buffers of the point being timed. Cold: an arena of `slots` copies of the weights
// (both matrices of a fused op side by side), cycled per call so each call streams
// weights the caches have not seen since the arena last wrapped.
struct Prepared {
  std::size_t point = SIZE_MAX;
  std::size_t matrix_bytes = 0;
  std::size_t slot_stride = 0;
  std::size_t slots = 0;
  struct FreeDeleter {
    void operator()(std::uint8_t* q) const { std::free(q); }
  };
  std::unique_ptr<std::uint8_t, FreeDeleter> arena;
  std::size_t arena_capacity = 0;
  std::vector<std::uint8_t> x;
  std::vector<float> y, y2;
};

constexpr std::size_t kSlotAlign = 64;  // cache line; also covers every block's alignment

void prepare(Prepared& p, std::size_t index, const Point& pt, const BenchConfig& cfg) {
  if (p.point == index) return;
  const KernelSpec& spec = *pt.spec;
  const int matrices = spec.op == OpKind::FusedUpGate ? 2 : 1;
  p.matrix_bytes = static_cast<std::size_t>(pt.shape.rows) * row_bytes(spec.weight, pt.shape.cols);
  p.slot_stride = (matrices * p.matrix_bytes + kSlotAlign - 1) / kSlotAlign * kSlotAlign;
  p.slots = cfg.warm ? 1 : std::max<std::size_t>(2, cold_buffer_bytes() / p.slot_stride + 1);
  // Timing does not depend on the values, so a few hundred distinct rows tiled over
  // the matrix keep set-up short while every byte is still a valid block.
  const auto w = random_quantized_matrix(spec.weight, pt.shape, cfg.seed, 256);
  // Reused across points when large enough: faulting in a fresh multi-GB arena per
  // point would cost more than the timing itself.
  if (p.arena_capacity < p.slots * p.slot_stride) {
    p.arena.reset();
    p.arena.reset(static_cast<std::uint8_t*>(std::aligned_alloc(kSlotAlign, p.slots * p.slot_stride)));
    if (!p.arena) throw std::bad_alloc();
    p.arena_capacity = p.slots * p.slot_stride;
  }
  for (std::size_t s = 0; s < p.slots; ++s)
    for (int m = 0; m < matrices; ++m)
      std::memcpy(p.arena.get() + s * p.slot_stride + m * p.matrix_bytes, w.data(), w.size());
  const auto xf = gaussian_vector(pt.shape.cols, cfg.seed + 1);
  p.x.resize(row_bytes(spec.act, pt.shape.cols));
  quantize_activation(spec.act, xf.data(), p.x.data(), pt.shape.cols);
  p.y.assign(static_cast<std::size_t>(pt.shape.rows), 0.0f);
  p.y2.assign(matrices == 2 ? static_cast<std::size_t>(pt.shape.rows) : 0, 0.0f);
  p.point = index;
}

// Collects the per-repetition times of each point; prints nothing (the caller prints
// one progress line per point).
class Collector : public benchmark::BenchmarkReporter {
 public:
  std::map<std::string, std::vector<double>> seconds_per_call;
  std::map<std::string, std::string> errors;
  std::function<void(const std::string&)> on_point_done;

  bool ReportContext(const Context&) override { return true; }
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& r : runs) {
      const std::string& name = r.run_name.function_name;
      if (r.error_occurred) {
        errors[name] = r.error_message;
        if (on_point_done) on_point_done(name);
        continue;
      }
      if (r.run_type != Run::RT_Iteration || r.iterations == 0) continue;
      auto& v = seconds_per_call[name];
      v.push_back(r.real_accumulated_time / static_cast<double>(r.iterations));
      if (static_cast<std::int64_t>(v.size()) == r.repetitions && on_point_done) on_point_done(name);
    }
  }
};

}  // namespace

BenchOutcome run_bench(const std::vector<const KernelSpec*>& kernels, const std::vector<Shape>& shapes,
                       const BenchConfig& cfg, const std::map<int, double>& peak_gbps,
                       const std::function<void(const BenchRow&, int, int)>& on_row) {
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

  auto prepared = std::make_shared<Prepared>();
  std::map<std::string, std::size_t> index_of;
  benchmark::ClearRegisteredBenchmarks();
  for (std::size_t i = 0; i < points.size(); ++i) {
    index_of[points[i].name] = i;
    benchmark::RegisterBenchmark(points[i].name.c_str(),
                                 [i, &points, &cfg, prepared](benchmark::State& st) {
                                   const Point& pt = points[i];
                                   prepare(*prepared, i, pt, cfg);
                                   Prepared& p = *prepared;
                                   MatVecArgs a;
                                   a.shape = pt.shape;
                                   a.w_bytes = a.w2_bytes = p.matrix_bytes;
                                   a.x = p.x.data();
                                   a.x_bytes = p.x.size();
                                   a.y = p.y.data();
                                   a.y_len = p.y.size();
                                   a.y2 = p.y2.empty() ? nullptr : p.y2.data();
                                   a.y2_len = p.y2.size();
                                   a.threads = pt.threads;
                                   std::size_t slot = 0;
                                   for (auto _ : st) {
                                     const std::uint8_t* base = p.arena.get() + slot * p.slot_stride;
                                     a.w = base;
                                     a.w2 = p.y2.empty() ? nullptr : base + p.matrix_bytes;
                                     if (const Status s = invoke(*pt.spec, a); !s.ok()) {
                                       st.SkipWithError(s.error.c_str());
                                       break;
                                     }
                                     benchmark::ClobberMemory();
                                     if (++slot == p.slots) slot = 0;
                                   }
                                 })
        ->UseRealTime()
        ->MinTime(cfg.min_time_s)
        ->Repetitions(cfg.repetitions);
  }

  Collector collector;
  int done = 0;
  const int total = static_cast<int>(points.size());
  collector.on_point_done = [&](const std::string& name) {
    const Point& pt = points[index_of.at(name)];
    ++done;
    if (auto e = collector.errors.find(name); e != collector.errors.end()) {
      out.skipped.push_back({pt.spec->name, pt.shape, "kernel error: " + e->second});
      return;
    }
    std::vector<double> t = collector.seconds_per_call[name];
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
    out.rows.push_back(r);
    if (on_row) on_row(r, done, total);
  };
  benchmark::RunSpecifiedBenchmarks(&collector);
  benchmark::ClearRegisteredBenchmarks();
  return out;
}

}  // namespace qmv
