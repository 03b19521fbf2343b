// The GPU half of run_bench: CUDA events around many launches of each point (from the
// host, or replayed from a CUDA graph; with --gpu-overlap as programmatic dependents),
// NVTX ranges named after the kernels, weight copies rotated past the L2 (cold).
#include <fmt/format.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "harness/bench_points.h"
#ifdef QMV_HAVE_CUDA
#include "harness/data.h"
#include "harness/peak.h"
#include "kernels/activation_quantizers.h"
#include "kernels/cuda/cuda_device.h"
#include "kernels/cuda/quantize_q8_1.h"
#endif

namespace qmv::bench_detail {

#ifdef QMV_HAVE_CUDA
namespace {

// One CUDA point: where its weight copies lie in the device arena, its arguments, and
// the per-call times of its repetitions (seconds).
struct GpuPoint {
  Point pt;
  std::size_t matrix_stride = 0;  // one matrix, rounded to an aligned whole-block size
  std::size_t copy_stride = 0;    // the matrices of one call (two for a fused pair)
  std::size_t slots = 1;          // copies rotated through
  const std::uint8_t* arena = nullptr;
  std::size_t slot = 0;
  MatVecArgs args;
  // Q8_1 kernels: the float activation and the buffer the GPU quantizer writes.
  const float* x_float = nullptr;
  BlockQ8_1* x_quantized = nullptr;
  std::int64_t launches = 0;
  std::vector<double> matvec_s, quant_s, with_quant_s;
  bool failed = false;

