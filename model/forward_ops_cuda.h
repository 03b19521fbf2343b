// The GPU decode step's own kernels (everything but the matvecs, which are registered
// kernels, and the Q8_1 quantizer): launch functions behind a plain C++ header, so
// the g++-compiled GpuForward can call them. Each launches on `stream` (a
// cudaStream_t), reads the token and position from the DecodeState in device memory
// (so one captured CUDA graph serves every step), checks the launch and returns a
// Status naming the kernel. The arithmetic is model/gpu_math.h.
#pragma once

#include <cstdint>

#include "kernels/kernel.h"
#include "model/gpu_math.h"

namespace qmv::cuda {

// cos / sin of every rotated pair at the step's position: rope_dim / 2 of each.
Status launch_rope_table(const DecodeState* state, float* cos_table, float* sin_table, int rope_dim, float freq_base,
                         void* stream);

// x += delta (when delta is not null), then y = x / rms(x) * weight; n values. Where
// yq is not null, also y as Q8_1 blocks (quantize_row_q8_1's bytes; n a multiple of 32).
Status launch_rms_norm(float* x, const float* delta, const float* weight, float* y, BlockQ8_1* yq, int n, float eps,
                       void* stream);

// After the q, k, v matvecs: biases (qwen2), per-head q/k RMSNorm (qwen3), RoPE of q
// in place and of k, and k and v stored into this layer's cache at the position.
struct HeadStepArgs {
  float* q = nullptr;        // n_head * head_dim, rotated in place
  const float* k = nullptr;  // n_head_kv * head_dim
  const float* v = nullptr;
  const float *bq = nullptr, *bk = nullptr, *bv = nullptr;  // null: no bias
  const float *q_norm = nullptr, *k_norm = nullptr;         // null: no per-head norm
  const float *rope_cos = nullptr, *rope_sin = nullptr;
  float* k_cache = nullptr;  // this layer's [context][n_head_kv * head_dim]
  float* v_cache = nullptr;
  const DecodeState* state = nullptr;
  int n_head = 0, n_head_kv = 0, head_dim = 0, rope_dim = 0;
  bool interleaved = true;  // llama's adjacent pairs; false: qwen's halves
  float eps = 1e-5f;
};
Status launch_head_step(const HeadStepArgs& a, void* stream);

// Causal GQA attention of the rotated q over the cache at positions 0..pos, softmax
// in f32 at `scale`, split over the positions into n_splits partials (each
// attention_partial_floats(head_dim) floats per head) merged into `out`.
struct AttentionArgs {
  const float* q = nullptr;
  const float* k_cache = nullptr;  // this layer's
  const float* v_cache = nullptr;
  float* partials = nullptr;  // n_head * n_splits * attention_partial_floats(head_dim)
  float* out = nullptr;       // n_head * head_dim
  const DecodeState* state = nullptr;
  int n_head = 0, n_head_kv = 0, head_dim = 0, n_splits = 1;
  float scale = 1.0f;
};
Status launch_attention(const AttentionArgs& a, void* stream);

// head_step and attention as one kernel: CTA (head, split) builds its q head itself,
// the split holding the position builds that position's k and v (and stores them into
// the cache), and the split that finishes last merges the head and, where out_q8_1 is
// given (head_dim a multiple of 32), writes the head's Q8_1 blocks for the int8 matvec
// that reads the output next. q in memory is left as the matvec wrote it.
struct FusedAttentionArgs {
  HeadStepArgs head;
  AttentionArgs attn;
  BlockQ8_1* out_q8_1 = nullptr;
  unsigned* split_counters = nullptr;  // n_head of them: zero before a launch, zero after it
};
Status launch_fused_attention(const FusedAttentionArgs& a, void* stream);

// gate = silu(gate) * up, n values; where yq is not null, also the result as Q8_1
// blocks (n a multiple of 32).
Status launch_swiglu(float* gate, const float* up, BlockQ8_1* yq, int n, void* stream);

// Outlier routing's test of the n-value vector x at k (gpu_math.h): writes
// 1 (trips: its int8 readers run their f32 siblings) or 0 to *verdict and, when
// `route_row` (device memory, a row of the route table) is given, sets each
// conditional handle of the row to the same value, so the captured graph's if/else
// nodes pick the kernel on the device. Null outside a graph: setting a handle from a
// kernel that no graph launched is undefined.
Status launch_outlier_test(const float* x, int n, double k, int* verdict, const unsigned long long* route_row,
                           void* stream);

// Samples from the n logits into state->sampled, then advances state->pos.
Status launch_sample(const float* logits, int n, const SampleParams& params, DecodeState* state, void* stream);

}  // namespace qmv::cuda
