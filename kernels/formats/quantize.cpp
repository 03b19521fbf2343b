// Our own quantizers for the GGUF K-quants, the definitions of the activation formats'
// (their vectorized versions: kernels/activation_quantizers.h), and simple range-based
// ones for the legacy quants and the float types (for test data).
//
// Weight quantization runs in three stages for each 256-weight super-block:
//   1. Per sub-block, fit the scale (and for Q4_K/Q5_K the offset) that minimises the
//      squared error of the *rounded* values: try a small grid of candidate scales
//      around range/qmax, refit scale and offset by least squares for the quants each
//      candidate produces, keep the best, then alternate re-rounding and refitting.
//   2. Quantize the per-sub-block scales (and offsets) against fp16 super-block scales,
//      6-bit unsigned for Q4_K/Q5_K, int8 for Q6_K.
//   3. With the scales as they will be stored, try each sub-block's integer scale (and
//      offset) and its neighbours, re-rounding the quants each time, and keep the pair
//      with the least error. Re-rounding against the stored scales matters: quants
//      rounded against the unquantized scale carry the scale's quantization error into
//      every weight.
// The super-block scales are then refitted by least squares for the chosen integers,
// and kept if that lowers the error.
//
// The error minimised is the plain (unweighted) squared error. The code is portable
// and deterministic (no intrinsics, no threads); the search loops are written so that
// the compiler can vectorize them, which keeps the cost near 50 ns per weight.
#include <algorithm>
#include <array>
#include <bit>
#include <cassert>
#include <cmath>
#include <cstring>
#include <limits>

#include "formats/formats.h"

namespace qmv {

namespace {

// Nearest integer to v (ties to even), clamped to [lo, hi]. Adding 1.5 * 2^23 leaves
// the rounded integer in the low mantissa bits (exact for |v| < 2^22); the clamp is
// done on integers because float compares, which may trap, keep the compiler from
// vectorizing the search loops below. Any v, even inf or NaN, lands in [lo, hi].
inline int round_clamped(float v, int lo, int hi) {
  const auto bits = std::bit_cast<std::uint32_t>(v + 12582912.0f);
  const auto rounded = static_cast<std::int32_t>(bits - 0x4b400000u);
  return std::min(std::max(rounded, lo), hi);
}

// 1/scale, or 0 where that is not finite (scale 0, or a subnormal scale of a block of
// subnormal values): every quant then rounds to 0.
inline float safe_inverse(float scale) {
  const float inv = 1.0f / scale;
  return std::isfinite(inv) ? inv : 0.0f;
}

constexpr float kSmallestFp16 = 0x1p-24f;  // smallest subnormal

// The fp16 value a super-block scale will be stored as. A positive scale too small for
// fp16 becomes the smallest subnormal rather than 0, so tiny blocks keep what
// precision the integer sub-block scales can still give them; a huge one saturates
// at the largest finite fp16 instead of becoming inf.
float representable_fp16_scale(float scale) {
  const float magnitude = std::min(std::fabs(scale), kLargestFp16);
  float stored = fp16_to_fp32(fp32_to_fp16(magnitude));
  if (stored == 0.0f && magnitude > 0.0f) stored = kSmallestFp16;
  return std::copysign(stored, scale);
}

// ---------------------------------------------------------------------------------
// Stage 1 for Q4_K / Q5_K: x ~= scale * q - offset, q in [0, qmax], offset >= 0.

struct AffineFit {
  float scale = 0.0f;
  float offset = 0.0f;
};

// Sums over one sub-block for a given assignment of quants. The fit works on values
// normalised by the sub-block's largest magnitude, so float sums are accurate for
// blocks of any scale (1e-30 squared would underflow, 6e4 squared summed loses bits).
struct QuantSums {
  float q = 0, qq = 0, qx = 0;
};

struct SubBlockStats {
  float n = 0, x = 0, xx = 0;
};

// Least-squares scale and offset for fixed quants, with the format's constraint that
// the offset subtracts (offset >= 0). Returns false when the quants cannot define a
// scale (all equal).
bool refit_affine(const SubBlockStats& stats, const QuantSums& s, AffineFit& fit) {
  const float det = stats.n * s.qq - s.q * s.q;
  if (!(det > 0.0f)) return false;
  float scale = (stats.n * s.qx - s.q * stats.x) / det;
  float bias = (s.qq * stats.x - s.q * s.qx) / det;  // x ~= scale*q + bias
  if (bias > 0.0f) {
    // The format cannot add a positive constant: pin the offset at 0.
    bias = 0.0f;
    scale = s.qx / s.qq;
  }
  if (!(scale > 0.0f)) return false;
  fit.scale = scale;
  fit.offset = -bias;
  return true;
}

// Sum of (scale*q - offset - x)^2 expanded in the sums.
float affine_error(const SubBlockStats& stats, const QuantSums& s, const AffineFit& fit) {
  const float a = fit.scale;
  const float b = -fit.offset;
  const float err = a * a * s.qq + 2.0f * a * b * s.q + stats.n * b * b - 2.0f * a * s.qx -
                    2.0f * b * stats.x + stats.xx;
  return std::max(err, 0.0f);
}

// Sum of N floats (a power of two) by halving: independent adds that the compiler can
// vectorize and the CPU can overlap, where one running sum would be a serial chain
// (the search below spends most of its time in such sums).
template <int N>
inline float pairwise_sum(float* v) {
  for (int width = N / 2; width > 0; width /= 2) {
    for (int i = 0; i < width; ++i) v[i] += v[i + width];
  }
  return v[0];
}

template <int kQMax>
QuantSums affine_sums(const float* x, float scale, float offset) {
  const float inv = safe_inverse(scale);
  float q[32], qq[32], qx[32];
  for (int i = 0; i < 32; ++i) {
    q[i] = static_cast<float>(round_clamped((x[i] + offset) * inv, 0, kQMax));
    qq[i] = q[i] * q[i];
    qx[i] = q[i] * x[i];
  }
  return {pairwise_sum<32>(q), pairwise_sum<32>(qq), pairwise_sum<32>(qx)};
}

// Candidate scales as fractions of range/qmax. Above 1 the extremes are clipped; the
// refit afterwards moves scale and offset to where the resulting quants want them.
constexpr std::array<float, 9> kAffineGrid = {0.80f, 0.85f, 0.90f, 0.94f, 0.97f,
                                              1.00f, 1.03f, 1.07f, 1.12f};
constexpr int kRefineIterations = 4;

template <int kQMax>
AffineFit fit_affine_subblock(const float* x_in) {
  float amax = 0.0f;
  for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x_in[i]));
  if (!(amax > 0.0f) || !std::isfinite(amax)) return {0.0f, 0.0f};

