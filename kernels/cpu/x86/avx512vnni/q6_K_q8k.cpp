// Q6_K weights x Q8_K activations, AVX-512 VNNI, one row at a time: 64-weight u6
// vectors, dpbusd, packs + dpwssd with the int8 scales (q6_K.h); the
// -32 centring as (-32*scale_g) . bsums[g], one vpmaddwd per super-block. The float
// scales are applied once per super-block into a __m512 accumulator; one horizontal
// sum per row. A software prefetch runs kPrefetch super-blocks ahead.
#include "q6_K.h"

#include <cstdint>

#include "kernel.h"
#include "kernels/cpu_tiling.h"

namespace {

// The shared constants and the -32 of the centring.
struct Consts : qmv::q6k_vnni::Consts {
  __m256i neg32 = _mm256_set1_epi16(-32);
};

// The int32 sums of one super-block, centring included (the dd factor still to apply).
inline __m512i block_dot(const qmv::BlockQ6K* w, const qmv::BlockQ8K* x, const Consts& c) {
  const __m256i sc16 = qmv::q6k_vnni::scales16(w);
  const __m512i sumi = _mm512_zextsi256_si512(
      _mm256_madd_epi16(_mm256_mullo_epi16(sc16, c.neg32),
                        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x->bsums))));
  return qmv::q6k_vnni::add_block_dots(
      w, sc16, sumi, [x](int j) { return _mm512_loadu_si512(x->qs + 64 * j); }, c);
}

// Super-blocks ahead that the software prefetch fetches. Rows are contiguous and
// computed in order, so the stream runs on into the next row: w + kPrefetch is always
// what this loop reads next. Without it each new 4 KiB page, where the hardware
// streamer stops, stalls on a demand miss; 8 blocks ahead is the best distance, with
// shorter ones not hiding the miss and longer ones losing again.
constexpr int kPrefetch = 8;

float dot_row(const qmv::BlockQ6K* w, const qmv::BlockQ8K* x, std::int64_t n_blocks) {
  const Consts c;
  __m512 acc = _mm512_setzero_ps();
  for (const qmv::BlockQ6K* const end = w + n_blocks; w != end; ++w, ++x) {
    qmv::q6k_x86::prefetch_block(w, kPrefetch);
    const __m512i sumi = block_dot(w, x, c);
    acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sumi), _mm512_set1_ps(_cvtsh_ss(w->d) * x->d), acc);
  }
  return _mm512_reduce_add_ps(acc);
}

}  // namespace

QMV_REGISTER_KERNEL(qmv::cpu_matvec_kernel(
    "q6_K.cpu.avx512vnni_q8k", qmv::WeightType::Q6_K, qmv::ActFormat::Q8_K,
    qmv::run_rows<qmv::BlockQ6K, qmv::BlockQ8K, dot_row>,
    "Q6_K x Q8_K, AVX-512 VNNI, one row: 64-weight u6 vectors, dpbusd, packs + dpwssd "
    "with the int8 scales, -32 via bsums, one hsum per row, prefetch",
    qmv::CpuFeature::AVX512F | qmv::CpuFeature::AVX512BW | qmv::CpuFeature::AVX512VL |
        qmv::CpuFeature::AVX512VNNI | qmv::CpuFeature::AVX2 | qmv::CpuFeature::FMA |
        qmv::CpuFeature::F16C));
