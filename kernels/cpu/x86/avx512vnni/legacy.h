// Shared core of the legacy-quant x Q8_1 AVX-512 VNNI kernels (q4_0, q4_1, q5_0, q5_1,
// q8_0 in this folder, compiled with -mavx512f/bw/vl/vnni; include this header
// from no other file).
//
// A step takes a group of four consecutive weight blocks of a row. The group's bytes
// come in with at most four 64-byte loads (masked for the last, partial group of a
// row, so nothing past the matrix is read), and 16-bit permutes (vpermw/vpermt2w:
// every field of every legacy block starts at an even byte) gather them into
//   lo: the quants of weights 0..15 of block k in 128-bit lane k, unsigned,
//   hi: the same for weights 16..31,
//   d (and m): the block's fp16 scale (offset) in the four float lanes of lane k.
// Two vpdpbusd (u8 weights x s8 activations) then leave four int32 partial dots of
// block k in lane k, so one int -> float conversion and one FMA with d_w * d_x apply
// all four blocks' scales at once.
//
// Unsigned weights: vpdpbusd wants u8 x s8, so the stored (offset) quants are used as
// they are: Q4_0 stores q + 8, Q5_0 q + 16, and Q8_0's signed quants are made
// unsigned by flipping bit 7 (q + 128). The offset times the block's sum of
// activation quants (an exact integer, computed once per call) starts the int32
// accumulator, so the dot stays exact. For Q4_1/Q5_1 (w = d*q + m) the offset term is
// m_w * d_x * sum(q_x), one more FMA per group with a per-call vector.
//
// The activation (Q8_1, quantized once per vector by the caller) is re-ordered once
// per call into XGroup, the layout of the weight registers; its fp16 block sum s is
// not used (the exact integer sum is cheaper than its rounding error).
//
// Cost: a Q4_1 group is about 22 instructions, most of them 512-bit, and port 5 is
// the busiest (the permutes, of which vpermt2w costs two slots, the fp16 conversions,
// the extract): even in L2 the one-row kernel reads only a little faster than one
// core's DRAM read rate. Folding two groups' dots to two lanes per block before the
// scaling (half the scale instructions per block, for an unpack and an add) was no
// faster in L2 (faster on some shapes, slower on others: its partial last step costs
// more), so the step stays one group. The kernels are therefore close to
// compute-bound on one core; what lifts them to the read peak is memory-level
// parallelism (four prefetched streams, run_x4).
//
// Bounds: a lane sums 8 products |q_w * q_x| <= 255 * 128 plus an offset term
// |128 * sum(q_x)| <= 128 * 32 * 128, below 2^24, so int32 is exact and so is the
// conversion to float.
#pragma once

#include "kernels/cpu/x86/x86.h"

#include <cstdint>

#include "kernel.h"
#include "kernels/cpu_tiling.h"