  float x[32];
  SubBlockStats stats;
  stats.n = 32;
  float lo = 0.0f, hi = -1.0f;
  for (int i = 0; i < 32; ++i) {
    x[i] = x_in[i] / amax;
    lo = std::min(lo, x[i]);
    hi = std::max(hi, x[i]);
    stats.x += x[i];
    stats.xx += x[i] * x[i];
  }
  // Reconstructable values start at -offset <= 0, so the range always reaches down to
  // min(0, min x). An empty range means all values equal lo: the offset alone fits.
  const float range = hi - lo;
  if (!(range > 0.0f)) return {0.0f, -lo * amax};

  AffineFit best{range / kQMax, -lo};
  float best_error = affine_error(stats, affine_sums<kQMax>(x, best.scale, best.offset), best);

  // Candidates anchored at either end of the range: clipping the top or the bottom.
  for (float fraction : kAffineGrid) {
    const float scale = range / (kQMax * fraction);
    const float offsets[2] = {-lo, scale * kQMax - hi};
    for (float offset : offsets) {
      const QuantSums s = affine_sums<kQMax>(x, scale, std::max(offset, 0.0f));
      AffineFit fit;
      if (!refit_affine(stats, s, fit)) continue;
      const float err = affine_error(stats, s, fit);
      if (err < best_error) {
        best_error = err;
        best = fit;
      }
    }
  }

  // Alternate re-rounding and refitting from the best candidate.
  for (int iter = 0; iter < kRefineIterations; ++iter) {
    const QuantSums s = affine_sums<kQMax>(x, best.scale, best.offset);
    AffineFit fit;
    if (!refit_affine(stats, s, fit)) break;
    const float err = affine_error(stats, s, fit);
    if (!(err < best_error)) break;
    best_error = err;
    best = fit;
  }
  return {best.scale * amax, best.offset * amax};
}

