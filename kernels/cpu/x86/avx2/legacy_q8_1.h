// Shared core of the legacy-quant x Q8_1 AVX2 integer kernels, one row and four rows
// (the avx2_q8_1 and avx2_x4_q8_1 kernels of Q4_0, Q4_1, Q5_0, Q5_1 and Q8_0, whose
// files are built with -mavx2 -mfma -mf16c; no other file includes it). Only AVX2, FMA
// and F16C instructions.
//
// A step takes a pair of consecutive weight blocks A, B of a row (a row's odd last
// block is a pair whose B half is zero).
//
// Nibble types (Q4_0, Q4_1, Q5_0, Q5_1): the two blocks' 16 qs bytes go into the two
// 128-bit lanes of one register (a load and an insert from memory, no shuffle), so
// the low nibbles are [A w0..15 | B w0..15] and the high ones [A w16..31 | B w16..31].
// The activation is re-ordered once per call into that layout (XPair), so two
// vpmaddubsw (unsigned weights x signed activations -> int16 pair sums), one vpaddw
// and one vpmaddwd against ones leave four int32 partial dots of A in the low lane and
// four of B in the high one: one int -> float conversion and one FMA apply both
// blocks' scales. The fifth bits of Q5 are spread from qh into 0x10 bytes by a
// broadcast, a vpshufb and a compare.
//
// Unsigned weights: vpmaddubsw wants u8 x s8, so the stored (offset) quants are used
// as they are (Q4_0 stores q + 8, Q5_0 q + 16), and the offset times the block's sum
// of activation quants (an exact integer, computed once per call; the Q8_1 s field is
// rounded) is added to the int32 dot, lane by lane: each lane gets the offset times the
// sum of the activation quants of its own eight weights, so every lane holds the
// centred partial dot. (One block-wide term in one lane would leave lanes of large
// opposite values whose scaled float sum cancels, costing precision when the centred
// dot is small.) For the _1
// types (w = d*q + m) the m term is m_w * d_x * sum(q_x), which rides along with the
// scale product: [d_A, m_A, d_B, m_B] (one vcvtph2ps) times the call's
// [d_xA, d_xA*sum_A, d_xB, d_xB*sum_B] gives both scales and both offset terms.
//
// Q8_0 (signed 8-bit weights) does not fit vpmaddubsw: stored unsigned (q + 128) its
// pairs overflow int16, and the sign trick (|w| x sign(x, w)) is wrong for x = -128
// against a negative weight, which Q8_1 allows. So its quants are widened to int16
// (vpmovsxbw straight from memory) and multiplied by the activation, widened to int16
// once per call, with vpmaddwd: exact for every byte value. A shift and a blend fold
// the two blocks' dots into alternating lanes for one conversion and one FMA.
//
// Bounds: a vpmaddubsw pair is at most 2 * 31 * 128 = 7936 in size, two of them added
// 15872 < 2^15; an int32 lane sums at most 8 products plus the offset term
// (16 * 8 * 128), and a Q8_0 block's dot is at most 32 * 128 * 128 = 2^19, all
// below 2^24, so int32 is exact and so is the conversion to float.
#pragma once

#include "kernels/cpu/x86/x86.h"

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernel.h"
#include "kernels/cpu_tiling.h"