namespace qmv::legacy_vnni {
namespace {

inline constexpr int kGroupBlocks = 4;

// Four blocks of the prepared activation: 256 bytes, four cache lines.
struct alignas(64) XGroup {
  std::int8_t lo[64];  // quants 0..15 of block k in bytes 16k..16k+15
  std::int8_t hi[64];  // quants 16..31
  float d[16];         // d_x of block k in lanes 4k..4k+3
  union {
    float offset_sum[16];  // _1 types: d_x * sum(q_x) / 4 in each lane of block k
    std::int32_t zero[16]; // _0 types: -offset * sum(q_x) in lane 4k, 0 in the others
  } sum;
};

// Re-orders nb Q8_1 blocks into XGroups for a weight type whose unsigned quants are
// offset by kZero (kOffsetSum: the type has an m term instead). The last group is
// padded with zero blocks, which contribute nothing against any weights.
template <int kZero, bool kOffsetSum>
inline void prepare_activation(const BlockQ8_1* x, std::int64_t nb, XGroup* out) {
  const std::int64_t groups = (nb + kGroupBlocks - 1) / kGroupBlocks;
  for (std::int64_t g = 0; g < groups; ++g) {
    XGroup& o = out[g];
    for (int k = 0; k < kGroupBlocks; ++k) {
      const std::int64_t b = g * kGroupBlocks + k;
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
      for (int j = 0; j < 4; ++j) {
        o.d[4 * k + j] = d;
        // d * sum is exact in float (11 + 13 significant bits); / 4 too.
        if constexpr (kOffsetSum) o.sum.offset_sum[4 * k + j] = d * static_cast<float>(sum) * 0.25f;
        else o.sum.zero[4 * k + j] = j == 0 ? -kZero * sum : 0;
      }
    }
  }
}

// The call's activation prepared for Format, in a per-thread buffer reused across
// calls. Only the calling thread prepares it; the row loop's threads read it.
template <class Format>
inline const XGroup* prepared_activation(const MatVecArgs& a, std::int64_t nb) {
  const std::int64_t groups = (nb + kGroupBlocks - 1) / kGroupBlocks;
  auto* out = static_cast<XGroup*>(thread_scratch(static_cast<std::size_t>(groups) * sizeof(XGroup)));
  prepare_activation<Format::kZero, Format::kOffsetSum>(static_cast<const BlockQ8_1*>(a.x), nb, out);
  return out;
}

// One group of a weight row as the decoders see it: bytes [O, O + N) of the group as
// a 512-bit register (N <= 64; the register's other bytes are zero or never read).
// A full group is read with plain loads of exactly its bytes.
struct FullGroup {
  const std::uint8_t* p;
  template <int O, int N>
  __m512i bytes() const {
    static_assert(N > 0 && N <= 64);
    if constexpr (N == 64) return _mm512_loadu_si512(p + O);
    else if constexpr (N == 32) return _mm512_zextsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + O)));
    else if constexpr (N == 16) return _mm512_zextsi128_si512(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + O)));
    else if constexpr (N == 8) return _mm512_zextsi128_si512(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + O)));
    else return _mm512_maskz_loadu_epi8((__mmask64{1} << N) - 1, p + O);
  }
};

// The last group of a row, of which only the first `valid` bytes (whole blocks)
// exist: masked loads, zeros past them, and masked-off bytes are never touched.
struct PartialGroup {
  const std::uint8_t* p;
  int valid;
  template <int O, int N>
  __m512i bytes() const {
    // (No std::clamp: library code instantiated here would carry the ISA flags, see
    // KernelRecord in kernel.h.)
    const int left = valid - O, n = left < 0 ? 0 : left > N ? N : left;
    const __mmask64 m = n >= 64 ? ~__mmask64{0} : (__mmask64{1} << n) - 1;
    return _mm512_maskz_loadu_epi8(m, p + O);
  }
};

// A permute control of 32 16-bit lanes, from word(i) for lane i.
struct WordIndex {
  alignas(64) std::int16_t w[32];
  __m512i load() const { return _mm512_load_si512(w); }
};
template <class F>
constexpr WordIndex word_index(F word) {
  WordIndex r{};
  for (int i = 0; i < 32; ++i) r.w[i] = static_cast<std::int16_t>(word(i));
  return r;
}

// Lanes 0..15: word `first` of block i/4 (the lanes' fp16 scale); lanes 16..31: word
// `second` of block (i-16)/4. Blocks are `stride` words apart.
constexpr WordIndex per_block_words(int stride, int first, int second) {
  return word_index([=](int i) { return i < 16 ? stride * (i / 4) + first : stride * ((i - 16) / 4) + second; });
}
// The 8 qs words (16 bytes) of block k in lanes 8k..8k+7; qs starts at word `qs`.
constexpr WordIndex nibble_words(int stride, int qs) {
  return word_index([=](int i) { return stride * (i / 8) + qs + i % 8; });
}

// A group's weights, ready for the dot products (see the top of this file).
struct Decoded {
  __m512i lo, hi;  // unsigned quants
  __m512 d;        // d_w per lane
  __m512 m;        // m_w per lane (the _1 types)
};

inline __m512 fp16_low(__m512i v) { return _mm512_cvtph_ps(_mm512_castsi512_si256(v)); }
inline __m512 fp16_high(__m512i v) { return _mm512_cvtph_ps(_mm512_extracti64x4_epi64(v, 1)); }

// Low and high nibbles of 64 qs bytes (weights 0..15 and 16..31 of each lane's block).
inline void split_nibbles(__m512i qs, Decoded& out) {
  const __m512i m4 = _mm512_set1_epi8(0x0f);
  out.lo = _mm512_and_si512(qs, m4);
  out.hi = _mm512_and_si512(_mm512_srli_epi16(qs, 4), m4);
}

