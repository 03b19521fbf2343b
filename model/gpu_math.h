// The arithmetic of the GPU decode step's own kernels (model/forward_ops_cuda.cu):
// RMSNorm, RoPE, the per-head bias / norm / rotation, attention with an online
// softmax, SwiGLU and the sampler. Everything a thread computes is a host+device
// function here, so the CPU tests replay each kernel's thread mapping and compare with
// the CPU forward pass (model/forward.cpp) on random data, without a GPU.
//
// Where the CPU forward computes a value with plain float operations (RMSNorm's scale
// and product, RoPE's rotation), the same operations are written with mul_rn /
// add_rn, so nvcc cannot contract them into fused multiply-adds: those values are then
// the CPU's bit for bit. Reductions (dot products, sums of squares) are summed in the
// GPU's own order and differ from the CPU only by rounding.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/cuda/dequantize_value.h"

namespace qmv::cuda {

// What the decode step keeps in device memory between kernels, so a captured CUDA
// graph serves every position: the token and position are read when the kernels run.
struct DecodeState {
  int token = 0;    // the token this step runs (copied in from the host before the step)
  int pos = 0;      // its position; the sampler advances it at the end of the step
  int sampled = 0;  // the token the step sampled, or -1 - i when logit i was not finite
  int unused = 0;
};

// ---------------------------------------------------------------------------------
// RMSNorm: y = x / rms(x) * weight, one CTA of kNormThreads; thread t takes elements
// t, t + kNormThreads, ... The sum of squares is accumulated in double, as on the CPU.
// A fused residual add comes first when `delta` is given: x += delta, then the norm of
// the new x. A whole CTA of 1024 threads: the norm is a serial step of the decode, and
// its Q8_1 copy (one warp per 32-value block) spreads over 32 warps.

inline constexpr int kNormThreads = 1024;

QMV_HD float residual_sum(const float* x, const float* delta, int i) { return delta ? x[i] + delta[i] : x[i]; }

QMV_HD float rms_scale(double sum_squares, int n, float eps) {
  return static_cast<float>(1.0 / sqrt(sum_squares / n + eps));
}

QMV_HD float rms_apply(float v, float scale, float weight) { return mul_rn(mul_rn(v, scale), weight); }

// ---------------------------------------------------------------------------------
// RoPE. Angles in double (at long positions float loses the low bits of pos * freq),
// one table of cos / sin per step; the rotation of pair i of a head takes elements
// (2i, 2i+1) for the interleaved (llama) style and (i, i + rope_dim/2) for the halves
// (NeoX: qwen2, qwen3) style.

QMV_HD void rope_cos_sin(int pos, int i, int rope_dim, float freq_base, float& c, float& s) {
  const double theta = pos * pow(static_cast<double>(freq_base), -2.0 * i / rope_dim);
  c = static_cast<float>(cos(theta));
  s = static_cast<float>(sin(theta));
}

QMV_HD void rope_pair(bool interleaved, int i, int half, int& a, int& b) {
  a = interleaved ? 2 * i : i;
  b = interleaved ? 2 * i + 1 : i + half;
}

QMV_HD void rope_rotate(float x0, float x1, float c, float s, float& y0, float& y1) {
  y0 = add_rn(mul_rn(x0, c), -mul_rn(x1, s));
  y1 = add_rn(mul_rn(x0, s), mul_rn(x1, c));
}

// ---------------------------------------------------------------------------------
// The per-head step after the q, k, v matvecs, one warp per head: tasks 0..n_head-1
// are the q heads (bias, q norm, RoPE, in place), then n_head_kv k heads (bias, k
// norm, RoPE, stored into the cache at the position), then n_head_kv v heads (bias,
// stored into the cache). Lane `lane` holds elements lane, lane + 32, ... of the head.

inline constexpr int kHeadWarpsPerCta = 4;
inline constexpr int kMaxHeadDim = 256;
inline constexpr int kMaxDimsPerLane = kMaxHeadDim / 32;

enum class HeadKind { Q, K, V };

QMV_HD HeadKind head_task(int task, int n_head, int n_head_kv, int& head) {
  if (task < n_head) {
    head = task;
    return HeadKind::Q;
  }
  if (task < n_head + n_head_kv) {
    head = task - n_head;
    return HeadKind::K;
  }
  head = task - n_head - n_head_kv;
  return HeadKind::V;
}

QMV_HD int head_tasks(int n_head, int n_head_kv) { return n_head + 2 * n_head_kv; }

// ---------------------------------------------------------------------------------
// Attention for one query over the cached positions 0..pos, split over the positions
// ("flash decoding"): CTA (head, split) takes the split's stretch of positions, its
// kAttnWarps warps take every kAttnWarps-th position of it, each lane a slice of the
// head's dimensions (as the head kernel); a warp keeps a running max, sum and
// weighted sum of values (online softmax), the CTA merges its warps, and a second
// kernel merges the splits per head. The stretches are cut from the position read in
// device memory when the kernel runs, so the same launch serves every position.

inline constexpr int kAttnWarps = 4;

// Floats of one (head, split) partial result: max, sum, then head_dim weighted values.
QMV_HD int attention_partial_floats(int head_dim) { return head_dim + 2; }

QMV_HD void attention_split_range(int n_pos, int n_splits, int split, int& begin, int& end) {
  const int chunk = (n_pos + n_splits - 1) / n_splits;
  begin = split * chunk < n_pos ? split * chunk : n_pos;
  end = begin + chunk < n_pos ? begin + chunk : n_pos;
}

// Adds a score to a running (max, sum): the factor the running weighted sum must be
// scaled by, and the weight of the new value. Starts from max = -inf, sum = 0.
QMV_HD void online_softmax_add(float& max, float& sum, float score, float& rescale, float& weight) {
  const float m = fmaxf(max, score);
  rescale = expf(max - m);
  weight = expf(score - m);
  sum = sum * rescale + weight;
  max = m;
}

// The factor a partial with running max `part_max` takes in a merge under `max`; an
// empty partial (max -inf) contributes nothing.
QMV_HD float merge_scale(float part_max, float max) { return part_max == -INFINITY ? 0.0f : expf(part_max - max); }

// ---------------------------------------------------------------------------------
// SwiGLU, as the CPU: silu(gate) * up.

QMV_HD float swiglu(float gate, float up) { return gate / (1.0f + expf(-gate)) * up; }

// ---------------------------------------------------------------------------------
// The outlier test of outlier routing (kernels/outliers.h): max |x| > k * rms(x),
// decided as max^2 * n > k^2 * sum x^2 in double, and a non-finite value always trips
// it. One CTA of kOutlierThreads; thread t folds elements t, t + kOutlierThreads, ...
// into a partial, the CTA merges the partials. Every square is exact in double, so
// the verdict differs from the CPU's only where the sum's rounding (about n * 1e-16
// relative) straddles the threshold.

inline constexpr int kOutlierThreads = 256;

struct OutlierPartial {
  float peak = 0.0f;      // max |x| over the finite values
  double sum_sq = 0.0;    // sum x^2
  bool nonfinite = false;
};

QMV_HD void outlier_add(OutlierPartial& p, float v) {
  std::uint32_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  if ((bits & 0x7f800000u) == 0x7f800000u) {  // all exponent bits: an infinity or a NaN
    p.nonfinite = true;
    return;
  }
  const float a = fabsf(v);
  p.peak = a > p.peak ? a : p.peak;
  p.sum_sq += static_cast<double>(v) * v;
}

QMV_HD void outlier_merge(OutlierPartial& into, const OutlierPartial& p) {
  into.peak = p.peak > into.peak ? p.peak : into.peak;
  into.sum_sq += p.sum_sq;
  into.nonfinite = into.nonfinite || p.nonfinite;
}

QMV_HD bool outlier_trips(const OutlierPartial& p, std::int64_t n, double k) {
  if (p.nonfinite) return true;
  return static_cast<double>(p.peak) * static_cast<double>(p.peak) * static_cast<double>(n) > k * k * p.sum_sq;
}

// In a captured CUDA graph every routed matvec is its own if/else node, and CUDA lets
// one conditional handle drive one node only. So a test sets the handles of all the
// nodes that read its vector: its row of the route table, in device memory, holds
// their count (word 0) and the handles (cudaGraphConditionalHandle values) after it.
inline constexpr int kRouteHandlesPerTest = 4;  // q, k, v read one vector: 3 at most
inline constexpr int kRouteRowWords = 1 + kRouteHandlesPerTest;

// Calls set(handle) for each handle of a route table row.
template <class Set>
QMV_HD void for_each_route_handle(const unsigned long long* row, Set&& set) {
  const unsigned long long count = row[0] < kRouteHandlesPerTest ? row[0] : kRouteHandlesPerTest;
  for (unsigned long long j = 0; j < count; ++j) set(row[1 + j]);
}

// ---------------------------------------------------------------------------------
// The sampler: greedy (argmax, the lowest index among equal maxima, as the CPU
// sampler) or temperature sampling restricted by top-k and top-p, in one CTA of
// kSampleThreads threads over the logits in device memory, so only the token goes
// back to the host.
//
// Temperature sampling keeps exactly the tokens the CPU sampler keeps: top-k the k
// largest logits (ties by lower index), top-p the shortest run of them, in
// decreasing order, whose probability reaches p. Neither sorts: the k-th largest
// logit and the top-p threshold are found by a radix select over the logits' bits
// (4 passes of 8 bits, a 256-bin histogram each), and ties at a threshold are ranked
// by index with a prefix sum over the threads' contiguous chunks. Weights are
// exp((logit - max) / T) in fixed point (2^40 = probability 1 relative to the max), so
// every sum is an integer: the same for any order of atomic adds, and the draw,
// floor(u * total) walked through the kept tokens in index order, has no rounding
// edge. u comes from a counter-based hash of (seed, position): the same run repeats
// for a seed, graph or no graph. (The token sequence differs from the CPU sampler's,
// whose generator is std::mt19937_64; the distribution is the same.)

inline constexpr int kSampleThreads = 1024;
inline constexpr int kRadixBins = 256;
using fixed_mass = unsigned long long;  // what atomicAdd takes for 64-bit integers
inline constexpr double kFixedOne = 1099511627776.0;  // 2^40

struct SampleParams {
  float temperature = 0.0f;  // 0: greedy
  int top_k = 0;             // 0: all
  float top_p = 1.0f;        // 1: all
  std::uint64_t seed = 0;
};

QMV_HD bool is_greedy(const SampleParams& p) { return p.temperature == 0.0f || p.top_k == 1; }

struct Candidate {
  float value;
  int index;
};

// True when (v, i) beats (best_v, best_i): larger, or as large with a lower index.
QMV_HD bool better_candidate(float v, int i, float best_v, int best_i) {
  return v > best_v || (v == best_v && i < best_i);
}

QMV_HD bool finite(float v) { return v - v == 0.0f; }  // false for inf and NaN

// Float bits mapped so that unsigned order is float order (for finite values). -0
// takes +0's key: they compare equal, so they tie by index, as in the CPU sampler.
QMV_HD std::uint32_t order_key(float f) {
  std::uint32_t bits;
#if defined(__CUDA_ARCH__)
  bits = __float_as_uint(f);
#else
  std::memcpy(&bits, &f, sizeof bits);
#endif
  if (bits == 0x80000000u) bits = 0;
  return (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);
}

// Digit of radix pass `pass` (0: the top 8 bits) and the mask of the digits fixed
// before that pass.
QMV_HD int radix_digit(std::uint32_t key, int pass) { return static_cast<int>((key >> (24 - 8 * pass)) & 0xffu); }
QMV_HD std::uint32_t radix_mask_before(int pass) { return pass == 0 ? 0u : ~0u << (32 - 8 * pass); }

QMV_HD fixed_mass fixed_weight(float logit, float max_logit, float temperature) {
  return static_cast<fixed_mass>(static_cast<double>(expf((logit - max_logit) / temperature)) * kFixedOne);
}

// Thread t's contiguous chunk of n values.
QMV_HD void sample_chunk(int t, int n, int& begin, int& end) {
  const int chunk = (n + kSampleThreads - 1) / kSampleThreads;
  begin = t * chunk < n ? t * chunk : n;
  end = begin + chunk < n ? begin + chunk : n;
}

// SplitMix64: a counter-based generator, the same on host and device.
QMV_HD std::uint64_t splitmix64(std::uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Uniform in [0, 1) from (seed, counter), 53 random bits.
QMV_HD double uniform01(std::uint64_t seed, std::uint64_t counter) {
  return static_cast<double>(splitmix64(splitmix64(seed) ^ counter) >> 11) * (1.0 / 9007199254740992.0);
}

// The radix select's state: the digits fixed so far (prefix under mask) and, for the
// select by count, how many of the largest keys with that prefix are still wanted;
// for the select by mass, the mass above the prefix and the mass wanted.
struct CountSelect {
  std::uint32_t prefix = 0, mask = 0;
  unsigned remaining = 0;
};
struct MassSelect {
  std::uint32_t prefix = 0, mask = 0;
  fixed_mass above = 0, target = 0;
};

// After a pass's histogram: the bin, from the top, that holds the remaining-th
// largest key; the counts of the bins above it leave `remaining`.
QMV_HD void select_by_count(const unsigned* hist, int pass, CountSelect& s) {
  int bin = 0;
  for (int b = kRadixBins - 1; b >= 0; --b) {
    if (hist[b] >= s.remaining) {
      bin = b;
      break;
    }
    s.remaining -= hist[b];
  }
  s.prefix |= static_cast<std::uint32_t>(bin) << (24 - 8 * pass);
  s.mask = radix_mask_before(pass + 1);
}

// After a pass's histogram of masses: the bin, from the top, where the mass above
// plus the bin's reaches the target (the lowest non-empty bin when rounding leaves
// the target out of reach); the masses of the bins above it go into `above`.
QMV_HD void select_by_mass(const fixed_mass* mass, const unsigned* count, int pass, MassSelect& s) {
  int lowest = kRadixBins - 1;
  for (int b = 0; b < kRadixBins; ++b) {
    if (count[b]) {
      lowest = b;
      break;
    }
  }
  int bin = lowest;
  for (int b = kRadixBins - 1; b > lowest; --b) {
    if (!count[b]) continue;
    if (s.above + mass[b] >= s.target) {
      bin = b;
      break;
    }
    s.above += mass[b];
  }
  s.prefix |= static_cast<std::uint32_t>(bin) << (24 - 8 * pass);
  s.mask = radix_mask_before(pass + 1);
}

// Which tokens survive top-k and top-p, once their thresholds are known. A token at
// a threshold is kept by its rank among the ties in index order: top-k keeps the
// first take_k ties, top-p those that start before the kept mass reaches the target.
struct KeepRule {
  float max_logit = 0, temperature = 1;
  bool top_k = false;
  std::uint32_t tau_k = 0;
  unsigned take_k = 0;
  bool top_p = false;
  std::uint32_t tau_p = 0;
  fixed_mass above_p = 0, target_p = 0;
};

// Walks thread t's chunk in index order and calls fn(i, key, weight, kept_by_k,
// kept) for each token, where tie_k / tie_p are the ranks of the chunk's first
// tie (count at tau_k; mass at tau_p) among all the threads' ties before it.
template <class Fn>
QMV_HD void walk_chunk(const float* logits, int n, int t, const KeepRule& r, unsigned tie_k, fixed_mass tie_p, Fn&& fn) {
  int begin, end;
  sample_chunk(t, n, begin, end);
  for (int i = begin; i < end; ++i) {
    const float v = logits[i];
    const std::uint32_t key = order_key(v);
    bool kept_k = true;
    if (r.top_k) {
      kept_k = key > r.tau_k;
      if (key == r.tau_k) kept_k = tie_k++ < r.take_k;
    }
    const fixed_mass w = kept_k ? fixed_weight(v, r.max_logit, r.temperature) : 0;
    bool kept = kept_k;
    if (kept_k && r.top_p) {
      kept = key > r.tau_p;
      if (key == r.tau_p) {
        kept = r.above_p + tie_p < r.target_p;
        tie_p += w;
      }
    }
    fn(i, key, w, kept_k, kept);
  }
}

// What the sampler's CTA shares. One instance in shared memory on the device; the
// host replay keeps one on the heap.
struct SampleScratch {
  Candidate best[kSampleThreads];
  int bad[kSampleThreads];
  unsigned tie_k[kSampleThreads];
  fixed_mass tie_p[kSampleThreads];
  fixed_mass mass[kSampleThreads];
  unsigned hist[kRadixBins];
  fixed_mass hist_mass[kRadixBins];
  fixed_mass total;
  int pick;
};

// A reduction over the threads' slots a[0..kSampleThreads), in a tree: a[0] ends with
// the result. Every caller syncs before (the slots are written) and the tree syncs
// after every level.
template <class Team, class T, class Combine>
QMV_HD void tree_reduce(Team& team, T* a, Combine combine) {
  for (int stride = kSampleThreads / 2; stride > 0; stride /= 2) {
    team.each([&](int t) {
      if (t < stride) a[t] = combine(a[t], a[t + stride]);
    });
    team.sync();
  }
}

// Exclusive prefix sum over the threads' slots (work-efficient up-sweep / down-sweep
// in place); *total gets the sum of all.
template <class Team, class T>
QMV_HD void exclusive_scan(Team& team, T* a, T* total) {
  for (int d = 1; d < kSampleThreads; d *= 2) {
    team.each([&](int t) {
      const int i = (t + 1) * 2 * d - 1;
      if (i < kSampleThreads) a[i] += a[i - d];
    });
    team.sync();
  }
  team.each([&](int t) {
    if (t == 0) {
      *total = a[kSampleThreads - 1];
      a[kSampleThreads - 1] = 0;
    }
  });
  team.sync();
  for (int d = kSampleThreads / 2; d >= 1; d /= 2) {
    team.each([&](int t) {
      const int i = (t + 1) * 2 * d - 1;
      if (i < kSampleThreads) {
        const T left = a[i - d];
        a[i - d] = a[i];
        a[i] += left;
      }
    });
    team.sync();
  }
}

// The whole sampler. `team` runs a phase for the threads of the CTA: on the device
// each thread runs its own index and sync() is a barrier; the host replay runs every
// index in turn. Values every thread computes alike (the selects) are plain locals.
// Returns the token (or -1 - i for a non-finite logit i); the caller writes it.
template <class Team>
QMV_HD int sample_tokens(Team& team, SampleScratch& s, const float* logits, int n, const SampleParams& p,
                         int position) {
  // Pass 1: the largest logit (lowest index among equals) and the first non-finite one.
  team.each([&](int t) {
    Candidate best{-INFINITY, n};
    int bad = n;
    for (int i = t; i < n; i += kSampleThreads) {
      const float v = logits[i];
      if (!finite(v)) {
        if (i < bad) bad = i;
      } else if (better_candidate(v, i, best.value, best.index)) {
        best = {v, i};
      }
    }
    s.best[t] = best;
    s.bad[t] = bad;
  });
  team.sync();
  tree_reduce(team, s.best, [](Candidate a, Candidate b) {
    return better_candidate(b.value, b.index, a.value, a.index) ? b : a;
  });
  tree_reduce(team, s.bad, [](int a, int b) { return a < b ? a : b; });
  if (s.bad[0] < n) return -1 - s.bad[0];
  if (is_greedy(p)) return s.best[0].index;

  KeepRule rule;
  rule.max_logit = s.best[0].value;
  rule.temperature = p.temperature;
  const int top_token = s.best[0].index;
  team.sync();  // every thread has read s.best[0] and s.bad[0]

  // Top-k: the k-th largest key, and how many of its ties to keep.
  if (p.top_k > 0 && p.top_k < n) {
    CountSelect sel;
    sel.remaining = static_cast<unsigned>(p.top_k);
    for (int pass = 0; pass < 4; ++pass) {
      team.each([&](int t) {
        if (t < kRadixBins) s.hist[t] = 0;
      });
      team.sync();
      team.each([&](int t) {
        for (int i = t; i < n; i += kSampleThreads) {
          const std::uint32_t key = order_key(logits[i]);
          if ((key & sel.mask) == sel.prefix) team.add(&s.hist[radix_digit(key, pass)], 1u);
        }
      });
      team.sync();
      select_by_count(s.hist, pass, sel);
      team.sync();  // every thread has read the histogram before the next pass clears it
    }
    rule.top_k = true;
    rule.tau_k = sel.prefix;
    rule.take_k = sel.remaining;
    team.each([&](int t) {
      int begin, end;
      sample_chunk(t, n, begin, end);
      unsigned ties = 0;
      for (int i = begin; i < end; ++i) ties += order_key(logits[i]) == rule.tau_k;
      s.tie_k[t] = ties;
    });
    team.sync();
    exclusive_scan(team, s.tie_k, &s.hist[0]);  // the total is not needed; hist[0] is free
  } else {
    team.each([&](int t) { s.tie_k[t] = 0; });
    team.sync();
  }

  // Top-p: the mass of the tokens top-k kept, then the threshold of the nucleus.
  if (p.top_p < 1.0f) {
    team.each([&](int t) {
      fixed_mass m = 0;
      walk_chunk(logits, n, t, rule, s.tie_k[t], 0, [&](int, std::uint32_t, fixed_mass w, bool, bool) { m += w; });
      s.mass[t] = m;
    });
    team.sync();
    tree_reduce(team, s.mass, [](fixed_mass a, fixed_mass b) { return a + b; });
    MassSelect sel;
    sel.target = static_cast<fixed_mass>(static_cast<double>(p.top_p) * static_cast<double>(s.mass[0]));
    // A top_p so small that the target rounds to 0 would keep no token at all (and
    // leave the draw nothing to land on); the nucleus always holds the top token.
    if (sel.target == 0) sel.target = 1;
    team.sync();
    for (int pass = 0; pass < 4; ++pass) {
      team.each([&](int t) {
        if (t < kRadixBins) {
          s.hist[t] = 0;
          s.hist_mass[t] = 0;
        }
      });
      team.sync();
      team.each([&](int t) {
        walk_chunk(logits, n, t, rule, s.tie_k[t], 0, [&](int, std::uint32_t key, fixed_mass w, bool kept_k, bool) {
          if (!kept_k || (key & sel.mask) != sel.prefix) return;
          team.add(&s.hist[radix_digit(key, pass)], 1u);
          team.add(&s.hist_mass[radix_digit(key, pass)], w);
        });
      });
      team.sync();
      select_by_mass(s.hist_mass, s.hist, pass, sel);
      team.sync();
    }
    rule.top_p = true;
    rule.tau_p = sel.prefix;
    rule.above_p = sel.above;
    rule.target_p = sel.target;
    team.each([&](int t) {
      fixed_mass ties = 0;
      walk_chunk(logits, n, t, rule, s.tie_k[t], 0, [&](int, std::uint32_t key, fixed_mass w, bool kept_k, bool) {
        if (kept_k && key == rule.tau_p) ties += w;
      });
      s.tie_p[t] = ties;
    });
    team.sync();
    exclusive_scan(team, s.tie_p, &s.total);
  } else {
    team.each([&](int t) { s.tie_p[t] = 0; });
    team.sync();
  }

  // The draw: floor(u * kept mass), walked through the kept tokens in index order.
  team.each([&](int t) {
    fixed_mass m = 0;
    walk_chunk(logits, n, t, rule, s.tie_k[t], s.tie_p[t],
               [&](int, std::uint32_t, fixed_mass w, bool, bool kept) { m += kept ? w : 0; });
    s.mass[t] = m;
  });
  team.sync();
  exclusive_scan(team, s.mass, &s.total);
  const fixed_mass total = s.total;
  fixed_mass r = static_cast<fixed_mass>(uniform01(p.seed, static_cast<std::uint64_t>(position)) * static_cast<double>(total));
  if (r >= total) r = total - 1;  // u * total rounded up to total
  // The pick starts as the top token, so a draw that no chunk claims (a kept mass that
  // rounded to nothing) returns the most likely token, never the previous step's pick.
  team.each([&](int t) {
    if (t == 0) s.pick = top_token;
  });
  team.sync();
  team.each([&](int t) {
    const fixed_mass begin = s.mass[t];
    const fixed_mass end = t + 1 < kSampleThreads ? s.mass[t + 1] : total;
    if (r < begin || r >= end) return;  // the draw lands in exactly one thread's chunk
    fixed_mass left = r - begin;
    bool done = false;
    walk_chunk(logits, n, t, rule, s.tie_k[t], s.tie_p[t], [&](int i, std::uint32_t, fixed_mass w, bool, bool kept) {
      if (done || !kept) return;
      if (left < w) {
        s.pick = i;
        done = true;
      } else {
        left -= w;
      }
    });
  });
  team.sync();
  return s.pick;
}

// The host side of sample_tokens: every thread index in turn, no barriers needed.
struct HostTeam {
  template <class Fn>
  void each(Fn&& fn) {
    for (int t = 0; t < kSampleThreads; ++t) fn(t);
  }
  void sync() {}
  void add(unsigned* a, unsigned v) { *a += v; }
  void add(fixed_mass* a, fixed_mass v) { *a += v; }
};

}  // namespace qmv::cuda
