// Q4_K weights in the row-interleaved layout (row_interleaved.h) x Q8_K activations,
// AVX2: eight rows per step, one 32-bit lane per row. Per pair of sub-blocks, eight
// 32-byte loads hold four weights of each of the eight rows per lane: low nibbles
// (sub-block 2g) meet a broadcast of the four matching activation quants in
// vpmaddubsw, high nibbles (sub-block 2g+1) the four quants 32 further on. Each
// sub-block's eight int16 pair sums add up in int16, one vpmaddwd against ones gives
// the eight rows' sub-block dots, and one vpmulld by the eight rows' 6-bit scales
// (unpacked to bytes by the repack, loaded eight at a time) weights them. The min
// term is the eight rows' mins times the sub-block's activation sum from the Q8_K
// block sums. The rows' d and dmin convert in one vcvtph2ps each.
//
// Bounds: a vpmaddubsw pair is at most 2 * 15 * 128 = 3840 in size and eight of them
// at most 30720 < 2^15; a sub-block dot (<= 61440) times a scale (<= 63), over eight
// sub-blocks, and the mins term (63 * 4096 * 8) are far inside int32 and the float
// conversion loses nothing that matters next to the Q8_K rounding.
#include "x86_common.h"

#include <cstdint>
#include <cstring>

#include "kernel.h"
#include "kernels/cpu_tiling.h"
#include "row_interleaved.h"

namespace {

using qmv::interleave::BlockQ4_Kx8;
using qmv::interleave::kGroupRows;

// How far ahead of the super-block being read each weight stream is prefetched, in
// bytes (the hardware prefetcher alone leaves a single stream short of the peak).
constexpr int kPrefetchBytes = 1024;

inline __m256i broadcast_quad(const std::int8_t* q) {
  std::int32_t v;
  std::memcpy(&v, q, sizeof(v));
  return _mm256_set1_epi32(v);
}

inline __m256i bytes_to_lanes(const std::uint8_t* eight) {
  return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(eight)));
}

inline __m256 fp16x8(const qmv::fp16_bits* h) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h)));
}

// NG groups of eight rows against the activation, into out[i][0..7]: each group a
// weight stream of its own, each activation quad loaded once for all of them.
template <int NG>
void dot_groups(const BlockQ4_Kx8* const w[NG], const qmv::BlockQ8K* x, std::int64_t nb, float* const out[NG]) {
  const __m256i m4 = _mm256_set1_epi8(0x0f);
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc[NG];
  for (int i = 0; i < NG; ++i) acc[i] = _mm256_setzero_ps();
  for (std::int64_t b = 0; b < nb; ++b) {
    const qmv::BlockQ8K& xb = x[b];
    const __m256 dx = _mm256_set1_ps(xb.d);
    for (int i = 0; i < NG; ++i) {
      const BlockQ4_Kx8& wb = w[i][b];
      const std::uintptr_t here = reinterpret_cast<std::uintptr_t>(&wb);
      for (int line = 0; line < static_cast<int>(sizeof(BlockQ4_Kx8)); line += 64)
        qmv::x86::prefetch_line(here + kPrefetchBytes + line);
      __m256i isum = _mm256_setzero_si256(), imin = _mm256_setzero_si256();
      for (int g = 0; g < 4; ++g) {
        __m256i lo16 = _mm256_setzero_si256(), hi16 = _mm256_setzero_si256();
        const std::int8_t* xq = xb.qs + 64 * g;
        for (int c = 0; c < 8; ++c) {
          const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb.qs[g][c]));
          lo16 = _mm256_add_epi16(lo16, _mm256_maddubs_epi16(_mm256_and_si256(v, m4), broadcast_quad(xq + 4 * c)));
          hi16 = _mm256_add_epi16(
              hi16, _mm256_maddubs_epi16(_mm256_and_si256(_mm256_srli_epi16(v, 4), m4), broadcast_quad(xq + 32 + 4 * c)));
        }
        isum = _mm256_add_epi32(isum, _mm256_mullo_epi32(_mm256_madd_epi16(lo16, ones), bytes_to_lanes(wb.scales[2 * g])));
        isum = _mm256_add_epi32(isum,
                                _mm256_mullo_epi32(_mm256_madd_epi16(hi16, ones), bytes_to_lanes(wb.scales[2 * g + 1])));
      }
      for (int j = 0; j < 8; ++j) {
        const __m256i xsum = _mm256_set1_epi32(xb.bsums[2 * j] + xb.bsums[2 * j + 1]);
        imin = _mm256_add_epi32(imin, _mm256_mullo_epi32(bytes_to_lanes(wb.mins[j]), xsum));
      }
      acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_mul_ps(fp16x8(wb.d), dx), acc[i]);
      acc[i] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(imin), _mm256_mul_ps(fp16x8(wb.dmin), dx), acc[i]);
    }
  }
  for (int i = 0; i < NG; ++i) _mm256_storeu_ps(out[i], acc[i]);
}

