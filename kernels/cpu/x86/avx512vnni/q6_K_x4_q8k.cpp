// Q6_K weights x Q8_K activations, AVX-512 VNNI, four rows at a time.
//
// The super-block arithmetic is that of q6_K.cpu.avx512vnni_q8k (q6_K.h):
// four 64-weight u6 vectors per super-block, dpbusd against the int8 activations, two
// batches packed to int16 and scaled by one vpdpwssd against the int8 sub-block scales.
// The -32 centring comes from the Q8_K bsums: (32*scale_g) . (-bsums[g]) by one
// vpmaddwd per super-block starts the int32 sum.
//
// What four rows add:
// - every activation load is shared: the four 64-byte quant vectors and the negated
//   bsums are loaded (and negated) once per super-block for four rows;
// - the four int32 block sums are reduced together: three unpack+add steps leave row r's
//   partial sums in lane r of every 128-bit lane, so one int->float conversion and one
//   fma against (d_r*d_x for r = 0..3, converted from fp16 together) finish the block
//   for all four rows, and the end of the rows is one 16-lane to 4-lane sum;
// - a software prefetch runs kPrefetch iterations ahead in each of the four row streams.
// Rows left over (rows % 4 of each tile, so every row when rows < 4) take the one-row
// loop with the same block arithmetic.
//
// Bounds: per super-block and row |sum| <= 256*63*128*128 + 32*128*16*2048 < 2^31 (also
// for any subset of lanes, so the integer reduction across lanes cannot overflow).
#include "q6_K.h"

#include <cstdint>

#include "kernel.h"
#include "kernels/cpu_tiling.h"

namespace {

// Iterations (one super-block of each of the four rows, 840 bytes) the prefetch runs
// ahead. Without it the four streams stay well below the read peak on cold weights;
// 4 to 16 iterations ahead all close most of the gap (8 the best, 32 losing again), and
// prefetching into L2 (_MM_HINT_T1) did the same as into L1. The kernel's share of the
// peak per shape: results/intel-xeon-2c/default.csv.
constexpr std::int64_t kPrefetch = 8;

using qmv::q6k_vnni::Consts;

// The activation of one super-block, loaded once and shared by the rows.
struct XBlock {
  __m512i q[4];  // qs[64j..64j+63], batch j
  __m256i neg_bsums;
  float d;
  explicit XBlock(const qmv::BlockQ8K* x)
      : q{_mm512_loadu_si512(x->qs), _mm512_loadu_si512(x->qs + 64),
          _mm512_loadu_si512(x->qs + 128), _mm512_loadu_si512(x->qs + 192)},
        neg_bsums(_mm256_sub_epi16(_mm256_setzero_si256(),
                                   _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x->bsums)))),
        d(x->d) {}
};

// The int32 sums of one super-block of one row, centring included (d*d_x still to apply).
inline __m512i block_dot(const qmv::BlockQ6K* w, const XBlock& x, const Consts& c) {
  const __m256i sc16 = qmv::q6k_vnni::scales16(w);
  // -32*sum_g scale_g*bsums[g]: |32*scale| <= 4096 and |bsums| <= 2048 fit int16.
  const __m512i sumi =
      _mm512_zextsi256_si512(_mm256_madd_epi16(_mm256_slli_epi16(sc16, 5), x.neg_bsums));
  return qmv::q6k_vnni::add_block_dots(w, sc16, sumi, [&x](int j) { return x.q[j]; }, c);
}

// One row (the rows a tile has over a multiple of four).
float dot_row(const qmv::BlockQ6K* w, const qmv::BlockQ8K* x, std::int64_t n_blocks,
              const Consts& c) {
  __m512 acc = _mm512_setzero_ps();
  for (const qmv::BlockQ6K* const end = w + n_blocks; w != end; ++w, ++x) {
    qmv::q6k_x86::prefetch_block(w, kPrefetch);
    const XBlock xb(x);
    acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(block_dot(w, xb, c)),
                          _mm512_set1_ps(_cvtsh_ss(w->d) * xb.d), acc);
  }
  return _mm512_reduce_add_ps(acc);
}

