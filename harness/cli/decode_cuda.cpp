#include "harness/cli/decode_cuda.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <stdexcept>

#ifdef QMV_HAVE_CUDA
#include <cuda_runtime.h>
#endif

#include "harness/peak.h"
#include "harness/table.h"
#include "model/gpu_math.h"
#include "model/kernel_trials.h"

namespace qmv {

namespace {

std::string mib(std::uint64_t b) { return fmt::format("{:.1f} MiB", b / double(1 << 20)); }

}  // namespace

AttentionChoice choose_attention(const std::vector<double>& separate_ms, const std::vector<double>& fused_ms) {
  if (separate_ms.empty() || fused_ms.empty())
    throw std::invalid_argument("choose_attention: a way of running attention has no timed step");
  AttentionChoice c;
  c.measured = true;
  c.separate_ms = trial_median(separate_ms);
  c.fused_ms = trial_median(fused_ms);
  c.steps = static_cast<int>(std::min(separate_ms.size(), fused_ms.size()));
  c.fused = c.fused_ms < c.separate_ms;
  c.why = fmt::format("{}, measured: a step took {:.3f} ms with the fused kernel and {:.3f} ms with the separate "
                      "ones (medians of {} steps each, A B B A before the decode)",
                      c.fused ? "fused" : "separate", c.fused_ms, c.separate_ms, c.steps);
  return c;
}

#ifdef QMV_HAVE_CUDA

namespace {

// The GPU's step for the generate loop: the sampler runs on the device in every step,
// so a step's token comes back whether the loop reads it or not.
class GpuSteps : public TokenSteps {
 public:
  explicit GpuSteps(GpuForward& fwd) : fwd_(fwd) {}
  int step(int token, bool) override { return fwd_.step(token); }
  std::uint64_t bytes_per_token() const override { return fwd_.bytes_per_token(fwd_.position()); }

