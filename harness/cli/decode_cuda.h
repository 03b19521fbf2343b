// The GPU side of `qmvlab decode --device cuda` and `qmvlab logits --device cuda`:
// the generate loop (model/generate.h) on GpuForward, its per-op breakdown and its
// report lines. harness/cli/decode.cpp parses the options and prints the rest
// of the report (roofline, plan, JSON, CSV) as for the CPU.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/forward.h"
#include "model/forward_cuda.h"
#include "model/generate.h"
#include "model/plan.h"
#include "model/sampler.h"

namespace qmv {

struct CudaDecodeOptions {
  bool cuda_graph = true;     // replay one captured graph per step (--no-cuda-graph: op by op)
  bool op_times = true;       // replay the run op by op with CUDA events for the breakdown
  bool sync_each_op = false;  // debugging: a fault names its op
  bool stack_gate_up = true;  // gate and up as one matvec where they can be (--no-stack-gate-up: two)
  bool stack_qkv = true;      // q, k and v likewise (--no-stack-qkv: three)
  // Head step and attention as one kernel: on (--fuse-attention), off
  // (--no-fuse-attention), or, unset, the way a trial on this GPU finds faster
  // (choose_attention).
  std::optional<bool> fuse_attention;
  bool overlap_weights = false;  // matvecs as programmatic dependents (--overlap-weights)
};

// How the decode ran its attention, and why: the fused kernel or the separate ones,
// given by a flag or found by a trial (separate_ms and fused_ms: each way's median
// step, over `steps` timed steps each).
struct AttentionChoice {
  bool fused = false;
  bool measured = false;
  double separate_ms = 0, fused_ms = 0;
  int steps = 0;
  std::string why;  // one line for the report
};

// The trial's verdict from each way's step times (ms): the fused kernel where its
// median step is shorter. Throws std::invalid_argument when either side has no time.
AttentionChoice choose_attention(const std::vector<double>& separate_ms, const std::vector<double>& fused_ms);

// The generation (model/generate.h) and what the GPU adds to its report.
struct CudaDecodeRun : Generation {
  // The breakdown, from a second run of the same tokens op by op with CUDA events
  // (the timed run stays a graph replay); op_timed_steps 0 when not measured.
  StepTimes op_times;
  double sample_s = 0;
  int op_timed_steps = 0;
  bool replay_agrees = true;  // the op-by-op run sampled the same tokens
  // Outlier routing over the prompt and the timed decode (GpuForward::routing).
  StepTimes routing;
  std::uint64_t weight_bytes = 0;
  std::array<std::uint64_t, static_cast<int>(Op::kCount)> part_bytes{};
  std::string device;
  DeviceMemoryNeed memory;
  double upload_s = 0;
  bool graph = false;
  int attention_splits = 0;
  AttentionChoice attention;
};

// Runs the prompt, samples the first new token, then generates until `n` tokens or
// until emit(token) returns false (the end-of-sequence token), on the GPU, with the
// KV cache sized for `context` positions. Decode is timed after the first token.
// Throws what GpuForward throws; without CUDA in the build, std::runtime_error.
CudaDecodeRun run_cuda_decode(const LoadedModel& m, const std::vector<PlannedMatvec>& planned,
                              const std::vector<int>& prompt, int n, const SamplerConfig& sampler, int context,
                              const CudaDecodeOptions& options, const std::function<bool(int)>& emit);

// The logits at every position of `tokens` (tokens.size() x vocab floats); `routing`,
// when given, gets the outlier routing's counts over them.
std::vector<float> cuda_logits(const LoadedModel& m, const std::vector<PlannedMatvec>& planned,
                               const std::vector<int>& tokens, const CudaDecodeOptions& options,
                               StepTimes* routing = nullptr);

// The GPU's measured bandwidth for the roofline, GB/s: the best of a few device-to-
// device copies of a large buffer, bytes read plus bytes written (0 when it cannot run).
double cuda_read_bandwidth_gbps();

// One line: the device, the memory taken, the upload, graph or op by op.
std::string describe_cuda_run(const CudaDecodeRun& r);

// The per-op table (as the CPU's: part, calls/token, ms/token, share, weights GB/s)
// with the sampler's row; a note when the breakdown was not measured.
void print_cuda_breakdown(const CudaDecodeRun& r);

}  // namespace qmv