namespace qmv::legacy_avx2_int8 {
namespace {

inline constexpr int kPairBlocks = 2;

inline std::uint32_t load_u16(const std::uint8_t* p) {
  std::uint16_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}
inline std::uint32_t load_u32(const std::uint8_t* p) {
  std::uint32_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

// ---- Nibble types -------------------------------------------------------------------

// Two blocks of the prepared activation, in the layout of the weight registers.
struct alignas(32) XPair {
  std::int8_t lo[32];     // quants 0..15 of A, then of B
  std::int8_t hi[32];     // quants 16..31 of A, then of B
  std::int32_t zero[8];   // _0 types: -offset * (sum of q_x over the lane's 8 weights)
  float dm[4];            // d_xA, d_xA * sum_A, d_xB, d_xB * sum_B (the sums only for _1)
  float pad[4];
};

template <int kZero, bool kOffsetSum>
inline void prepare_nibble_activation(const BlockQ8_1* x, std::int64_t nb, XPair* out) {
  const std::int64_t pairs = (nb + 1) / 2;
  for (std::int64_t g = 0; g < pairs; ++g) {
    XPair& o = out[g];
    for (int k = 0; k < kPairBlocks; ++k) {
      const std::int64_t b = g * kPairBlocks + k;
      int sum = 0;
      float d = 0.0f;
      if (b < nb) {
        for (int i = 0; i < 16; ++i) {
          o.lo[16 * k + i] = x[b].qs[i];
          o.hi[16 * k + i] = x[b].qs[16 + i];
        }
        for (int i = 0; i < kQ8_1Block; ++i) sum += x[b].qs[i];
        d = _cvtsh_ss(x[b].d);
      } else {
        for (int i = 0; i < 16; ++i) o.lo[16 * k + i] = o.hi[16 * k + i] = 0;
      }
      // Lane j of the block's dot holds weights 4j..4j+3 and 16+4j..16+4j+3.
      for (int j = 0; j < 4; ++j) {
        int lane_sum = 0;
        for (int i = 4 * j; i < 4 * j + 4 && b < nb; ++i) lane_sum += x[b].qs[i] + x[b].qs[16 + i];
        o.zero[4 * k + j] = -kZero * lane_sum;
      }
      o.dm[2 * k] = d;
      // d * sum is exact in float (11 + 13 significant bits).
      o.dm[2 * k + 1] = kOffsetSum ? d * static_cast<float>(sum) : 0.0f;
    }
    for (float& p : o.pad) p = 0.0f;
  }
}

// The nibble formats: block size and field offsets in bytes. w = d * (q - kZero) for
// the _0 types, w = d * q + m for the _1 types (the m at byte 2).
struct Q4_0 {
  static constexpr int kBytes = 18, kQs = 2, kQh = -1, kZero = 8;
  static constexpr bool kOffsetSum = false;
};
struct Q4_1 {
  static constexpr int kBytes = 20, kQs = 4, kQh = -1, kZero = 0;
  static constexpr bool kOffsetSum = true;
};
struct Q5_0 {
  static constexpr int kBytes = 22, kQs = 6, kQh = 2, kZero = 16;
  static constexpr bool kOffsetSum = false;
};
struct Q5_1 {
  static constexpr int kBytes = 24, kQs = 8, kQh = 4, kZero = 0;
  static constexpr bool kOffsetSum = true;
};

// The activation pair in registers, shared by the rows of a step.
struct XRegs {
  __m256i lo, hi, zero;
  __m128 dm;
};

template <class F>
__attribute__((always_inline)) inline XRegs load_x(const XPair& x) {
  XRegs r;
  r.lo = _mm256_load_si256(reinterpret_cast<const __m256i*>(x.lo));
  r.hi = _mm256_load_si256(reinterpret_cast<const __m256i*>(x.hi));
  r.zero = F::kZero != 0 ? _mm256_load_si256(reinterpret_cast<const __m256i*>(x.zero)) : _mm256_setzero_si256();
  r.dm = _mm_load_ps(x.dm);
  return r;
}

// A row's accumulators: eight float lanes of scaled dots, and for the _1 types the
// offset terms in lanes 1 and 3 (the other lanes hold scale products, not summed).
struct RowAcc {
  __m256 scaled = _mm256_setzero_ps();
  __m128 offset = _mm_setzero_ps();
};

// 0x10 in every byte whose fifth bit is set: qh holds A's qh word in each dword of the
// low lane and B's in the high lane; `index` picks the qh byte of each weight.
inline __m256i fifth_bits(__m256i qh, __m256i index) {
  const __m256i bit = _mm256_set1_epi64x(static_cast<long long>(0x8040201008040201ull));
  const __m256i selected = _mm256_and_si256(_mm256_shuffle_epi8(qh, index), bit);
  return _mm256_and_si256(_mm256_cmpeq_epi8(selected, bit), _mm256_set1_epi8(0x10));
}

// Adds the pair at p (kHasB: B exists; else A is a row's last block) to acc.
template <class F, bool kHasB>
__attribute__((always_inline)) inline void accumulate_pair(const std::uint8_t* p, const XRegs& x, RowAcc& acc) {
  const __m128i qs_a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + F::kQs));
  // B's half of a lone block meets zero activations, so it may hold anything.
  __m256i qs = _mm256_castsi128_si256(qs_a);
  if constexpr (kHasB)
    qs = _mm256_inserti128_si256(qs, _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + F::kBytes + F::kQs)), 1);
  const __m256i m4 = _mm256_set1_epi8(0x0f);
  __m256i lo = _mm256_and_si256(qs, m4);
  __m256i hi = _mm256_and_si256(_mm256_srli_epi16(qs, 4), m4);
  if constexpr (F::kQh >= 0) {
    __m256i qh = _mm256_set1_epi32(static_cast<int>(load_u32(p + F::kQh)));
    if constexpr (kHasB)
      qh = _mm256_blend_epi32(qh, _mm256_set1_epi32(static_cast<int>(load_u32(p + F::kBytes + F::kQh))), 0xF0);
    const __m256i index_lo = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,
                                              0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
    const __m256i index_hi = _mm256_setr_epi8(2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3,
                                              2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
    lo = _mm256_or_si256(lo, fifth_bits(qh, index_lo));
    hi = _mm256_or_si256(hi, fifth_bits(qh, index_hi));
  }
  const __m256i pairs16 = _mm256_add_epi16(_mm256_maddubs_epi16(lo, x.lo), _mm256_maddubs_epi16(hi, x.hi));
  __m256i dot = _mm256_madd_epi16(pairs16, _mm256_set1_epi16(1));
  if constexpr (F::kZero != 0) dot = _mm256_add_epi32(dot, x.zero);

  // [d_A, m_A, d_B, m_B] (m only for the _1 types) times the activation's factors.
  const std::uint64_t bits_a = F::kOffsetSum ? load_u32(p) : load_u16(p);
  const std::uint64_t bits_b = kHasB ? (F::kOffsetSum ? load_u32(p + F::kBytes) : load_u16(p + F::kBytes)) : 0;
  const __m128 dm_w = _mm_cvtph_ps(_mm_cvtsi64_si128(static_cast<long long>(bits_a | bits_b << 32)));
  const __m128 prod = _mm_mul_ps(dm_w, x.dm);
  const __m256i spread = _mm256_setr_epi32(0, 0, 0, 0, 2, 2, 2, 2);
  const __m256 scale = _mm256_permutevar8x32_ps(_mm256_castps128_ps256(prod), spread);
  acc.scaled = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), scale, acc.scaled);
  if constexpr (F::kOffsetSum) acc.offset = _mm_add_ps(acc.offset, prod);
}