 private:
  GpuForward& fwd_;
};

GpuForwardOptions forward_options(const CudaDecodeOptions& o, const SamplerConfig& sampler, int context) {
  GpuForwardOptions f;
  f.context = context;
  f.cuda_graph = o.cuda_graph;
  f.sync_each_op = o.sync_each_op;
  f.stack_gate_up = o.stack_gate_up;
  f.stack_qkv = o.stack_qkv;
  f.fuse_attention = o.fuse_attention.value_or(false);
  f.overlap_weights = o.overlap_weights;
  f.sampler = sampler;
  return f;
}

// The trial: rounds of A B B A blocks, the separate kernels and the fused one, each
// block `kTrialSteps` steps from position 0 over the prompt's tokens again and again.
// The first step of a block is not timed: a way's very first step runs op by op (its
// graph's capture comes with the next one, a single step among the medians' 30). The
// sampler draws by position, so the decode after it samples as it would have without.
constexpr int kTrialRounds = 3, kTrialSteps = 6;

AttentionChoice attention_trial(GpuForward& fwd, const std::vector<int>& prompt) {
  const int steps = std::min(kTrialSteps, fwd.context());
  if (steps < 2) return {false, false, 0, 0, 0, "separate: a KV cache of one position leaves no step to time"};
  std::vector<double> times[2];
  for (int round = 0; round < kTrialRounds; ++round)
    for (const bool fused : {false, true, true, false}) {
      fwd.reset();
      fwd.set_fuse_attention(fused);
      for (int i = 0; i < steps; ++i) {
        const auto t0 = std::chrono::steady_clock::now();
        fwd.step(prompt[static_cast<std::size_t>(i) % prompt.size()]);
        const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
        if (i > 0) times[fused].push_back(ms);
      }
    }
  fwd.reset();
  fwd.clear_routing();  // the routing counts are the decode's
  return choose_attention(times[0], times[1]);
}

// The fused kernel holds a head of at most kMaxHeadDim values with RoPE over part of it.
bool fused_attention_holds(const ModelConfig& c) {
  return c.head_dim <= cuda::kMaxHeadDim && c.rope_dim <= c.head_dim;
}

}  // namespace

CudaDecodeRun run_cuda_decode(const LoadedModel& m, const std::vector<PlannedMatvec>& planned,
                              const std::vector<int>& prompt, int n, const SamplerConfig& sampler, int context,
                              const CudaDecodeOptions& options, const std::function<bool(int)>& emit) {
  if (prompt.empty()) throw std::invalid_argument("decode: the prompt has no tokens");  // before the upload
  GpuForward fwd(m.config, m.weights, planned, forward_options(options, sampler, context));
  CudaDecodeRun r;
  r.device = fwd.device_name();
  r.memory = fwd.memory();
  r.upload_s = fwd.upload_seconds();
  r.graph = fwd.graph_enabled();
  r.attention_splits = fwd.attention_splits();
  r.weight_bytes = fwd.weight_bytes();
  for (int i = 0; i < static_cast<int>(Op::kCount); ++i) r.part_bytes[i] = fwd.part_weight_bytes(static_cast<Op>(i));

  if (options.fuse_attention) {
    r.attention.fused = *options.fuse_attention;
    r.attention.why = r.attention.fused ? "fused (--fuse-attention)" : "separate (--no-fuse-attention)";
  } else if (!fused_attention_holds(m.config)) {
    r.attention.why = fmt::format("separate: the fused kernel holds a head of at most {} values, not {}",
                                  cuda::kMaxHeadDim, m.config.head_dim);
  } else {
    try {
      r.attention = attention_trial(fwd, prompt);
    } catch (const std::runtime_error& e) {  // a launch the fused kernel refused; a CUDA fault fails the next step
      fwd.reset();
      fwd.clear_routing();
      r.attention = {};
      r.attention.why = fmt::format("separate: the fused kernel failed in the trial: {}", e.what());
    }
  }
  fwd.set_fuse_attention(r.attention.fused);

  // The prompt's last step samples the first new token, on the device. (The first step
  // also captures the graph.)
  GpuSteps steps(fwd);
  static_cast<Generation&>(r) = generate(steps, prompt, n, emit);
  r.routing = fwd.routing();

  // The breakdown: the same tokens again, op by op between CUDA events. Events and
  // launches one at a time cost time a graph does not, so the timed run above is
  // not measured this way; the same tokens must come out.
  if (options.op_times && r.decode_steps > 0) {
    fwd.reset();
    fwd.set_op_timing(true);
    for (int t : prompt) fwd.step(t);
    fwd.clear_times();
    for (int i = 0; i < r.decode_steps; ++i)
      r.replay_agrees = fwd.step(r.generated[i]) == r.generated[i + 1] && r.replay_agrees;
    r.op_times = fwd.times();
    r.sample_s = fwd.sample_seconds();
    r.op_timed_steps = fwd.timed_steps();
  }
  return r;
}

std::vector<float> cuda_logits(const LoadedModel& m, const std::vector<PlannedMatvec>& planned,
                               const std::vector<int>& tokens, const CudaDecodeOptions& options, StepTimes* routing) {
  GpuForward fwd(m.config, m.weights, planned,
                 forward_options(options, SamplerConfig{}, static_cast<int>(tokens.size())));
  std::vector<float> all;
  all.reserve(tokens.size() * static_cast<std::size_t>(m.config.vocab_size));
  for (int t : tokens) {
    fwd.step(t);
    const auto logits = fwd.logits();
    all.insert(all.end(), logits.begin(), logits.end());
  }
  if (routing) *routing = fwd.routing();
  return all;
}

#else

CudaDecodeRun run_cuda_decode(const LoadedModel&, const std::vector<PlannedMatvec>&, const std::vector<int>&, int,
                              const SamplerConfig&, int, const CudaDecodeOptions&, const std::function<bool(int)>&) {
  throw std::runtime_error("--device cuda: this qmvlab was built without CUDA (QMV_CUDA=OFF)");
}

std::vector<float> cuda_logits(const LoadedModel&, const std::vector<PlannedMatvec>&, const std::vector<int>&,
                               const CudaDecodeOptions&, StepTimes*) {
  throw std::runtime_error("--device cuda: this qmvlab was built without CUDA (QMV_CUDA=OFF)");
}

#endif

// The roofline's bandwidth: the harness's GPU read peak (the copy where the read could not run; 0 without a
// device, so no roofline).
double cuda_read_bandwidth_gbps() {
  const GpuPeakResult& peak = gpu_peak();
  return peak.measured ? peak.roofline_gbps() : 0.0;
}

std::string describe_cuda_run(const CudaDecodeRun& r) {
  return fmt::format(
      "GPU {}: {} on the device (weights {} + KV cache {} for {} positions + scratch {}), uploaded in {:.3f} s; "
      "{}, attention in {} split(s)",
      r.device, mib(r.memory.total()), mib(r.memory.weights), mib(r.memory.kv_cache), r.memory.context,
      mib(r.memory.scratch), r.upload_s, r.graph ? "each step one CUDA graph replay" : "each step launched op by op",
      r.attention_splits);
}

void print_cuda_breakdown(const CudaDecodeRun& r) {
  const int steps = r.op_timed_steps;
  if (steps <= 0) {
    fmt::print("(per-op times not measured: --no-op-times, or nothing was decoded after the first token)\n");
    return;
  }
  const double total = r.op_times.total() + r.sample_s;
  std::vector<std::vector<std::string>> rows;
  for (int i = 0; i < static_cast<int>(Op::kCount); ++i) {
    const auto part = static_cast<Op>(i);
    if (r.op_times.calls[i] == 0) continue;
    const double ms = 1e3 * r.op_times.seconds[i] / steps;
    rows.push_back({std::string(to_string(part)), fmt::format("{:.1f}", double(r.op_times.calls[i]) / steps),
                    fmt::format("{:.3f}", ms), fmt::format("{:.1f}%", 100 * r.op_times.seconds[i] / total),
                    is_matvec(part) && ms > 0 ? fmt::format("{:.2f}", r.part_bytes[i] / (ms * 1e-3) / 1e9) : "-"});
  }
  rows.push_back({"sample", "1.0", fmt::format("{:.3f}", 1e3 * r.sample_s / steps),
                  fmt::format("{:.1f}%", 100 * r.sample_s / total), "-"});
  rows.push_back({"total", "", fmt::format("{:.3f}", 1e3 * total / steps), "100.0%", ""});
  print_table({"part", "calls/token", "ms/token", "share", "weights GB/s"}, rows);
  fmt::print("(CUDA events between the ops of a second, op-by-op run of the same {} tokens{})\n", steps,
             r.replay_agrees ? "" : "; WARNING: it sampled different tokens than the timed run");
}

}  // namespace qmv