// Adds the fifth bits: qh_words holds the low 16-bit halves of the four blocks' qh in
// its first 64 bits and the high halves in the next 64, which are exactly the byte
// masks of lo (bit 16k + i: weight i of block k) and hi (weight 16 + i).
inline void add_fifth_bits(__m128i qh_words, Decoded& out) {
  const __m512i bit4 = _mm512_set1_epi8(0x10);
  const __mmask64 lo_bits = _cvtu64_mask64(static_cast<std::uint64_t>(_mm_cvtsi128_si64(qh_words)));
  const __mmask64 hi_bits = _cvtu64_mask64(static_cast<std::uint64_t>(_mm_extract_epi64(qh_words, 1)));
  out.lo = _mm512_mask_add_epi8(out.lo, lo_bits, out.lo, bit4);
  out.hi = _mm512_mask_add_epi8(out.hi, hi_bits, out.hi, bit4);
}

// Q4_0: 18 bytes (9 words): d, qs[16]. Weights w = d * (q - 8).
struct Q4_0 {
  using Block = BlockQ4_0;
  static constexpr int kZero = 8;
  static constexpr bool kOffsetSum = false;
  template <class G>
  static Decoded decode(const G& g) {
    static constexpr WordIndex kQs = nibble_words(9, 1), kD = per_block_words(9, 0, 0);
    const __m512i z0 = g.template bytes<0, 64>(), z1 = g.template bytes<64, 8>();
    Decoded out;
    split_nibbles(_mm512_permutex2var_epi16(z0, kQs.load(), z1), out);
    out.d = fp16_low(_mm512_permutexvar_epi16(kD.load(), z0));
    return out;
  }
};

// Q4_1: 20 bytes (10 words): d, m, qs[16]. Weights w = d * q + m.
struct Q4_1 {
  using Block = BlockQ4_1;
  static constexpr int kZero = 0;
  static constexpr bool kOffsetSum = true;
  template <class G>
  static Decoded decode(const G& g) {
    static constexpr WordIndex kQs = nibble_words(10, 2), kDM = per_block_words(10, 0, 1);
    const __m512i z0 = g.template bytes<0, 64>(), z1 = g.template bytes<64, 16>();
    Decoded out;
    split_nibbles(_mm512_permutex2var_epi16(z0, kQs.load(), z1), out);
    const __m512i dm = _mm512_permutexvar_epi16(kDM.load(), z0);
    out.d = fp16_low(dm);
    out.m = fp16_high(dm);
    return out;
  }
};

// Q5_0: 22 bytes (11 words): d, qh[4], qs[16]. Weights w = d * (q - 16).
struct Q5_0 {
  using Block = BlockQ5_0;
  static constexpr int kZero = 16;
  static constexpr bool kOffsetSum = false;
  template <class G>
  static Decoded decode(const G& g) {
    // Lanes 0..3: the qh low halves, 4..7: the high halves, 16..31: d.
    static constexpr WordIndex kQs = nibble_words(11, 3);
    static constexpr WordIndex kQhD = word_index([](int i) {
      return i < 8 ? 11 * (i % 4) + 1 + i / 4 : i < 16 ? 0 : 11 * ((i - 16) / 4);
    });
    const __m512i z0 = g.template bytes<0, 64>(), z1 = g.template bytes<64, 24>();
    Decoded out;
    split_nibbles(_mm512_permutex2var_epi16(z0, kQs.load(), z1), out);
    const __m512i qh_d = _mm512_permutex2var_epi16(z0, kQhD.load(), z1);
    add_fifth_bits(_mm512_castsi512_si128(qh_d), out);
    out.d = fp16_high(qh_d);
    return out;
  }
};