template <class F>
inline float finish(const RowAcc& acc) {
  float y = x86::hsum(acc.scaled);
  if constexpr (F::kOffsetSum) {
    alignas(16) float o[4];
    _mm_store_ps(o, acc.offset);
    y += o[1] + o[3];
  }
  return y;
}

// ---- Q8_0 ---------------------------------------------------------------------------

struct Q8_0 {
  static constexpr int kBytes = 34;
};

// Two blocks of the prepared activation for Q8_0: the quants widened to int16.
struct alignas(32) XPair8 {
  std::int16_t q[2][32];  // block A, block B
  float d[4];             // d_xA, d_xB, 0, 0
  float pad[4];
};

inline void prepare_q8_activation(const BlockQ8_1* x, std::int64_t nb, XPair8* out) {
  const std::int64_t pairs = (nb + 1) / 2;
  for (std::int64_t g = 0; g < pairs; ++g) {
    XPair8& o = out[g];
    for (int k = 0; k < kPairBlocks; ++k) {
      const std::int64_t b = g * kPairBlocks + k;
      for (int i = 0; i < kQ8_1Block; ++i) o.q[k][i] = b < nb ? x[b].qs[i] : 0;
      o.d[k] = b < nb ? _cvtsh_ss(x[b].d) : 0.0f;
    }
    o.d[2] = o.d[3] = 0.0f;
    for (float& p : o.pad) p = 0.0f;
  }
}

struct XRegs8 {
  __m256i a_lo, a_hi, b_lo, b_hi;
  __m128 d;
};

inline XRegs8 load_x8(const XPair8& x) {
  const auto* q = reinterpret_cast<const __m256i*>(x.q);
  return {_mm256_load_si256(q), _mm256_load_si256(q + 1), _mm256_load_si256(q + 2), _mm256_load_si256(q + 3),
          _mm_load_ps(x.d)};
}