// Rows w, w+n_blocks, w+2n_blocks, w+3n_blocks into y[0..3].
//
// Prefetch: the four rows are read as four streams. The block stream k reads kPrefetch
// iterations from now is kPrefetch blocks further along its row or, past the row's
// end, in row k of a following group of four (the rows this thread computes next; at
// a tile's end the fetch is wasted, not wrong). So the address is w_k + b + off, with
// off constant over two ranges of b: no per-iteration branch or division.
void dot_x4(const qmv::BlockQ6K* w, const qmv::BlockQ8K* x, std::int64_t n_blocks,
               const Consts& c, float* y) {
  const qmv::BlockQ6K* const w0 = w;
  const qmv::BlockQ6K* const w1 = w + n_blocks;
  const qmv::BlockQ6K* const w2 = w + 2 * n_blocks;
  const qmv::BlockQ6K* const w3 = w + 3 * n_blocks;
  // 128-bit lane L, element r: row r's partial sums.
  __m512 acc = _mm512_setzero_ps();
  auto step = [&](std::int64_t b, std::int64_t pf_off) {
    qmv::q6k_x86::prefetch_block(w0 + b, pf_off);
    qmv::q6k_x86::prefetch_block(w1 + b, pf_off);
    qmv::q6k_x86::prefetch_block(w2 + b, pf_off);
    qmv::q6k_x86::prefetch_block(w3 + b, pf_off);
    const XBlock xb(x + b);
    const __m512i s0 = block_dot(w0 + b, xb, c), s1 = block_dot(w1 + b, xb, c);
    const __m512i s2 = block_dot(w2 + b, xb, c), s3 = block_dot(w3 + b, xb, c);
    // Per 128-bit lane: [s0 s1 s0 s1] pair sums, then [s0 s1 s2 s3].
    const __m512i t01 =
        _mm512_add_epi32(_mm512_unpacklo_epi32(s0, s1), _mm512_unpackhi_epi32(s0, s1));
    const __m512i t23 =
        _mm512_add_epi32(_mm512_unpacklo_epi32(s2, s3), _mm512_unpackhi_epi32(s2, s3));
    const __m512i u =
        _mm512_add_epi32(_mm512_unpacklo_epi64(t01, t23), _mm512_unpackhi_epi64(t01, t23));
    __m128i d16 = _mm_cvtsi32_si128(w0[b].d);
    d16 = _mm_insert_epi16(d16, w1[b].d, 1);
    d16 = _mm_insert_epi16(d16, w2[b].d, 2);
    d16 = _mm_insert_epi16(d16, w3[b].d, 3);
    const __m128 dd = _mm_mul_ps(_mm_cvtph_ps(d16), _mm_set1_ps(xb.d));
    acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(u), _mm512_broadcast_f32x4(dd), acc);
  };
  const std::int64_t groups_ahead = kPrefetch / n_blocks, rem = kPrefetch % n_blocks;
  const std::int64_t off_near = 4 * groups_ahead * n_blocks + rem;  // b + rem < n_blocks
  const std::int64_t off_far = off_near + 3 * n_blocks;             // on into the next group
  const std::int64_t split = n_blocks - rem;
  for (std::int64_t b = 0; b < split; ++b) step(b, off_near);
  for (std::int64_t b = split; b < n_blocks; ++b) step(b, off_far);
  const __m256 h =
      _mm256_add_ps(_mm512_castps512_ps256(acc),
                    _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc), 1)));
  _mm_storeu_ps(y, _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1)));
}

qmv::Status run(const qmv::MatVecArgs& a) {
  const std::int64_t n_blocks = a.shape.cols / qmv::kSuperBlock;
  const auto* w = static_cast<const qmv::BlockQ6K*>(a.w);
  const auto* x = static_cast<const qmv::BlockQ8K*>(a.x);
  qmv::parallel_row_tiles(a.shape.rows, a.threads, [&](std::int64_t r0, std::int64_t r1) {
    const Consts c;
    std::int64_t r = r0;
    for (; r + 4 <= r1; r += 4) dot_x4(w + r * n_blocks, x, n_blocks, c, a.y + r);
    for (; r < r1; ++r) a.y[r] = dot_row(w + r * n_blocks, x, n_blocks, c);
  });
  return qmv::Status::Ok();
}

}  // namespace

QMV_REGISTER_KERNEL(qmv::cpu_matvec_kernel(
    "q6_K.cpu.avx512vnni_x4_q8k", qmv::WeightType::Q6_K, qmv::ActFormat::Q8_K, run,
    "Q6_K x Q8_K, AVX-512 VNNI, four rows share each activation load and one fma per "
    "block, software prefetch in the four row streams",
    qmv::CpuFeature::AVX512F | qmv::CpuFeature::AVX512BW | qmv::CpuFeature::AVX512VL |
        qmv::CpuFeature::AVX512VNNI | qmv::CpuFeature::AVX2 | qmv::CpuFeature::FMA |
        qmv::CpuFeature::F16C));
