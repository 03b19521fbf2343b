#include "harness/bench.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <iterator>

#include "harness/bench_points.h"
#include "harness/tuning_store.h"
#include "kernels/availability.h"
#include "kernels/cpu_tiling.h"

namespace qmv {
namespace bench_detail {
namespace {

// Who quantizes the activation for this kernel (see BenchRow::act_quant).
const char* act_quant_kind(const KernelSpec& k) {
  if (!k.act_converted_to.empty()) return "in_call";
  return k.act == ActFormat::F32 ? "none" : "before";
}

}  // namespace

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

std::vector<double> repetitions_ended(const std::vector<BenchCall>& calls, const std::vector<std::int64_t>& iterations,
                                      const std::vector<double>& seconds_per_call) {
  std::vector<bool> used(calls.size(), false);
  std::vector<double> out;
  for (std::size_t r = 0; r < iterations.size() && r < seconds_per_call.size(); ++r) {
    std::size_t best = calls.size();
    for (std::size_t c = 0; c < calls.size(); ++c)
      if (!used[c] && calls[c].iterations == iterations[r] &&
          (best == calls.size() || std::abs(calls[c].seconds_per_call - seconds_per_call[r]) <
                                       std::abs(calls[best].seconds_per_call - seconds_per_call[r])))
        best = c;
    if (best == calls.size()) {
      out.push_back(-1);
      continue;
    }
    used[best] = true;
    out.push_back(calls[best].end_s);
  }
  return out;
}

std::vector<double> nearest_read_speeds(const std::vector<double>& at, std::vector<std::pair<double, double>> reads) {
  std::sort(reads.begin(), reads.end());
  std::vector<double> out;
  out.reserve(at.size());
  for (const double pos : at) {
    const auto after = std::lower_bound(reads.begin(), reads.end(), std::pair{pos, 0.0});
    const bool has_after = after != reads.end(), has_before = after != reads.begin();
    if (pos < 0 || (!has_after && !has_before)) {
      out.push_back(0);
      continue;
    }
    if (!has_before || (has_after && after->first - pos < pos - std::prev(after)->first)) {
      out.push_back(after->second);
      continue;
    }
    const auto before = std::prev(after);
    if (!has_after || pos - before->first < after->first - pos) {
      out.push_back(before->second);
      continue;
    }
    out.push_back(same_read_speed(before->second, after->second) ? (before->second + after->second) / 2 : 0.0);
  }
  return out;
}

std::size_t matrix_bytes(const Point& pt) {
  const int matrices = pt.spec->op == OpKind::FusedUpGate ? 2 : 1;
  return matrices * static_cast<std::size_t>(pt.shape.rows) * row_bytes(pt.spec->weight, pt.shape.cols);
}

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
  r.n = pt.n;
  r.bytes_per_call = static_cast<std::int64_t>(bytes_moved(spec, pt.shape, pt.n));
  r.gbps_median = static_cast<double>(r.bytes_per_call) / (r.time_median_us * 1e3);
  r.gbps_best = static_cast<double>(r.bytes_per_call) / (r.time_min_us * 1e3);
  const auto peak = peak_gbps.find(pt.threads);
  r.peak_gbps = peak == peak_gbps.end() ? 0.0 : peak->second;
  r.peak_pct = r.peak_gbps > 0 ? 100.0 * r.gbps_median / r.peak_gbps : 0.0;
  r.gflops = flops(spec, pt.shape, pt.n) / (r.time_median_us * 1e3);
  r.act_quant = act_quant_kind(spec);
  return r;
}

}  // namespace bench_detail

BenchOutcome run_bench(const std::vector<const KernelSpec*>& kernels, const std::vector<Shape>& shapes,
                       const BenchConfig& cfg, const std::map<int, double>& peak_gbps,
                       const std::function<void(const BenchRow&, int, int)>& on_row,
                       const std::function<void(int, int)>& on_progress) {
  using namespace bench_detail;
  BenchOutcome out;
  std::vector<Point> cpu_points, gpu_points;
  const int gpu_threads = cfg.threads.empty() ? 1 : cfg.threads.front();
  for (const KernelSpec* k : kernels) {
    const Availability av = availability(*k);
    for (Shape s : shapes) {
      if (!av.available) {
        out.skipped.push_back({k->name, s, "unavailable: " + av.reason});
      } else if (!k->supports(s)) {
        out.skipped.push_back({k->name, s, "shape not supported (needs " + k->shape_rule + ")"});
      } else {
        // A batch kernel for each count it takes; any other with one vector.
        const bool batch = k->op == OpKind::MatVecBatch;
        std::vector<int> counts;
        for (int n : cfg.vectors)
          if (n == 1 || (batch && n <= k->max_n)) counts.push_back(n);
        if (counts.empty())
          out.skipped.push_back({k->name, s,
                                 batch ? fmt::format("takes at most {} vectors per call", k->max_n)
                                       : std::string("takes one vector per call (--n without 1)")});
        const std::string warmth = cfg.warm ? "warm" : "cold";
        for (int n : counts) {
          const std::string per_n = batch ? fmt::format("/n:{}", n) : "";
          if (k->backend == Backend::CUDA) {  // one launch configuration: no thread axis
            gpu_points.push_back(
                {k, s, gpu_threads, fmt::format("{}/{}/{}{}", k->name, to_string(s), warmth, per_n), n});
            continue;
          }
          for (int t : cfg.threads)
            cpu_points.push_back(
                {k, s, t, fmt::format("{}/{}/threads:{}/{}{}", k->name, to_string(s), t, warmth, per_n), n});
        }
      }
    }
  }
  Progress progress;
  progress.total_points = static_cast<int>(cpu_points.size() + gpu_points.size());
  progress.total_runs = progress.total_points * cfg.repetitions;
  progress.on_row = &on_row;
  progress.on_progress = &on_progress;
  if (!gpu_points.empty()) run_gpu_points(gpu_points, cfg, out, progress);
  if (!cpu_points.empty()) run_cpu_points(cpu_points, cfg, peak_gbps, out, progress);
  return out;
}

}  // namespace qmv