// ---------------------------------------------------------------------------------
// Stages 2 and 3 for Q4_K / Q5_K.

struct AffineSuperBlock {
  float d = 0.0f, dmin = 0.0f;  // as stored (fp16-representable)
  std::uint8_t scales[8] = {}, mins[8] = {};
  std::uint8_t q[kSuperBlock] = {};
};

// Squared error of sub-block x under scale d*sc and offset dmin*m with the quants
// re-rounded; the float products are formed exactly as the dequantizer forms them.
template <int kQMax>
float subblock_error(const float* x, float d, int sc, float dmin, int m) {
  const float scale = d * static_cast<float>(sc);
  const float offset = dmin * static_cast<float>(m);
  const float inv = safe_inverse(scale);
  float squared_errors[32];
  for (int i = 0; i < 32; ++i) {
    const float q = static_cast<float>(round_clamped((x[i] + offset) * inv, 0, kQMax));
    const float e = scale * q - offset - x[i];
    squared_errors[i] = e * e;
  }
  return pairwise_sum<32>(squared_errors);
}

template <int kQMax>
void round_subblock(const float* x, float d, int sc, float dmin, int m, std::uint8_t* q) {
  const float scale = d * static_cast<float>(sc);
  const float offset = dmin * static_cast<float>(m);
  const float inv = safe_inverse(scale);
  for (int i = 0; i < 32; ++i) {
    q[i] = static_cast<std::uint8_t>(round_clamped((x[i] + offset) * inv, 0, kQMax));
  }
}

// Quantizes the sub-block scales and offsets against out.d / out.dmin, tries each
// integer pair's neighbours, and re-rounds the quants for the best pair. Returns the
// squared error of the whole super-block.
template <int kQMax>
float assign_integers(const float* x, const AffineFit* fits, AffineSuperBlock& out) {
  float total = 0.0f;
  const float inv_d = safe_inverse(out.d);
  const float inv_dmin = safe_inverse(out.dmin);
  for (int j = 0; j < 8; ++j) {
    const float* xj = x + 32 * j;
    const int sc0 = round_clamped(fits[j].scale * inv_d, 0, 63);
    const int m0 = round_clamped(fits[j].offset * inv_dmin, 0, 63);
    int best_sc = sc0, best_m = m0;
    float best = subblock_error<kQMax>(xj, out.d, sc0, out.dmin, m0);
    for (int sc = std::max(sc0 - 1, 0); sc <= std::min(sc0 + 1, 63); ++sc) {
      for (int m = std::max(m0 - 1, 0); m <= std::min(m0 + 1, 63); ++m) {
        if (sc == sc0 && m == m0) continue;
        const float err = subblock_error<kQMax>(xj, out.d, sc, out.dmin, m);
        if (err < best) {
          best = err;
          best_sc = sc;
          best_m = m;
        }
      }
    }
    round_subblock<kQMax>(xj, out.d, best_sc, out.dmin, best_m, out.q + 32 * j);
    out.scales[j] = static_cast<std::uint8_t>(best_sc);
    out.mins[j] = static_cast<std::uint8_t>(best_m);
    total += best;
  }
  return total;
}