inline __m256i widened(const std::uint8_t* p) {
  return _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

template <bool kHasB>
__attribute__((always_inline)) inline void accumulate_pair_q8(const std::uint8_t* p, const XRegs8& x, __m256& acc) {
  constexpr int kB = Q8_0::kBytes;
  // Eight int32 lanes summing to each block's dot.
  const __m256i dot_a = _mm256_add_epi32(_mm256_madd_epi16(widened(p + 2), x.a_lo),
                                         _mm256_madd_epi16(widened(p + 18), x.a_hi));
  const __m256i dot_b = kHasB ? _mm256_add_epi32(_mm256_madd_epi16(widened(p + kB + 2), x.b_lo),
                                                 _mm256_madd_epi16(widened(p + kB + 18), x.b_hi))
                              : _mm256_setzero_si256();
  // Pairwise sums: A's in the even lanes, B's in the odd ones.
  const __m256i dot = _mm256_blend_epi32(_mm256_add_epi32(dot_a, _mm256_srli_epi64(dot_a, 32)),
                                         _mm256_add_epi32(dot_b, _mm256_slli_epi64(dot_b, 32)), 0xAA);
  const std::uint32_t bits = load_u16(p) | (kHasB ? load_u16(p + kB) << 16 : 0u);
  const __m128 prod = _mm_mul_ps(_mm_cvtph_ps(_mm_cvtsi32_si128(static_cast<int>(bits))), x.d);
  const __m256 scale = _mm256_castpd_ps(_mm256_broadcastsd_pd(_mm_castps_pd(prod)));
  acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), scale, acc);
}

// ---- Row loops ----------------------------------------------------------------------

// How far ahead of the pair being read each weight stream is prefetched (into L1), in
// bytes: the hardware prefetchers leave a stream well below the read bandwidth.
inline constexpr int kPrefetchBytes = 1024;

template <class F>
inline constexpr int kPairBytes = kPairBlocks * F::kBytes;

template <class F>
struct Traits {
  using X = XPair;
};
template <>
struct Traits<Q8_0> {
  using X = XPair8;
};

// The call's activation prepared for F, in a per-thread buffer reused across calls.
// Only the calling thread prepares it; the row loop's threads read it.
template <class F>
inline const typename Traits<F>::X* prepared_activation(const MatVecArgs& a, std::int64_t nb) {
  using X = typename Traits<F>::X;
  const std::int64_t pairs = (nb + 1) / 2;
  auto* out = static_cast<X*>(thread_scratch(static_cast<std::size_t>(pairs) * sizeof(X)));
  const auto* x = static_cast<const BlockQ8_1*>(a.x);
  if constexpr (std::is_same_v<F, Q8_0>) prepare_q8_activation(x, nb, out);
  else prepare_nibble_activation<F::kZero, F::kOffsetSum>(x, nb, out);
  return out;
}

inline void prefetch_pair(const std::uint8_t* p, int pair_bytes) {
  const auto a = reinterpret_cast<std::uintptr_t>(p) + kPrefetchBytes;
  x86::prefetch_line(a);
  if (pair_bytes > 64) x86::prefetch_line(a + 64);
}

