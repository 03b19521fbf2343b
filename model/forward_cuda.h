// The GPU forward pass: CpuForward's decode step on a CUDA device, one token at a
// time over a KV cache held on the device.
//
// The weights are uploaded once (a model that does not fit in the free device memory
// is refused, naming the sizes). Every matvec runs the CUDA kernel the resolved plan
// chose for its op, weight type and shape, through the same `invoke` as on the CPU;
// the kernels that read Q8_1 activations share one quantization of each activation
// vector. Everything else is a kernel of model/forward_ops_cuda.cu: the embedding
// lookup (any weight type), RMSNorm, the biases and per-head norms, RoPE, attention,
// SwiGLU, and the sampler, so only the sampled token comes back to the host.
//
// The token and the position live in device memory, so one decode step is captured
// once as a CUDA graph (at the second step; the first runs op by op, so the kernels'
// one-time setup is done outside the capture) and replayed at every position after
// (attention reads the position when it runs and cuts its work to it). With op timing on, the step runs op by op
// with CUDA events between the ops, and NVTX ranges named after the ops for Nsight.
//
// With outlier routing in the plan, a routed matvec's vector is tested on the device
// (once per vector, as on the CPU) and the verdict picks the int8 kernel or its f32
// sibling: in the graph through an if/else node the test kernel's condition drives,
// op by op through the host, which reads the verdict back.
//
// Plain C++ header: g++-compiled code (the CLI, the tests) includes it. Built only
// with QMV_CUDA; the functions above GpuForward are plain host code and always built.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/forward.h"
#include "model/plan.h"
#include "model/sampler.h"

namespace qmv {

struct GpuForwardOptions {
  int context = 0;            // KV cache positions (0: the model's context length)
  bool cuda_graph = true;     // capture one decode step as a CUDA graph and replay it
  bool op_timing = false;     // CUDA events between the ops (the step then runs op by op)
  bool sync_each_op = false;  // debugging: synchronize after every op, so a fault names its op
  bool stack_gate_up = true;  // gate and up as one matvec where they can be (cuda::stack_gate_up)
  bool stack_qkv = true;      // q, k and v likewise (cuda::stack_qkv)
  // Each layer's head step and attention as one kernel that also merges the splits and
  // writes the Q8_1 copy of its output (cuda::launch_fused_attention): two to three
  // launches fewer per layer.
  bool fuse_attention = false;
  // Matvecs whose kernels can (the bulk-copy ones) launch as programmatic dependents of
  // the kernel before them and stream their weights while it finishes.
  bool overlap_weights = false;
  SamplerConfig sampler;      // greedy by default
};

// Device memory the GPU decode needs.
struct DeviceMemoryNeed {
  std::uint64_t weights = 0;   // every tensor the step reads, once
  std::uint64_t kv_cache = 0;  // keys and values, f32, every layer, `context` positions
  std::uint64_t scratch = 0;   // activations, attention partials, Q8_1 buffer, logits
  int context = 0;
  std::uint64_t total() const { return weights + kv_cache + scratch; }
};

// What is kept free beyond the need: the CUDA context's own allocations, the graph,
// the kernels' launch buffers.
inline constexpr std::uint64_t kDeviceMemoryReserve = 256ull << 20;

// The need for a model, plan and context on a device with `sm_count` SMs (the
// attention splits depend on it). Throws PlanError / ModelError as bind_gpu_plan.
DeviceMemoryNeed device_memory_need(const ModelConfig& c, const ModelWeights& w, const std::vector<PlannedMatvec>& plan,
                                    int context, int sm_count);
// Empty when the need plus the reserve fits in `free_bytes`; otherwise one line that
// names the sizes (weights + KV cache + scratch against the free memory) and what to try.
std::string device_memory_refusal(const DeviceMemoryNeed& need, std::uint64_t free_bytes, const std::string& device);

struct GpuMemoryError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class GpuForward {
 public:
  // `plan` is resolve_plan's output for these weights with CUDA kernels. Throws
  // PlanError for a plan that cannot run here (see bind_gpu_plan), GpuMemoryError when
  // the model does not fit, std::runtime_error for a CUDA failure or no device.
  GpuForward(const ModelConfig& config, const ModelWeights& weights, const std::vector<PlannedMatvec>& plan,
             const GpuForwardOptions& options = {});
  ~GpuForward();
  GpuForward(const GpuForward&) = delete;
  GpuForward& operator=(const GpuForward&) = delete;

  // Runs `token` at the next position and samples the next token on the device (the
  // sampler of the options); returns it. Throws ContextFull when the cache is full,
  // std::out_of_range for a token outside the vocabulary, std::runtime_error naming
  // the op for a CUDA error and for a non-finite logit.
  int step(int token);
  // The last step's logits, copied from the device (tests, `qmvlab logits`).
  std::span<const float> logits();
  int position() const;
  int context() const;
  void reset();

  // CUDA events between the ops from the next step on (the step then runs op by op,
  // not as a graph); off: the graph again, when the options enabled it.
  void set_op_timing(bool on);
  // The fused attention (GpuForwardOptions::fuse_attention) on or off from the next step
  // on. Each way keeps its own captured graph, so switching back and forth captures
  // each once; the first step of a way not yet run goes op by op, as the first step
  // does. The logits are the same bit for bit either way.
  void set_fuse_attention(bool on);
  bool fuse_attention() const;
  const StepTimes& times() const;
  double sample_seconds() const;  // the sampler's share, not a Op
  int timed_steps() const;
  void clear_times();
  // Outlier routing over every step so far (the op timing's steps too): per matvec
  // part the int8 calls that could be routed (routable) and those the test sent to the
  // f32 sibling (routed); calls[OutlierTest] counts the vectors tested. Empty when the
  // plan routes nothing.
  const StepTimes& routing() const;
  void clear_routing();

  // As CpuForward: bytes one step reads at position `pos` (weights, one embedding row,
  // the KV cache up to pos), the weights alone, and the weights of one part.
  std::uint64_t bytes_per_token(int pos) const;
  std::uint64_t weight_bytes() const;
  std::uint64_t part_weight_bytes(Op p) const;

  const DeviceMemoryNeed& memory() const;
  const std::string& device_name() const;
  double upload_seconds() const;
  bool graph_enabled() const;
  int attention_splits() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace qmv