template <int kQMax>
AffineSuperBlock quantize_affine_superblock(const float* x) {
  AffineFit fits[8];
  float max_scale = 0.0f, max_offset = 0.0f;
  for (int j = 0; j < 8; ++j) {
    fits[j] = fit_affine_subblock<kQMax>(x + 32 * j);
    max_scale = std::max(max_scale, fits[j].scale);
    max_offset = std::max(max_offset, fits[j].offset);
  }

  AffineSuperBlock best;
  best.d = representable_fp16_scale(max_scale / 63.0f);
  best.dmin = representable_fp16_scale(max_offset / 63.0f);
  float best_error = assign_integers<kQMax>(x, fits, best);

  // Least-squares refit of (d, dmin) for the chosen integers: x ~= d*(sc*q) - dmin*m.
  double aa = 0, ab = 0, bb = 0, ax = 0, bx = 0;
  for (int i = 0; i < kSuperBlock; ++i) {
    const double a = static_cast<double>(best.scales[i / 32]) * best.q[i];
    const double b = -static_cast<double>(best.mins[i / 32]);
    aa += a * a;
    ab += a * b;
    bb += b * b;
    ax += a * x[i];
    bx += b * x[i];
  }
  const double det = aa * bb - ab * ab;
  if (det > 0.0) {
    AffineSuperBlock refit = best;
    refit.d = representable_fp16_scale(static_cast<float>((ax * bb - ab * bx) / det));
    refit.dmin = representable_fp16_scale(static_cast<float>((aa * bx - ab * ax) / det));
    if (refit.d > 0.0f && refit.dmin >= 0.0f) {
      const float err = assign_integers<kQMax>(x, fits, refit);
      if (err < best_error) best = refit;
    }
  }
  return best;
}

// ---------------------------------------------------------------------------------
// Q6_K: x ~= scale * q, q in [-32, 31], 16 sub-blocks of 16.

constexpr int kQ6Min = -32, kQ6Max = 31;

struct SymmetricSums {
  float qq = 0, qx = 0;
};

SymmetricSums symmetric_sums(const float* x, float scale) {
  const float inv = safe_inverse(scale);  // negative scale: the sign picks which end gets 32 levels
  float qq[16], qx[16];
  for (int i = 0; i < 16; ++i) {
    const float q = static_cast<float>(round_clamped(x[i] * inv, kQ6Min, kQ6Max));
    qq[i] = q * q;
    qx[i] = q * x[i];
  }
  return {pairwise_sum<16>(qq), pairwise_sum<16>(qx)};
}

// Error of the least-squares scale qx/qq for these quants: xx - qx^2/qq.
float symmetric_error(float xx, const SymmetricSums& s) {
  if (!(s.qq > 0.0f)) return xx;
  return std::max(xx - s.qx * s.qx / s.qq, 0.0f);
}

// Candidate scales as fractions of extreme/32 (or extreme/31 for the other sign).
constexpr std::array<float, 8> kSymmetricGrid = {0.84f, 0.88f, 0.92f, 0.95f,
                                                 0.98f, 1.00f, 1.02f, 1.05f};

float fit_symmetric_subblock(const float* x_in) {
  float extreme = 0.0f;  // the value of largest magnitude, with its sign
  for (int i = 0; i < 16; ++i) {
    if (std::fabs(x_in[i]) > std::fabs(extreme)) extreme = x_in[i];
  }
  const float amax = std::fabs(extreme);
  if (!(amax > 0.0f) || !std::isfinite(amax)) return 0.0f;

  // Normalised as in the affine fit, so the float sums are accurate at any magnitude.
  float x[16];
  float xx = 0.0f;
  for (int i = 0; i < 16; ++i) {
    x[i] = x_in[i] / amax;
    xx += x[i] * x[i];
  }
  const float sign = extreme > 0.0f ? 1.0f : -1.0f;  // normalised extreme

  float best_scale = -sign / 32.0f;
  float best_error = std::numeric_limits<float>::infinity();
  // Map the extreme to -32 (a scale of the opposite sign: one more level on its side)
  // or to +31, for each fraction.
  for (float fraction : kSymmetricGrid) {
    for (float scale : {-sign / (32.0f * fraction), sign / (31.0f * fraction)}) {
      const SymmetricSums s = symmetric_sums(x, scale);
      const float err = symmetric_error(xx, s);
      if (err < best_error && s.qq > 0.0f) {
        best_error = err;
        best_scale = s.qx / s.qq;
      }
    }
  }
  for (int iter = 0; iter < kRefineIterations; ++iter) {
    const SymmetricSums s = symmetric_sums(x, best_scale);
    const float err = symmetric_error(xx, s);
    if (!(err < best_error) || !(s.qq > 0.0f)) break;
    best_error = err;
    best_scale = s.qx / s.qq;
  }
  return best_scale * amax;
}

struct SymmetricSuperBlock {
  float d = 0.0f;
  std::int8_t scales[16] = {};
  std::int8_t q[kSuperBlock] = {};
};