// Q5_1: 24 bytes (12 words): d, m, qh[4], qs[16]. Weights w = d * q + m.
struct Q5_1 {
  using Block = BlockQ5_1;
  static constexpr int kZero = 0;
  static constexpr bool kOffsetSum = true;
  template <class G>
  static Decoded decode(const G& g) {
    static constexpr WordIndex kQs = nibble_words(12, 4), kDM = per_block_words(12, 0, 1);
    static constexpr WordIndex kQh = word_index([](int i) { return i < 8 ? 12 * (i % 4) + 2 + i / 4 : 0; });
    const __m512i z0 = g.template bytes<0, 64>(), z1 = g.template bytes<64, 32>();
    Decoded out;
    split_nibbles(_mm512_permutex2var_epi16(z0, kQs.load(), z1), out);
    add_fifth_bits(_mm512_castsi512_si128(_mm512_permutex2var_epi16(z0, kQh.load(), z1)), out);
    const __m512i dm = _mm512_permutex2var_epi16(z0, kDM.load(), z1);
    out.d = fp16_low(dm);
    out.m = fp16_high(dm);
    return out;
  }
};

// Q8_0: 34 bytes (17 words): d, qs[32] signed. Weights w = d * q; the quants are made
// unsigned by flipping bit 7 (q + 128). A group is 136 bytes: lo and d come from bytes
// 0..127, hi from bytes 16..79 and 72..135.
struct Q8_0 {
  using Block = BlockQ8_0;
  static constexpr int kZero = 128;
  static constexpr bool kOffsetSum = false;
  template <class G>
  static Decoded decode(const G& g) {
    static constexpr WordIndex kLo = nibble_words(17, 1), kD = per_block_words(17, 0, 0);
    // Word W of the group is word W - 8 of the load at byte 16 (W < 40), word W - 36
    // of the one at byte 72 (lanes 32.. of the pair).
    static constexpr WordIndex kHi = word_index([](int i) {
      const int word = 17 * (i / 8) + 9 + i % 8;
      return i < 16 ? word - 8 : 32 + word - 36;
    });
    const __m512i a = g.template bytes<0, 64>(), b = g.template bytes<64, 64>();
    const __m512i c = g.template bytes<16, 64>(), e = g.template bytes<72, 64>();
    const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
    Decoded out;
    out.lo = _mm512_xor_si512(_mm512_permutex2var_epi16(a, kLo.load(), b), flip);
    out.hi = _mm512_xor_si512(_mm512_permutex2var_epi16(c, kHi.load(), e), flip);
    out.d = fp16_low(_mm512_permutex2var_epi16(a, kD.load(), b));
    return out;
  }
};

// One group of the prepared activation in registers, shared by the rows of a step.
struct XRegs {
  __m512i lo, hi, zero;
  __m512 d, offset_sum;
};

template <class Format>
inline XRegs load_x(const XGroup& x) {
  XRegs r;
  r.lo = _mm512_load_si512(x.lo);
  r.hi = _mm512_load_si512(x.hi);
  r.d = _mm512_load_ps(x.d);
  if constexpr (Format::kOffsetSum) {
    r.offset_sum = _mm512_load_ps(x.sum.offset_sum);
    r.zero = _mm512_setzero_si512();
  } else {
    r.zero = _mm512_load_si512(x.sum.zero);
    r.offset_sum = _mm512_setzero_ps();
  }
  return r;
}

// A row's float accumulators: the scale term, and apart from it (so that the two
// FMAs of a group do not form one dependency chain) the _1 types' offset term.
struct RowAcc {
  __m512 scaled = _mm512_setzero_ps();
  __m512 offset = _mm512_setzero_ps();
};

// Adds the group's four block dots.
template <class Format>
__attribute__((always_inline)) inline void accumulate(const Decoded& w, const XRegs& x, RowAcc& acc) {
  __m512i dot = _mm512_dpbusd_epi32(x.zero, w.lo, x.lo);
  dot = _mm512_dpbusd_epi32(dot, w.hi, x.hi);
  acc.scaled = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_mul_ps(w.d, x.d), acc.scaled);
  if constexpr (Format::kOffsetSum) acc.offset = _mm512_fmadd_ps(w.m, x.offset_sum, acc.offset);
}

// How far ahead of the group being read each weight stream is prefetched (into L1),
// in bytes; the hardware prefetchers leave a stream well below the read bandwidth
// (see q4_K.h). 1024 B was the best distance tried with the
// four-row Q4_1 kernel on short rows; farther ahead lost steadily.
inline constexpr int kPrefetchBytes = 1024;

template <class Format>
inline constexpr int kGroupBytes = kGroupBlocks * static_cast<int>(sizeof(typename Format::Block));