// NR rows (w[i]: nb blocks each) against the prepared activation: every activation
// pair is loaded once per step and used by all NR rows. Each row's stream is
// prefetched kPrefetchBytes ahead; the callers hand over consecutive rows in each
// stream, so past a row's end that is the start of the stream's next row.
template <class F, int NR>
__attribute__((always_inline)) inline void dot_rows(const std::uint8_t* const w[NR], const typename Traits<F>::X* x,
                                                    std::int64_t nb, float out[NR]) {
  constexpr int kBytes = kPairBytes<F>;
  const std::int64_t full = nb / 2;
  if constexpr (std::is_same_v<F, Q8_0>) {
    __m256 acc[NR];
    for (int i = 0; i < NR; ++i) acc[i] = _mm256_setzero_ps();
    for (std::int64_t g = 0; g < full; ++g) {
      const XRegs8 xr = load_x8(x[g]);
      for (int i = 0; i < NR; ++i) {
        const std::uint8_t* p = w[i] + g * kBytes;
        prefetch_pair(p, kBytes);
        accumulate_pair_q8<true>(p, xr, acc[i]);
      }
    }
    if (nb % 2 != 0) {
      const XRegs8 xr = load_x8(x[full]);
      for (int i = 0; i < NR; ++i) accumulate_pair_q8<false>(w[i] + full * kBytes, xr, acc[i]);
    }
    for (int i = 0; i < NR; ++i) out[i] = x86::hsum(acc[i]);
  } else {
    RowAcc acc[NR];
    for (std::int64_t g = 0; g < full; ++g) {
      const XRegs xr = load_x<F>(x[g]);
      for (int i = 0; i < NR; ++i) {
        const std::uint8_t* p = w[i] + g * kBytes;
        prefetch_pair(p, kBytes);
        accumulate_pair<F, true>(p, xr, acc[i]);
      }
    }
    if (nb % 2 != 0) {
      const XRegs xr = load_x<F>(x[full]);
      for (int i = 0; i < NR; ++i) accumulate_pair<F, false>(w[i] + full * kBytes, xr, acc[i]);
    }
    for (int i = 0; i < NR; ++i) out[i] = finish<F>(acc[i]);
  }
}

// The kernel that takes one row at a time.
template <class F>
Status run_one_row(const MatVecArgs& a) {
  const std::int64_t nb = a.shape.cols / kLegacyBlock;
  const std::size_t row_bytes = static_cast<std::size_t>(nb) * F::kBytes;
  const auto* w = static_cast<const std::uint8_t*>(a.w);
  const auto* x = prepared_activation<F>(a, nb);
  parallel_row_tiles(a.shape.rows, a.threads, [&](std::int64_t r0, std::int64_t r1) {
    for (std::int64_t r = r0; r < r1; ++r) {
      const std::uint8_t* rows[1] = {w + r * row_bytes};
      dot_rows<F, 1>(rows, x, nb, a.y + r);
    }
  });
  return Status::Ok();
}

// The kernel that takes four rows at a time: a tile of n rows is cut into four
// contiguous quarters and step k takes row k of each, so each of the four weight
// streams walks consecutive rows (the reasons: x86/avx512vnni/q4_K_x4_q8k.cpp). The
// rows of small models are short, so the first kPrefetchBytes of quarters 1..3 are
// prefetched at the tile's start (quarter 0 continues the previous tile's last
// stream). Rows left over take the one-row path.
template <class F>
Status run_x4(const MatVecArgs& a) {
  const std::int64_t nb = a.shape.cols / kLegacyBlock;
  const std::size_t row_bytes = static_cast<std::size_t>(nb) * F::kBytes;
  const auto* w = static_cast<const std::uint8_t*>(a.w);
  const auto* x = prepared_activation<F>(a, nb);
  parallel_row_tiles(a.shape.rows, a.threads, [&](std::int64_t r0, std::int64_t r1) {
    const std::int64_t q = (r1 - r0) / 4;
    if (q > 0) {
      for (int i = 1; i < 4; ++i) {
        const auto start = reinterpret_cast<std::uintptr_t>(w + (r0 + i * q) * row_bytes);
        for (int offset = 0; offset < kPrefetchBytes; offset += 64) x86::prefetch_line(start + offset);
      }
    }
    for_rows_in_parts<4>(
        r0, r1,
        [&](const std::int64_t (&r)[4]) {
          const std::uint8_t* rows[4] = {w + r[0] * row_bytes, w + r[1] * row_bytes, w + r[2] * row_bytes,
                                         w + r[3] * row_bytes};
          float out[4];
          dot_rows<F, 4>(rows, x, nb, out);
          for (int i = 0; i < 4; ++i) a.y[r[i]] = out[i];
        },
        [&](std::int64_t r) {
          const std::uint8_t* rows[1] = {w + r * row_bytes};
          dot_rows<F, 1>(rows, x, nb, a.y + r);
        });
  });
  return Status::Ok();
}

inline constexpr std::uint32_t kFeatures = CpuFeature::AVX2 | CpuFeature::FMA | CpuFeature::F16C;

}  // namespace
}  // namespace qmv::legacy_avx2_int8