float q6_subblock_error(const float* x, float d, int sc) {
  const float scale = d * static_cast<float>(sc);
  const float inv = safe_inverse(scale);
  float squared_errors[16];
  for (int i = 0; i < 16; ++i) {
    const float q = static_cast<float>(round_clamped(x[i] * inv, kQ6Min, kQ6Max));
    const float e = scale * q - x[i];
    squared_errors[i] = e * e;
  }
  return pairwise_sum<16>(squared_errors);
}

float assign_q6_integers(const float* x, const float* scales, SymmetricSuperBlock& out) {
  const float inv_d = safe_inverse(out.d);
  float total = 0.0f;
  for (int j = 0; j < 16; ++j) {
    const float* xj = x + 16 * j;
    const int sc0 = round_clamped(scales[j] * inv_d, -128, 127);
    int best_sc = sc0;
    float best = q6_subblock_error(xj, out.d, sc0);
    for (int sc : {sc0 - 1, sc0 + 1}) {
      if (sc < -128 || sc > 127) continue;
      const float err = q6_subblock_error(xj, out.d, sc);
      if (err < best) {
        best = err;
        best_sc = sc;
      }
    }
    const float inv = safe_inverse(out.d * static_cast<float>(best_sc));
    for (int i = 0; i < 16; ++i) {
      out.q[16 * j + i] = static_cast<std::int8_t>(round_clamped(xj[i] * inv, kQ6Min, kQ6Max));
    }
    out.scales[j] = static_cast<std::int8_t>(best_sc);
    total += best;
  }
  return total;
}

SymmetricSuperBlock quantize_symmetric_superblock(const float* x) {
  float scales[16];
  float extreme = 0.0f;
  for (int j = 0; j < 16; ++j) {
    scales[j] = fit_symmetric_subblock(x + 16 * j);
    if (std::fabs(scales[j]) > std::fabs(extreme)) extreme = scales[j];
  }
  SymmetricSuperBlock best;
  // The largest sub-block scale maps to -128, the end of int8 with one more level.
  best.d = representable_fp16_scale(extreme / -128.0f);
  float best_error = assign_q6_integers(x, scales, best);

  double aa = 0, ax = 0;
  for (int i = 0; i < kSuperBlock; ++i) {
    const double a = static_cast<double>(best.scales[i / 16]) * best.q[i];
    aa += a * a;
    ax += a * x[i];
  }
  if (aa > 0.0) {
    SymmetricSuperBlock refit = best;
    refit.d = representable_fp16_scale(static_cast<float>(ax / aa));
    const float err = assign_q6_integers(x, scales, refit);
    if (err < best_error) best = refit;
  }
  return best;
}

}  // namespace

// ---------------------------------------------------------------------------------
// Packing into the GGUF layouts (see formats.cpp for the layout description).

void quantize_row_q4_K(const float* x, BlockQ4K* y, std::int64_t n) {
  assert(n % kSuperBlock == 0);
  for (std::int64_t b = 0; b < n / kSuperBlock; ++b) {
    const AffineSuperBlock sb = quantize_affine_superblock<15>(x + b * kSuperBlock);
    BlockQ4K& block = y[b];
    block.d = fp32_to_fp16(sb.d);
    block.dmin = fp32_to_fp16(sb.dmin);
    pack_scales_mins_k4(sb.scales, sb.mins, block.scales);
    for (int chunk = 0; chunk < 4; ++chunk) {
      for (int l = 0; l < 32; ++l) {
        block.qs[32 * chunk + l] =
            static_cast<std::uint8_t>(sb.q[64 * chunk + l] | (sb.q[64 * chunk + 32 + l] << 4));
      }
    }
  }
}