// NR rows (w[i]: nb blocks each) against the prepared activation: every activation
// group is loaded once per step and used by all NR rows. Each row's stream is
// prefetched kPrefetchBytes ahead; the callers hand over consecutive rows in each
// stream, so past a row's end that is the start of the stream's next row.
template <class Format, int NR>
inline void dot_rows(const std::uint8_t* const w[NR], const XGroup* x, std::int64_t nb, float out[NR]) {
  constexpr int kBytes = kGroupBytes<Format>;
  const std::int64_t full = nb / kGroupBlocks;
  RowAcc acc[NR];
  for (std::int64_t g = 0; g < full; ++g) {
    const XRegs xr = load_x<Format>(x[g]);
    for (int i = 0; i < NR; ++i) {
      const std::uint8_t* p = w[i] + g * kBytes;
      for (int line = 0; line < (kBytes + 63) / 64; ++line)
        x86::prefetch_line(reinterpret_cast<std::uintptr_t>(p) + kPrefetchBytes + 64 * line);
      accumulate<Format>(Format::decode(FullGroup{p}), xr, acc[i]);
    }
  }
  if (const int rest = static_cast<int>(nb % kGroupBlocks); rest != 0) {
    const XRegs xr = load_x<Format>(x[full]);
    const int valid = rest * static_cast<int>(sizeof(typename Format::Block));
    for (int i = 0; i < NR; ++i)
      accumulate<Format>(Format::decode(PartialGroup{w[i] + full * kBytes, valid}), xr, acc[i]);
  }
  for (int i = 0; i < NR; ++i) {
    if constexpr (Format::kOffsetSum) out[i] = _mm512_reduce_add_ps(_mm512_add_ps(acc[i].scaled, acc[i].offset));
    else out[i] = _mm512_reduce_add_ps(acc[i].scaled);
  }
}

// The kernel that takes one row at a time.
template <class Format>
Status run_one_row(const MatVecArgs& a) {
  const std::int64_t nb = a.shape.cols / kLegacyBlock;
  const std::size_t row_bytes = static_cast<std::size_t>(nb) * sizeof(typename Format::Block);
  const auto* w = static_cast<const std::uint8_t*>(a.w);
  const XGroup* x = prepared_activation<Format>(a, nb);
  parallel_row_tiles(a.shape.rows, a.threads, [&](std::int64_t r0, std::int64_t r1) {
    for (std::int64_t r = r0; r < r1; ++r) {
      const std::uint8_t* rows[1] = {w + r * row_bytes};
      dot_rows<Format, 1>(rows, x, nb, a.y + r);
    }
  });
  return Status::Ok();
}

// The kernel that takes four rows at a time: a tile of n rows is cut into four
// contiguous quarters and step k takes row k of each, so each of the four weight
// streams walks consecutive rows and the streams lie in different pages (the reasons:
// q4_K_x4_q8k.cpp). Rows left over take the one-row path.
//
// The rows of small models are short (576 columns: 360 bytes of Q4_1), so a quarter
// of a 64-row tile is only a few KB and the first kPrefetchBytes of each quarter
// would be read unprefetched: the tile's start prefetches them. Quarter 0 needs none,
// as the previous tile's last stream runs on into it. On short rows this start
// prefetch brings the cold kernels much closer to the read peak, most for Q4_1. Two or
// eight streams instead of four were slower for Q4_1.
template <class Format>
Status run_x4(const MatVecArgs& a) {
  const std::int64_t nb = a.shape.cols / kLegacyBlock;
  const std::size_t row_bytes = static_cast<std::size_t>(nb) * sizeof(typename Format::Block);
  const auto* w = static_cast<const std::uint8_t*>(a.w);
  const XGroup* x = prepared_activation<Format>(a, nb);
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
          dot_rows<Format, 4>(rows, x, nb, out);
          for (int i = 0; i < 4; ++i) a.y[r[i]] = out[i];
        },
        [&](std::int64_t r) {
          const std::uint8_t* rows[1] = {w + r * row_bytes};
          dot_rows<Format, 1>(rows, x, nb, a.y + r);
        });
  });
  return Status::Ok();
}

inline constexpr std::uint32_t kFeatures = CpuFeature::AVX512F | CpuFeature::AVX512BW | CpuFeature::AVX512VL |
                                           CpuFeature::AVX512VNNI | CpuFeature::F16C;

}  // namespace
}  // namespace qmv::legacy_vnni
