// The GPU decode step's own kernels. Their per-thread arithmetic is in
// model/gpu_math.h, which the CPU tests replay; this file holds the launch
// geometry, the shared memory and the warp / CTA reductions.
#include <cuda_runtime.h>

#include <string>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/quantize_q8_1_warp.cuh"
#include "model/gpu_math.h"
#include "model/forward_ops_cuda.h"

namespace qmv::cuda {
namespace {

__device__ __forceinline__ double warp_sum_double(double v) {
#pragma unroll
  for (int offset = kWarp / 2; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// ---------------------------------------------------------------------------------

__global__ void rope_table_kernel(const DecodeState* __restrict__ state, float* __restrict__ cos_table,
                                  float* __restrict__ sin_table, int rope_dim, float freq_base) {
  const int pos = state->pos;
  for (int i = threadIdx.x; i < rope_dim / 2; i += blockDim.x) rope_cos_sin(pos, i, rope_dim, freq_base, cos_table[i], sin_table[i]);
}

// One CTA: thread t takes elements t, t + kNormThreads, ... for the sum of squares;
// then warp w writes the 32-element blocks w, w + warps, ... of y and, where yq is
// given, quantizes each to Q8_1 for the int8 matvecs that read y next.
__global__ void __launch_bounds__(kNormThreads)
    rms_norm_kernel(float* __restrict__ x, const float* __restrict__ delta, const float* __restrict__ weight,
                    float* __restrict__ y, BlockQ8_1* __restrict__ yq, int n, float eps) {
  let_dependent_kernel_start();  // a matvec after it may stream its weights meanwhile
  constexpr int kWarps = kNormThreads / kWarp;
  __shared__ double warp_sums[kWarps];
  double ss = 0;
  for (int i = threadIdx.x; i < n; i += kNormThreads) {
    const float v = residual_sum(x, delta, i);
    if (delta) x[i] = v;
    ss += static_cast<double>(v) * v;
  }
  ss = warp_sum_double(ss);
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  if (lane == 0) warp_sums[warp] = ss;
  __syncthreads();  // also orders this CTA's writes of x before the reads below
  double total = 0;
  for (int w = 0; w < kWarps; ++w) total += warp_sums[w];
  const float scale = rms_scale(total, n, eps);
  const int blocks = n / kQ8_1Block;
  for (int b = warp; b < blocks; b += kWarps) {  // the bound is the warp's: shuffles see all lanes
    const int i = b * kQ8_1Block + lane;
    const float v = rms_apply(x[i], scale, weight[i]);
    y[i] = v;
    if (yq) quantize_q8_1_warp_block(v, lane, yq[b]);
  }
  for (int i = blocks * kQ8_1Block + threadIdx.x; i < n; i += kNormThreads) y[i] = rms_apply(x[i], scale, weight[i]);
}

// The head vector of task (kind, head) after bias, per-head norm and (q, k) RoPE, by
// one warp, into `h` (head_dim floats of shared memory); lane holds elements lane,
// lane + 32, ... while it works. The warp's lanes all call it.
__device__ void head_vector(const HeadStepArgs& a, HeadKind kind, int head, float* h) {
  const int lane = threadIdx.x % kWarp, hd = a.head_dim;
  const float *src, *bias, *norm;
  switch (kind) {
    case HeadKind::Q:
      src = a.q + head * hd;
      bias = a.bq ? a.bq + head * hd : nullptr;
      norm = a.q_norm;
      break;
    case HeadKind::K:
      src = a.k + head * hd;
      bias = a.bk ? a.bk + head * hd : nullptr;
      norm = a.k_norm;
      break;
    default:
      src = a.v + head * hd;
      bias = a.bv ? a.bv + head * hd : nullptr;
      norm = nullptr;
      break;
  }
  float vals[kMaxDimsPerLane];
  double ss = 0;
#pragma unroll
  for (int j = 0; j < kMaxDimsPerLane; ++j) {
    const int d = lane + kWarp * j;
    vals[j] = 0.0f;
    if (d < hd) {
      vals[j] = bias ? src[d] + bias[d] : src[d];
      ss += static_cast<double>(vals[j]) * vals[j];
    }
  }
  if (norm) {
    const float scale = rms_scale(warp_sum_double(ss), hd, a.eps);
#pragma unroll
    for (int j = 0; j < kMaxDimsPerLane; ++j) {
      const int d = lane + kWarp * j;
      if (d < hd) vals[j] = rms_apply(vals[j], scale, norm[d]);
    }
  }
#pragma unroll
  for (int j = 0; j < kMaxDimsPerLane; ++j) {
    const int d = lane + kWarp * j;
    if (d < hd) h[d] = vals[j];
  }
  if (kind == HeadKind::V) return;
  __syncwarp();
  const int half = a.rope_dim / 2;
  for (int i = lane; i < half; i += kWarp) {
    int ia, ib;
    rope_pair(a.interleaved, i, half, ia, ib);
    rope_rotate(h[ia], h[ib], a.rope_cos[i], a.rope_sin[i], h[ia], h[ib]);
  }
  __syncwarp();
}

// One warp per head task (head_task): the head vector in shared memory, then q back in
// place, k and v into the cache at the position.
__global__ void __launch_bounds__(kHeadWarpsPerCta* kWarp) head_step_kernel(HeadStepArgs a) {
  __shared__ float rotated[kHeadWarpsPerCta][kMaxHeadDim];
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int task = blockIdx.x * kHeadWarpsPerCta + warp;
  if (task >= head_tasks(a.n_head, a.n_head_kv)) return;  // whole warps leave together
  const int hd = a.head_dim, kv_width = a.n_head_kv * hd, pos = a.state->pos;
  int head;
  const HeadKind kind = head_task(task, a.n_head, a.n_head_kv, head);
  float* h = rotated[warp];
  head_vector(a, kind, head, h);
  __syncwarp();
  float* dst = kind == HeadKind::Q   ? a.q + head * hd
               : kind == HeadKind::K ? a.k_cache + static_cast<std::size_t>(pos) * kv_width + head * hd
                                     : a.v_cache + static_cast<std::size_t>(pos) * kv_width + head * hd;
  for (int d = lane; d < hd; d += kWarp) dst[d] = h[d];
}

// CTA (head, split)'s partial over positions [begin, end): its warps take every
// kAttnWarps-th position, the CTA merges its warps into its slot of a.partials. q is
// the head's (head_dim floats); at position `own` (-1: none) k and v come from k_own
// and v_own instead of the cache. Every thread of the CTA calls it.
__device__ void split_partial(const AttentionArgs& a, int head, int split, int begin, int end, const float* q,
                              int own, const float* k_own, const float* v_own) {
  __shared__ float warp_max[kAttnWarps], warp_sum_exp[kAttnWarps];
  __shared__ float warp_acc[kAttnWarps][kMaxHeadDim];
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int hd = a.head_dim, kv_width = a.n_head_kv * hd, group = a.n_head / a.n_head_kv;
  const int kv_off = (head / group) * hd;
  float qv[kMaxDimsPerLane], acc[kMaxDimsPerLane];
#pragma unroll
  for (int j = 0; j < kMaxDimsPerLane; ++j) {
    const int d = lane + kWarp * j;
    qv[j] = d < hd ? q[d] : 0.0f;
    acc[j] = 0.0f;
  }
  float max = -INFINITY, sum = 0.0f;
  for (int t = begin + warp; t < end; t += kAttnWarps) {
    const float* k = t == own ? k_own : a.k_cache + static_cast<std::size_t>(t) * kv_width + kv_off;
    const float* v = t == own ? v_own : a.v_cache + static_cast<std::size_t>(t) * kv_width + kv_off;
    float dot = 0.0f;
#pragma unroll
    for (int j = 0; j < kMaxDimsPerLane; ++j) {
      const int d = lane + kWarp * j;
      if (d < hd) dot += qv[j] * k[d];
    }
    float rescale, weight;
    online_softmax_add(max, sum, warp_sum(dot) * a.scale, rescale, weight);
#pragma unroll
    for (int j = 0; j < kMaxDimsPerLane; ++j) {
      const int d = lane + kWarp * j;
      if (d < hd) acc[j] = acc[j] * rescale + weight * v[d];
    }
  }
#pragma unroll
  for (int j = 0; j < kMaxDimsPerLane; ++j) {
    const int d = lane + kWarp * j;
    if (d < hd) warp_acc[warp][d] = acc[j];
  }
  if (lane == 0) {
    warp_max[warp] = max;
    warp_sum_exp[warp] = sum;
  }
  __syncthreads();
  float m = -INFINITY;
  for (int w = 0; w < kAttnWarps; ++w) m = fmaxf(m, warp_max[w]);
  float* out = a.partials + (static_cast<std::size_t>(head) * a.n_splits + split) * attention_partial_floats(hd);
  for (int d = threadIdx.x; d < hd; d += kAttnWarps * kWarp) {
    float o = 0.0f;
    for (int w = 0; w < kAttnWarps; ++w) o += warp_acc[w][d] * merge_scale(warp_max[w], m);
    out[2 + d] = o;
  }
  if (threadIdx.x == 0) {
    float l = 0.0f;
    for (int w = 0; w < kAttnWarps; ++w) l += warp_sum_exp[w] * merge_scale(warp_max[w], m);
    out[0] = m;
    out[1] = l;
  }
}

// The splits' partials of `head` merged (split 0 always holds position 0) into its
// output and, where yq is given, its Q8_1 blocks (head_dim a multiple of 32). `Load`
// reads a partial's float. Every thread of the CTA calls it.
template <class Load>
__device__ void merge_head(const AttentionArgs& a, int head, BlockQ8_1* yq, Load load) {
  const int hd = a.head_dim, stride = attention_partial_floats(hd);
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const float* parts = a.partials + static_cast<std::size_t>(head) * a.n_splits * stride;
  float m = -INFINITY;
  for (int s = 0; s < a.n_splits; ++s) m = fmaxf(m, load(parts + s * stride));
  float l = 0.0f;
  for (int s = 0; s < a.n_splits; ++s) l += load(parts + s * stride + 1) * merge_scale(load(parts + s * stride), m);
  const auto merged = [&](int d) {
    float o = 0.0f;
    for (int s = 0; s < a.n_splits; ++s) o += load(parts + s * stride + 2 + d) * merge_scale(load(parts + s * stride), m);
    return o / l;
  };
  if (yq) {
    const int blocks = hd / kQ8_1Block;
    for (int b = warp; b < blocks; b += kAttnWarps) {  // the bound is the warp's: shuffles see all lanes
      const float o = merged(b * kQ8_1Block + lane);
      a.out[head * hd + b * kQ8_1Block + lane] = o;
      quantize_q8_1_warp_block(o, lane, yq[head * blocks + b]);
    }
  } else {
    for (int d = threadIdx.x; d < hd; d += kAttnWarps * kWarp) a.out[head * hd + d] = merged(d);
  }
}

// CTA (head, split): the split's partial of the rotated q in memory over the cache.
__global__ void __launch_bounds__(kAttnWarps* kWarp) attention_partial_kernel(AttentionArgs a) {
  const int head = blockIdx.x, split = blockIdx.y;
  int begin, end;
  attention_split_range(a.state->pos + 1, a.n_splits, split, begin, end);
  split_partial(a, head, split, begin, end, a.q + head * a.head_dim, -1, nullptr, nullptr);
}

// One CTA per head: the splits merged.
__global__ void __launch_bounds__(kAttnWarps* kWarp) attention_merge_kernel(AttentionArgs a) {
  let_dependent_kernel_start();
  merge_head(a, blockIdx.x, nullptr, [](const float* p) { return *p; });
}

// launch_fused_attention's kernel: CTA (head, split) as attention_partial_kernel, with
// the head step folded in and the merge made by the split that finishes last.
// - q: warp 0 builds the head's q in shared memory (the q in global memory stays as the
//   matvec wrote it);
// - the step's own position: the split holding it builds its KV head's k and v (warps 1
//   and 2) and reads them from shared memory there; of the q heads that share the KV
//   head, the first also stores them into the cache for the steps that follow. No CTA
//   reads a cache entry that another writes in this launch.
// - the merge: every split stores its partial, then counts itself done on its head's
//   counter; the last one merges the partials in split order (the same sums whichever
//   CTA it is), writes the head's output and its Q8_1 blocks, and zeroes the counter.
__global__ void __launch_bounds__(kAttnWarps* kWarp) fused_attention_kernel(FusedAttentionArgs f) {
  static_assert(kAttnWarps >= 3, "warps 0, 1, 2 build q, k, v");
  let_dependent_kernel_start();
  const AttentionArgs& a = f.attn;
  __shared__ float q_s[kMaxHeadDim], k_s[kMaxHeadDim], v_s[kMaxHeadDim];
  __shared__ int merges;
  const int head = blockIdx.x, split = blockIdx.y, warp = threadIdx.x / kWarp;
  const int hd = a.head_dim, group = a.n_head / a.n_head_kv, kv_head = head / group, pos = a.state->pos;
  int begin, end;
  attention_split_range(pos + 1, a.n_splits, split, begin, end);
  const bool holds_pos = begin <= pos && pos < end;
  if (warp == 0) head_vector(f.head, HeadKind::Q, head, q_s);
  if (holds_pos && warp == 1) head_vector(f.head, HeadKind::K, kv_head, k_s);
  if (holds_pos && warp == 2) head_vector(f.head, HeadKind::V, kv_head, v_s);
  __syncthreads();
  if (holds_pos && head % group == 0) {
    const std::size_t at = static_cast<std::size_t>(pos) * a.n_head_kv * hd + kv_head * hd;
    for (int d = threadIdx.x; d < hd; d += kAttnWarps * kWarp) {
      f.head.k_cache[at + d] = k_s[d];
      f.head.v_cache[at + d] = v_s[d];
    }
  }
  split_partial(a, head, split, begin, end, q_s, holds_pos ? pos : -1, k_s, v_s);

  // Counted done only once every thread's partial is visible to the other CTAs.
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) merges = atomicAdd(&f.split_counters[head], 1u) == static_cast<unsigned>(a.n_splits - 1);
  __syncthreads();
  if (!merges) return;
  __threadfence();
  // The other splits' partials bypass L1, which holds nothing of them but is not
  // coherent with their writers.
  merge_head(a, head, f.out_q8_1, [](const float* p) { return __ldcg(p); });
  if (threadIdx.x == 0) f.split_counters[head] = 0;
}

// A warp per 32-element block: gate = silu(gate) * up and, where yq is given, the
// block's Q8_1 for the int8 down matvec; a tail shorter than a block by thread.
__global__ void swiglu_kernel(float* __restrict__ gate, const float* __restrict__ up, BlockQ8_1* __restrict__ yq,
                              int n) {
  let_dependent_kernel_start();
  const int lane = threadIdx.x % kWarp;
  const int b = (blockIdx.x * blockDim.x + threadIdx.x) / kWarp;
  const int i = b * kQ8_1Block + lane;
  if (b < n / kQ8_1Block) {  // the whole warp or none of it
    const float v = swiglu(gate[i], up[i]);
    gate[i] = v;
    if (yq) quantize_q8_1_warp_block(v, lane, yq[b]);
  } else if (i < n) {
    gate[i] = swiglu(gate[i], up[i]);
  }
}

// One CTA: thread t folds elements t, t + kOutlierThreads, ...; warps then the CTA
// merge the partials; thread 0 writes the verdict (and sets the conditions of the
// graph nodes that read the vector).
__global__ void __launch_bounds__(kOutlierThreads)
    outlier_test_kernel(const float* __restrict__ x, int n, double k, int* __restrict__ verdict,
                        const unsigned long long* __restrict__ route_row) {
  __shared__ OutlierPartial warp_partials[kOutlierThreads / kWarp];
  OutlierPartial p;
  for (int i = threadIdx.x; i < n; i += kOutlierThreads) outlier_add(p, x[i]);
#pragma unroll
  for (int offset = kWarp / 2; offset > 0; offset >>= 1) {
    OutlierPartial other;
    other.peak = __shfl_xor_sync(0xffffffffu, p.peak, offset);
    other.sum_sq = __shfl_xor_sync(0xffffffffu, p.sum_sq, offset);
    other.nonfinite = __shfl_xor_sync(0xffffffffu, static_cast<int>(p.nonfinite), offset) != 0;
    outlier_merge(p, other);
  }
  if (threadIdx.x % kWarp == 0) warp_partials[threadIdx.x / kWarp] = p;
  __syncthreads();
  if (threadIdx.x != 0) return;
  OutlierPartial total;
  for (int w = 0; w < kOutlierThreads / kWarp; ++w) outlier_merge(total, warp_partials[w]);
  const bool trips = outlier_trips(total, n, k);
  *verdict = trips ? 1 : 0;
  if (route_row)
    for_each_route_handle(route_row, [&](cudaGraphConditionalHandle h) { cudaGraphSetConditional(h, trips ? 1u : 0u); });
}

// The device side of sample_tokens' team: each thread runs its own index.
struct DeviceTeam {
  template <class Fn>
  __device__ void each(Fn&& fn) {
    fn(static_cast<int>(threadIdx.x));
  }
  __device__ void sync() { __syncthreads(); }
  __device__ void add(unsigned* a, unsigned v) { atomicAdd(a, v); }
  __device__ void add(fixed_mass* a, fixed_mass v) { atomicAdd(a, v); }
};

__global__ void __launch_bounds__(kSampleThreads)
    sample_kernel(const float* __restrict__ logits, int n, SampleParams params, DecodeState* state) {
  __shared__ SampleScratch scratch;
  DeviceTeam team;
  const int position = state->pos;
  const int token = sample_tokens(team, scratch, logits, n, params, position);
  __syncthreads();  // every thread has read the position before it moves on
  if (threadIdx.x == 0) {
    state->sampled = token;
    state->pos = position + 1;
  }
}

cudaStream_t as_stream(void* s) { return static_cast<cudaStream_t>(s); }

}  // namespace

Status launch_rope_table(const DecodeState* state, float* cos_table, float* sin_table, int rope_dim, float freq_base,
                         void* stream) {
  return launch_checked("rope_table", [&] {
    rope_table_kernel<<<1, 128, 0, as_stream(stream)>>>(state, cos_table, sin_table, rope_dim, freq_base);
  });
}

Status launch_rms_norm(float* x, const float* delta, const float* weight, float* y, BlockQ8_1* yq, int n, float eps,
                       void* stream) {
  if (yq && n % kQ8_1Block != 0)
    return Status::Error("rms_norm: a Q8_1 copy needs a multiple of 32 values, not " + std::to_string(n));
  return launch_checked("rms_norm", [&] {
    rms_norm_kernel<<<1, kNormThreads, 0, as_stream(stream)>>>(x, delta, weight, y, yq, n, eps);
  });
}

Status launch_head_step(const HeadStepArgs& a, void* stream) {
  if (a.head_dim > kMaxHeadDim || a.rope_dim > a.head_dim)
    return Status::Error("head_step: head_dim " + std::to_string(a.head_dim) + " / rope_dim " +
                         std::to_string(a.rope_dim) + " outside what the kernel holds (head_dim <= " +
                         std::to_string(kMaxHeadDim) + ")");
  const int tasks = head_tasks(a.n_head, a.n_head_kv);
  return launch_checked("head_step", [&] {
    head_step_kernel<<<(tasks + kHeadWarpsPerCta - 1) / kHeadWarpsPerCta, kHeadWarpsPerCta * kWarp, 0,
                       as_stream(stream)>>>(a);
  });
}

Status launch_attention(const AttentionArgs& a, void* stream) {
  if (a.head_dim > kMaxHeadDim)
    return Status::Error("attention: head_dim " + std::to_string(a.head_dim) + " above " + std::to_string(kMaxHeadDim));
  if (Status st = launch_checked("attention_partial", [&] {
        attention_partial_kernel<<<dim3(a.n_head, a.n_splits), kAttnWarps * kWarp, 0, as_stream(stream)>>>(a);
      });
      !st.ok())
    return st;
  return launch_checked("attention_merge", [&] {
    attention_merge_kernel<<<a.n_head, kAttnWarps * kWarp, 0, as_stream(stream)>>>(a);
  });
}

Status launch_fused_attention(const FusedAttentionArgs& f, void* stream) {
  const AttentionArgs& a = f.attn;
  if (a.head_dim > kMaxHeadDim || f.head.rope_dim > a.head_dim)
    return Status::Error("fused attention: head_dim " + std::to_string(a.head_dim) + " / rope_dim " +
                         std::to_string(f.head.rope_dim) + " outside what the kernel holds (head_dim <= " +
                         std::to_string(kMaxHeadDim) + ")");
  if (f.out_q8_1 && a.head_dim % kQ8_1Block != 0)
    return Status::Error("fused attention: a Q8_1 copy per head needs head_dim a multiple of 32, not " +
                         std::to_string(a.head_dim));
  if (!f.split_counters) return Status::Error("fused attention: no split counters");
  return launch_checked("fused_attention", [&] {
    fused_attention_kernel<<<dim3(a.n_head, a.n_splits), kAttnWarps * kWarp, 0, as_stream(stream)>>>(f);
  });
}

Status launch_swiglu(float* gate, const float* up, BlockQ8_1* yq, int n, void* stream) {
  if (yq && n % kQ8_1Block != 0)
    return Status::Error("swiglu: a Q8_1 copy needs a multiple of 32 values, not " + std::to_string(n));
  const int threads = 256, ctas = (n + threads - 1) / threads;
  return launch_checked("swiglu", [&] {
    swiglu_kernel<<<ctas, threads, 0, as_stream(stream)>>>(gate, up, yq, n);
  });
}

Status launch_outlier_test(const float* x, int n, double k, int* verdict, const unsigned long long* route_row,
                           void* stream) {
  return launch_checked("outlier_test", [&] {
    outlier_test_kernel<<<1, kOutlierThreads, 0, as_stream(stream)>>>(x, n, k, verdict, route_row);
  });
}

Status launch_sample(const float* logits, int n, const SampleParams& params, DecodeState* state, void* stream) {
  return launch_checked("sample", [&] {
    sample_kernel<<<1, kSampleThreads, 0, as_stream(stream)>>>(logits, n, params, state);
  });
}

}  // namespace qmv::cuda