void quantize_row_q5_K(const float* x, BlockQ5K* y, std::int64_t n) {
  assert(n % kSuperBlock == 0);
  for (std::int64_t b = 0; b < n / kSuperBlock; ++b) {
    const AffineSuperBlock sb = quantize_affine_superblock<31>(x + b * kSuperBlock);
    BlockQ5K& block = y[b];
    block.d = fp32_to_fp16(sb.d);
    block.dmin = fp32_to_fp16(sb.dmin);
    pack_scales_mins_k4(sb.scales, sb.mins, block.scales);
    std::memset(block.qh, 0, sizeof(block.qh));
    for (int chunk = 0; chunk < 4; ++chunk) {
      for (int l = 0; l < 32; ++l) {
        const int low = sb.q[64 * chunk + l];
        const int high = sb.q[64 * chunk + 32 + l];
        block.qs[32 * chunk + l] = static_cast<std::uint8_t>((low & 0x0f) | ((high & 0x0f) << 4));
      }
    }
    for (int j = 0; j < 8; ++j) {
      for (int l = 0; l < 32; ++l) {
        block.qh[l] |= static_cast<std::uint8_t>(((sb.q[32 * j + l] >> 4) & 1) << j);
      }
    }
  }
}

void quantize_row_q6_K(const float* x, BlockQ6K* y, std::int64_t n) {
  assert(n % kSuperBlock == 0);
  for (std::int64_t b = 0; b < n / kSuperBlock; ++b) {
    const SymmetricSuperBlock sb = quantize_symmetric_superblock(x + b * kSuperBlock);
    BlockQ6K& block = y[b];
    block.d = fp32_to_fp16(sb.d);
    std::memcpy(block.scales, sb.scales, sizeof(block.scales));
    std::memset(block.qh, 0, sizeof(block.qh));
    for (int h = 0; h < 2; ++h) {
      std::uint8_t* ql = block.ql + 64 * h;
      std::uint8_t* qh = block.qh + 32 * h;
      for (int k = 0; k < 4; ++k) {
        for (int l = 0; l < 32; ++l) {
          const int stored = sb.q[128 * h + 32 * k + l] + 32;  // 0..63
          const int low_index = l + 32 * (k & 1);
          if (k < 2) {
            ql[low_index] = static_cast<std::uint8_t>(stored & 0x0f);
          } else {
            ql[low_index] |= static_cast<std::uint8_t>((stored & 0x0f) << 4);
          }
          qh[l] |= static_cast<std::uint8_t>((stored >> 4) << (2 * k));
        }
      }
    }
  }
}

void quantize_row(WeightType t, const float* x, void* blocks, std::int64_t n) {
  switch (t) {
    case WeightType::Q4_K:
      quantize_row_q4_K(x, static_cast<BlockQ4K*>(blocks), n);
      return;
    case WeightType::Q5_K:
      quantize_row_q5_K(x, static_cast<BlockQ5K*>(blocks), n);
      return;
    case WeightType::Q6_K:
      quantize_row_q6_K(x, static_cast<BlockQ6K*>(blocks), n);
      return;
    case WeightType::Q4_0:
      quantize_row_q4_0(x, static_cast<BlockQ4_0*>(blocks), n);
      return;
    case WeightType::Q4_1:
      quantize_row_q4_1(x, static_cast<BlockQ4_1*>(blocks), n);
      return;
    case WeightType::Q5_0:
      quantize_row_q5_0(x, static_cast<BlockQ5_0*>(blocks), n);
      return;
    case WeightType::Q5_1:
      quantize_row_q5_1(x, static_cast<BlockQ5_1*>(blocks), n);
      return;
    case WeightType::Q8_0:
      quantize_row_q8_0(x, static_cast<BlockQ8_0*>(blocks), n);
      return;
    case WeightType::F16:
      quantize_row_f16(x, static_cast<fp16_bits*>(blocks), n);
      return;
    case WeightType::BF16:
      quantize_row_bf16(x, static_cast<bf16_bits*>(blocks), n);
      return;
    case WeightType::F32:
      std::memcpy(blocks, x, static_cast<std::size_t>(n) * sizeof(float));
      return;
  }
}

// ---------------------------------------------------------------------------------
// Activations. Both use q = round(x / d) with true division and round-half-away-from-
// zero (std::round), so a GPU quantizer can reproduce them bit for bit.

namespace {

// round(x / d) as an int8 quant in [-127, 127]; 0 when d is 0 (an all-zero block) and
// for a NaN input, where a plain cast would be undefined.
int activation_quant(float x, float d) {
  const float v = d > 0.0f ? std::round(x / d) : 0.0f;
  if (!(v == v)) return 0;
  return static_cast<int>(std::clamp(v, -127.0f, 127.0f));
}

}  // namespace