  bool times_quantizer() const { return pt.spec->act == ActFormat::Q8_1; }
};

// Matrix copies start on a whole block and 256-byte aligned, as a matrix of its own
// from cudaMalloc would: kernels may rely on the alignment of their rows.
std::size_t aligned_matrix_bytes(const Point& pt) {
  const std::size_t align = std::lcm(block_bytes(pt.spec->weight), std::size_t(256));
  const std::size_t bytes = static_cast<std::size_t>(pt.shape.rows) * row_bytes(pt.spec->weight, pt.shape.cols);
  return (bytes + align - 1) / align * align;
}

Status launch_matvec(GpuPoint& g) {
  g.args.w = g.arena + g.slot * g.copy_stride;
  if (g.pt.spec->op == OpKind::FusedUpGate) g.args.w2 = g.arena + g.slot * g.copy_stride + g.matrix_stride;
  if (++g.slot == g.slots) g.slot = 0;
  return invoke(*g.pt.spec, g.args);
}

// A batch point's n vectors lie back to back, each a whole number of Q8_1 blocks, so one
// launch over n * cols values quantizes them all.
Status launch_quantizer(GpuPoint& g) {
  return cuda::quantize_q8_1(g.x_float, g.x_quantized, g.pt.shape.cols * std::max(g.pt.n, 1), g.args.stream);
}

Status launch_quantizer_and_matvec(GpuPoint& g) {
  if (auto st = launch_quantizer(g); !st.ok()) return st;
  const void* given = g.args.x;
  g.args.x = g.x_quantized;
  const Status st = launch_matvec(g);
  g.args.x = given;
  return st;
}

// Per-launch seconds of `launches` back-to-back launches between two events, inside an
// NVTX range named `range`. With `graph`, one lap of the weight copies (g.slots
// launches) is captured into a CUDA graph and replayed enough times to cover `launches`.
Status time_launches(GpuPoint& g, std::int64_t launches, const std::string& range, Status (*launch)(GpuPoint&),
                     cuda::EventTimer& timer, double& seconds, bool graph = false) {
  cuda::CapturedLaunches lap;
  std::int64_t replays = 0;
  if (graph) {
    const auto record = [&] {
      Status s;
      for (std::size_t i = 0; s.ok() && i < g.slots; ++i) s = launch(g);
      return s;
    };
    if (auto st = lap.capture(g.args.stream, record, range); !st.ok()) return st;
    replays = std::max<std::int64_t>(1, (launches + static_cast<std::int64_t>(g.slots) - 1) /
                                            static_cast<std::int64_t>(g.slots));
    launches = replays * static_cast<std::int64_t>(g.slots);
  }
  cuda::NvtxRange nvtx(range.c_str());
  Status st = timer.start(g.args.stream);
  if (graph)
    for (std::int64_t i = 0; st.ok() && i < replays; ++i) st = lap.replay(g.args.stream);
  else
    for (std::int64_t i = 0; st.ok() && i < launches; ++i) st = launch(g);
  if (st.ok()) st = timer.stop(g.args.stream);
  double ms = 0;
  if (st.ok()) st = timer.elapsed_ms(ms, range);
  if (st.ok()) seconds = ms * 1e-3 / static_cast<double>(launches);
  return st;
}

// A first call checked on its own (a fault is named before any timing), a warm-up,
// then enough launches per repetition to last cfg.min_time_s.
Status calibrate(GpuPoint& g, const BenchConfig& cfg, cuda::EventTimer& timer) {
  if (auto st = launch_matvec(g); !st.ok()) return st;
  if (auto st = cuda::synchronize(g.args.stream, g.pt.spec->name); !st.ok()) return st;
  if (g.times_quantizer()) {
    if (auto st = launch_quantizer(g); !st.ok()) return st;
    if (auto st = cuda::synchronize(g.args.stream, cuda::kQuantizeQ8_1Name); !st.ok()) return st;
  }
  double per_call = 0;
  if (auto st = time_launches(g, 10, g.pt.spec->name, launch_matvec, timer, per_call); !st.ok()) return st;
  const double wanted = cfg.min_time_s / std::max(per_call, 1e-7);
  g.launches = std::clamp<std::int64_t>(static_cast<std::int64_t>(std::ceil(wanted)), 10, 1000000);
  // A graph replays whole laps of the weight copies.
  if (cfg.gpu_graph) {
    const auto lap = static_cast<std::int64_t>(g.slots);
    g.launches = (g.launches + lap - 1) / lap * lap;
  }
  return Status::Ok();
}

// One repetition of every measurement of the point.
Status time_repetition(GpuPoint& g, cuda::EventTimer& timer, bool graph) {
  double s = 0;
  if (auto st = time_launches(g, g.launches, g.pt.spec->name, launch_matvec, timer, s, graph); !st.ok()) return st;
  g.matvec_s.push_back(s);
  if (!g.times_quantizer()) return Status::Ok();
  if (auto st = time_launches(g, g.launches, cuda::kQuantizeQ8_1Name, launch_quantizer, timer, s, graph); !st.ok())
    return st;
  g.quant_s.push_back(s);
  const std::string both = std::string(cuda::kQuantizeQ8_1Name) + "+" + g.pt.spec->name;
  if (auto st = time_launches(g, g.launches, both, launch_quantizer_and_matvec, timer, s, graph); !st.ok())
    return st;
  g.with_quant_s.push_back(s);
  return Status::Ok();
}

BenchRow make_gpu_row(const GpuPoint& g, const BenchConfig& cfg) {
  const GpuPeakResult& peak = gpu_peak();
  BenchRow r = make_row(g.pt, g.matvec_s, cfg, {{g.pt.threads, peak.roofline_gbps()}});
  const cuda::DeviceInfo& dev = cuda::current_device();
  r.launches_per_rep = g.launches;
  r.quant_median_us = median(g.quant_s) * 1e6;
  r.time_with_quant_median_us = median(g.with_quant_s) * 1e6;
  r.act_quant_median_us = r.quant_median_us;
  r.datasheet_gbps = dev.datasheet_gbps();
  r.datasheet_pct = r.datasheet_gbps > 0 ? 100.0 * r.gbps_median / r.datasheet_gbps : 0.0;
  r.rotation_bytes = static_cast<std::int64_t>(g.slots * g.copy_stride);
  r.gpu_name = dev.name;
  r.gpu_driver = cuda::version_text(dev.driver_version);
  r.gpu_sm_count = dev.sm_count;
  r.gpu_sm_clock_mhz = dev.sm_clock_khz / 1000;
  r.gpu_mem_clock_mhz = dev.memory_clock_khz / 1000;
  r.gpu_bus_bits = dev.memory_bus_bits;
  r.gpu_l2_bytes = static_cast<std::int64_t>(dev.l2_bytes);
  return r;
}

}  // namespace

void run_gpu_points(const std::vector<Point>& points, const BenchConfig& cfg, BenchOutcome& out, Progress& progress) {
  const cuda::DeviceInfo& dev = cuda::current_device();
  auto fail_all = [&](const std::string& reason) {
    for (const Point& pt : points) progress.point_failed(out, pt, reason, cfg.repetitions);
  };
  cuda::Stream stream;
  if (!stream.status().ok()) return fail_all(stream.status().error);
  cuda::EventTimer timer;
  (void)gpu_peak();  // measured before any kernel runs, on a quiet device

  // Device buffers shared by every point: one weight arena per type (weights are
  // uploaded once), the prepared activations per (format, cols) for the most vectors a
  // point takes, outputs of the largest rows x vectors.
  std::vector<GpuPoint> gs;
  std::map<WeightType, std::size_t> arena_need;
  std::map<std::pair<ActFormat, std::int64_t>, int> vectors_need;
  std::int64_t max_outputs = 0;
  for (const Point& pt : points) {
    GpuPoint g;
    g.pt = pt;
    g.matrix_stride = aligned_matrix_bytes(pt);
    g.copy_stride = g.matrix_stride * (pt.spec->op == OpKind::FusedUpGate ? 2 : 1);
    // Cold: whole copies adding up to at least gpu_cold_bytes, and at least two, so
    // every point's rotation through the arena covers that much.
    const std::size_t copies = std::max<std::size_t>(2, (gpu_cold_bytes(dev.l2_bytes) + g.copy_stride - 1) / g.copy_stride);
    auto& need = arena_need[pt.spec->weight];
    need = std::max(need, cfg.warm ? g.copy_stride : copies * g.copy_stride);
    const int n = std::max(pt.n, 1);
    max_outputs = std::max(max_outputs, pt.shape.rows * n);
    int& vectors = vectors_need[{pt.spec->act, pt.shape.cols}];
    vectors = std::max(vectors, n);
    gs.push_back(std::move(g));
  }
  std::map<WeightType, cuda::DeviceBuffer> arenas;
  std::map<WeightType, std::string> arena_errors;
  for (const auto& [type, need] : arena_need) {
    const auto tile = random_quantized_matrix(type, Shape{256, 4096}, cfg.seed);
    cuda::DeviceBuffer buf;
    const std::string what = fmt::format("the {} weight copies", to_string(type));
    Status st = buf.resize(need, what);
    if (st.ok()) st = cuda::fill_repeating(buf.get(), need, tile.data(), tile.size(), what);
    if (st.ok())
      arenas.emplace(type, std::move(buf));
    else
      arena_errors[type] = st.error;
  }
  struct DeviceActivation {
    cuda::DeviceBuffer prepared, floats, quantized;
  };
  std::map<std::pair<ActFormat, std::int64_t>, DeviceActivation> activations;
  cuda::DeviceBuffer y, y2;
  Status st = y.resize(static_cast<std::size_t>(max_outputs) * sizeof(float), "bench output");
  if (st.ok()) st = y2.resize(static_cast<std::size_t>(max_outputs) * sizeof(float), "bench second output");
  for (const GpuPoint& g : gs) {
    if (!st.ok()) break;
    const auto key = std::make_pair(g.pt.spec->act, g.pt.shape.cols);
    if (activations.count(key)) continue;
    DeviceActivation& a = activations[key];
    // Each vector its own draw, so a batch kernel that reads one column for another
    // still does the work of n different ones.
    const std::int64_t cols = g.pt.shape.cols;
    const int vectors = vectors_need.at(key);
    std::vector<float> xf;
    for (int v = 0; v < vectors; ++v) {
      const auto one = gaussian_vector(cols, cfg.seed + 1 + static_cast<std::uint64_t>(v));
      xf.insert(xf.end(), one.begin(), one.end());
    }
    const std::size_t one_bytes = row_bytes(g.pt.spec->act, cols);
    std::vector<std::uint8_t> x(one_bytes * static_cast<std::size_t>(vectors));
    for (int v = 0; v < vectors; ++v)
      quantize_activation(g.pt.spec->act, xf.data() + v * cols, x.data() + v * one_bytes, cols);
    st = a.prepared.resize(x.size(), "bench activation");
    if (st.ok()) st = cuda::copy_to_device(a.prepared.get(), x.data(), x.size(), stream.get(), "bench activation");
    if (st.ok() && g.pt.spec->act == ActFormat::Q8_1) {
      st = a.floats.resize(xf.size() * sizeof(float), "bench float activation");
      if (st.ok())
        st = cuda::copy_to_device(a.floats.get(), xf.data(), a.floats.size(), stream.get(), "bench float activation");
      if (st.ok()) st = a.quantized.resize(x.size(), "bench quantized activation");
    }
  }
  if (st.ok()) st = cuda::synchronize(stream.get(), "bench set-up");
  if (!st.ok()) return fail_all(st.error);

  for (GpuPoint& g : gs) {
    const WeightType type = g.pt.spec->weight;
    if (arena_errors.count(type)) {
      g.failed = true;
      progress.point_failed(out, g.pt, "GPU memory: " + arena_errors.at(type), cfg.repetitions);
      continue;
    }
    const cuda::DeviceBuffer& arena = arenas.at(type);
    g.arena = static_cast<const std::uint8_t*>(arena.get());
    g.slots = cfg.warm ? 1 : arena.size() / g.copy_stride;
    DeviceActivation& a = activations.at({g.pt.spec->act, g.pt.shape.cols});
    const bool fused = g.pt.spec->op == OpKind::FusedUpGate;
    g.args.shape = g.pt.shape;
    g.args.w_bytes = g.args.w2_bytes = g.matrix_stride;
    g.args.x = a.prepared.get();
    g.args.x_bytes = a.prepared.size();
    g.args.y = static_cast<float*>(y.get());
    g.args.y_len = y.size() / sizeof(float);
    g.args.y2 = fused ? static_cast<float*>(y2.get()) : nullptr;
    g.args.y2_len = fused ? y2.size() / sizeof(float) : 0;
    g.args.threads = g.pt.threads;
    g.args.n = std::max(g.pt.n, 1);
    g.args.stream = stream.get();
    g.args.overlap_previous = cfg.gpu_overlap;
    g.x_float = static_cast<const float*>(a.floats.get());
    g.x_quantized = static_cast<BlockQ8_1*>(a.quantized.get());
  }

  // A fault on the device leaves the CUDA context unusable: every later call would
  // fail too, under its own name, so the points after it are reported as not run.
  std::string lost_after;
  auto run_one = [&](GpuPoint& g, bool first_repetition) {
    if (g.failed) return;
    if (!lost_after.empty()) {
      g.failed = true;
      progress.point_failed(out, g.pt, "not run: the CUDA context was lost after " + lost_after,
                            cfg.repetitions - static_cast<int>(g.matvec_s.size()));
      return;
    }
    Status s = first_repetition ? calibrate(g, cfg, timer) : Status::Ok();
    if (s.ok()) s = time_repetition(g, timer, cfg.gpu_graph);
    if (!s.ok()) {
      g.failed = true;
      progress.point_failed(out, g.pt, "kernel error: " + s.error,
                            cfg.repetitions - static_cast<int>(g.matvec_s.size()));
      if (const Status health = cuda::device_status(); !health.ok())
        lost_after = fmt::format("{}'s error ({})", g.pt.spec->name, health.error);
      return;
    }
    progress.run_done();
    if (static_cast<int>(g.matvec_s.size()) == cfg.repetitions) progress.point_done(out, make_gpu_row(g, cfg));
  };
  if (cfg.interleave) {
    // Rounds of one repetition of every point, in a fresh random order each round.
    std::mt19937_64 rng(cfg.seed);
    std::vector<std::size_t> order(gs.size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
    for (int rep = 0; rep < cfg.repetitions; ++rep) {
      std::shuffle(order.begin(), order.end(), rng);
      for (std::size_t i : order) run_one(gs[i], rep == 0);
    }
  } else {
    for (GpuPoint& g : gs)
      for (int rep = 0; rep < cfg.repetitions && !g.failed; ++rep) run_one(g, rep == 0);
  }
}

#else

void run_gpu_points(const std::vector<Point>& points, const BenchConfig& cfg, BenchOutcome& out, Progress& progress) {
  // availability() refuses every CUDA kernel in a build without CUDA.
  for (const Point& pt : points) progress.point_failed(out, pt, "this build has no CUDA", cfg.repetitions);
}

#endif  // QMV_HAVE_CUDA

}  // namespace qmv::bench_detail