template <int NG>
qmv::Status run(const qmv::MatVecArgs& a) {
  const auto* m = static_cast<const qmv::interleave::Q4_Kx8Matrix*>(a.prepared);
  if (!m || !(m->shape == a.shape)) return qmv::interleave::not_prepared_for(a.shape);
  const std::int64_t nb = m->blocks;
  const auto* x = static_cast<const qmv::BlockQ8K*>(a.x);
  qmv::interleave::for_each_group<NG>(*m, a.y, a.threads, [&](auto count, const BlockQ4_Kx8* const* w,
                                                                float* const* out) {
    dot_groups<decltype(count)::value>(w, x, nb, out);
  });
  return qmv::Status::Ok();
}

qmv::Status run_up_gate(const qmv::MatVecArgs& a) {
  const auto* p = static_cast<const qmv::interleave::RowGroupPair<BlockQ4_Kx8>*>(a.prepared);
  if (!p || !(p->first.shape == a.shape)) return qmv::interleave::not_prepared_for(a.shape);
  const std::int64_t nb = p->first.blocks;
  const auto* x = static_cast<const qmv::BlockQ8K*>(a.x);
  qmv::interleave::for_each_group_pair(*p, a.y, a.y2, a.threads, [&](auto count, const BlockQ4_Kx8* const* w,
                                                                      float* const* out) {
    dot_groups<decltype(count)::value>(w, x, nb, out);
  });
  return qmv::Status::Ok();
}

constexpr std::uint32_t kFeatures = qmv::CpuFeature::AVX2 | qmv::CpuFeature::FMA | qmv::CpuFeature::F16C;

template <int NG>
qmv::KernelRecord record(const char* name, const char* description) {
  qmv::KernelRecord r =
      qmv::cpu_matvec_kernel(name, qmv::WeightType::Q4_K, qmv::ActFormat::Q8_K, run<NG>, description, kFeatures);
  r.prepare = qmv::interleave::prepare_rows<BlockQ4_Kx8>;
  r.release = qmv::interleave::release_rows<BlockQ4_Kx8>;
  return r;
}

qmv::KernelRecord up_gate_record() {
  qmv::KernelRecord r = qmv::cpu_matvec_kernel(
      "q4_K.cpu.avx2_r8_up_gate_q8k", qmv::WeightType::Q4_K, qmv::ActFormat::Q8_K, run_up_gate,
      "fused FFN up+gate (y = W x, y2 = W2 x), Q4_K x Q8_K, AVX2, both matrices repacked once into "
      "eight-row interleaved super-blocks: group g of each per step, two weight streams sharing "
      "each activation load, both outputs in one parallel region",
      kFeatures);
  r.op = qmv::OpKind::FusedUpGate;
  r.prepare = qmv::interleave::prepare_row_pair<BlockQ4_Kx8>;
  r.release = qmv::interleave::release_row_pair<BlockQ4_Kx8>;
  return r;
}

}  // namespace

QMV_REGISTER_KERNEL(record<1>(
    "q4_K.cpu.avx2_r8_q8k",
    "Q4_K x Q8_K, AVX2, weights repacked once into eight-row interleaved super-blocks "
    "(scales and mins a byte each): one float lane per row, one weight stream per thread"));
QMV_REGISTER_KERNEL(record<2>(
    "q4_K.cpu.avx2_r8x2_q8k",
    "Q4_K x Q8_K, AVX2, eight-row interleaved super-blocks as avx2_r8_q8k, two weight "
    "streams per thread (the two halves of its rows) sharing each activation load"));
QMV_REGISTER_KERNEL(up_gate_record());