void quantize_row_q8_K_scalar(const float* x, BlockQ8K* y, std::int64_t n) {
  assert(n % kSuperBlock == 0);
  for (std::int64_t b = 0; b < n / kSuperBlock; ++b) {
    const float* xb = x + b * kSuperBlock;
    BlockQ8K& block = y[b];
    float amax = 0.0f;
    for (int i = 0; i < kSuperBlock; ++i) amax = std::max(amax, std::fabs(xb[i]));
    const float d = amax / 127.0f;
    block.d = d;
    for (int i = 0; i < kSuperBlock; ++i) {
      block.qs[i] = static_cast<std::int8_t>(activation_quant(xb[i], d));
    }
    for (int g = 0; g < kSuperBlock / 16; ++g) {
      int sum = 0;
      for (int i = 0; i < 16; ++i) sum += block.qs[16 * g + i];
      block.bsums[g] = static_cast<std::int16_t>(sum);
    }
  }
}

// d is stored as fp16 and the quants are rounded against the stored d, so that
// |x - d*q| <= d/2 holds for the values a kernel sees; s = fp16(d_stored * sum(q)).
// (A huge block, |sum(x)| > 65504, saturates s to inf, as a cast would.)
void quantize_row_q8_1_scalar(const float* x, BlockQ8_1* y, std::int64_t n) {
  assert(n % kQ8_1Block == 0);
  for (std::int64_t b = 0; b < n / kQ8_1Block; ++b) {
    const float* xb = x + b * kQ8_1Block;
    BlockQ8_1& block = y[b];
    float amax = 0.0f;
    for (int i = 0; i < kQ8_1Block; ++i) amax = std::max(amax, std::fabs(xb[i]));
    block.d = fp32_to_fp16(std::min(amax / 127.0f, kLargestFp16));
    const float d = fp16_to_fp32(block.d);
    int sum = 0;
    for (int i = 0; i < kQ8_1Block; ++i) {
      const int q = activation_quant(xb[i], d);
      block.qs[i] = static_cast<std::int8_t>(q);
      sum += q;
    }
    block.s = fp32_to_fp16(d * static_cast<float>(sum));
  }
}

// ---------------------------------------------------------------------------------
// Legacy quants: each block's scale (and offset) spans its range, as the formats
// define; no search. The scale and offset are stored first and the quants rounded
// against the stored fp16 values, so the rounding error of a weight stays within half
// a step. Rounding follows the reference conventions: half up on the non-negative
// quant for Q4_0/Q4_1/Q5_0/Q5_1, half away from zero for Q8_0.

namespace {

// floor(v + 0.5) clamped to [lo, hi]; NaN gives lo.
int round_half_up_clamped(float v, int lo, int hi) {
  const float r = std::floor(v + 0.5f);
  if (!(r >= static_cast<float>(lo))) return lo;
  if (r > static_cast<float>(hi)) return hi;
  return static_cast<int>(r);
}

// A block scale or offset as stored: fp16, saturated at the largest finite value.
fp16_bits saturated_fp16(float v) { return fp32_to_fp16(std::clamp(v, -kLargestFp16, kLargestFp16)); }

// Q4_0 / Q5_0 with `levels` quants, w = d*(q - levels/2): the value of largest
// magnitude, with its sign, becomes the most negative quant, so it is kept exactly
// and the extra negative step of the range is not wasted.
fp16_bits quantize_symmetric_block(const float* x, int levels, int q[kLegacyBlock]) {
  const int zero = levels / 2;
  float extreme = 0.0f;
  for (int i = 0; i < kLegacyBlock; ++i)
    if (std::fabs(x[i]) > std::fabs(extreme)) extreme = x[i];
  const fp16_bits d = saturated_fp16(extreme / -static_cast<float>(zero));
  const float inv = safe_inverse(fp16_to_fp32(d));
  for (int i = 0; i < kLegacyBlock; ++i)
    q[i] = round_half_up_clamped(x[i] * inv + static_cast<float>(zero), 0, levels - 1);
  return d;
}

// Q4_1 / Q5_1, w = d*q + m: m is the block minimum, d spreads [min, max] over the
// levels.
void quantize_affine_block(const float* x, int levels, fp16_bits& d, fp16_bits& m,
                           int q[kLegacyBlock]) {
  float lo = x[0], hi = x[0];
  for (int i = 1; i < kLegacyBlock; ++i) {
    lo = std::min(lo, x[i]);
    hi = std::max(hi, x[i]);
  }
  m = saturated_fp16(lo);
  d = saturated_fp16((hi - lo) / static_cast<float>(levels - 1));
  const float offset = fp16_to_fp32(m);
  const float inv = safe_inverse(fp16_to_fp32(d));
  for (int i = 0; i < kLegacyBlock; ++i)
    q[i] = round_half_up_clamped((x[i] - offset) * inv, 0, levels - 1);
}

void pack_nibbles(const int q[kLegacyBlock], std::uint8_t qs[kLegacyBlock / 2]) {
  for (int l = 0; l < kLegacyBlock / 2; ++l)
    qs[l] = static_cast<std::uint8_t>((q[l] & 0x0f) | ((q[l + kLegacyBlock / 2] & 0x0f) << 4));
}

void pack_fifth_bits(const int q[kLegacyBlock], std::uint8_t qh[4]) {
  std::uint32_t high = 0;
  for (int i = 0; i < kLegacyBlock; ++i) high |= static_cast<std::uint32_t>((q[i] >> 4) & 1) << i;
  std::memcpy(qh, &high, sizeof(high));
}

}  // namespace

void quantize_row_q4_0(const float* x, BlockQ4_0* y, std::int64_t n) {
  assert(n % kLegacyBlock == 0);
  for (std::int64_t b = 0; b < n / kLegacyBlock; ++b) {
    int q[kLegacyBlock];
    y[b].d = quantize_symmetric_block(x + b * kLegacyBlock, 16, q);
    pack_nibbles(q, y[b].qs);
  }
}

void quantize_row_q4_1(const float* x, BlockQ4_1* y, std::int64_t n) {
  assert(n % kLegacyBlock == 0);
  for (std::int64_t b = 0; b < n / kLegacyBlock; ++b) {
    int q[kLegacyBlock];
    quantize_affine_block(x + b * kLegacyBlock, 16, y[b].d, y[b].m, q);
    pack_nibbles(q, y[b].qs);
  }
}

void quantize_row_q5_0(const float* x, BlockQ5_0* y, std::int64_t n) {
  assert(n % kLegacyBlock == 0);
  for (std::int64_t b = 0; b < n / kLegacyBlock; ++b) {
    int q[kLegacyBlock];
    y[b].d = quantize_symmetric_block(x + b * kLegacyBlock, 32, q);
    pack_nibbles(q, y[b].qs);
    pack_fifth_bits(q, y[b].qh);
  }
}

void quantize_row_q5_1(const float* x, BlockQ5_1* y, std::int64_t n) {
  assert(n % kLegacyBlock == 0);
  for (std::int64_t b = 0; b < n / kLegacyBlock; ++b) {
    int q[kLegacyBlock];
    quantize_affine_block(x + b * kLegacyBlock, 32, y[b].d, y[b].m, q);
    pack_nibbles(q, y[b].qs);
    pack_fifth_bits(q, y[b].qh);
  }
}

void quantize_row_q8_0(const float* x, BlockQ8_0* y, std::int64_t n) {
  assert(n % kLegacyBlock == 0);
  for (std::int64_t b = 0; b < n / kLegacyBlock; ++b) {
    const float* xb = x + b * kLegacyBlock;
    float amax = 0.0f;
    for (int i = 0; i < kLegacyBlock; ++i) amax = std::max(amax, std::fabs(xb[i]));
    y[b].d = saturated_fp16(amax / 127.0f);
    const float d = fp16_to_fp32(y[b].d);
    for (int i = 0; i < kLegacyBlock; ++i) y[b].qs[i] = static_cast<std::int8_t>(activation_quant(xb[i], d));
  }
}

void quantize_row_f16(const float* x, fp16_bits* y, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) y[i] = fp32_to_fp16(x[i]);
}

void quantize_row_bf16(const float* x, bf16_bits* y, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) y[i] = fp32_to_bf16(x[i]);
}

}  // namespace qmv
