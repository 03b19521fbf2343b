// Q6_K weights x Q8_K activations, AVX-512 VNNI, four rows at a time.
//
// The super-block arithmetic is that of q6_K.cpu.avx512_vnni: a super-block is four
// "batches" of 64 consecutive weights, one 512-bit vector each. Half h (weights
// 128h..128h+127) loads its 64 ql bytes once; their low nibbles are weights 128h+0..63
// and their high nibbles 128h+64..127, in order. The two high bits come from the half's
// 32 qh bytes broadcast to both 256-bit halves and masked once (0x33 keeps the bit
// pairs of weights l and 64+l in the low half, 0xCC those of 32+l and 96+l in the high
// half); one variable 32-bit shift per batch moves the right pair to bits 4-5 with
// zeros above, and one vpternlogd (bitwise select by 0x0F) takes bits 0-3 from the
// nibble and 4-7 from the pair. _mm512_dpbusd_epi32 multiplies the unsigned quants
// (u8, q in [0,63]) with the int8 activations, four products per int32 lane; lane i of
// batch j is sub-block 4j+i/4. A lane fits int16 (|4*63*128| < 2^15), so two batches
// are packed to int16 (vpackssdw, exact) and one vpdpwssd against the int8 sub-block
// scales (vpermw into the packed order) applies the scales and sums into int32. The
// -32 centring comes from the Q8_K bsums: (32*scale_g) . (-bsums[g]) by one vpmaddwd
// per super-block starts the int32 sum.
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

// GCC 12's AVX-512 headers initialise their "undefined" vectors with themselves, which
// -Wuninitialized reports at every inlined use (GCC bug 105593, fixed in GCC 13).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <cstdint>

#include "kernel.h"

namespace {

// Iterations (one super-block of each of the four rows, 840 bytes) the prefetch runs
// ahead. Measured on the 2-core Xeon VM (1 thread, cold, p10 of 40-80 interleaved
// calls; read peak 15.6 GB/s): 4096x4096 no prefetch 11.8 GB/s, 2: 14.1, 4: 15.2,
// 6: 15.3, 8: 15.5, 16: 15.3, 32: 14.8; 4096x11008 none 13.3, 4: 15.4, 8: 16.0, 16: 15.8,
// 32: 14.9; 14336x4096 none 11.6, 8: 15.2, 32: 14.4; 4096x512 none 9.9, 4-16: 14.9-15.4.
// The _MM_HINT_T1 (L2) hint measured the same as T0.
constexpr std::int64_t kPrefetch = 8;

struct Consts {
  __m512i m0F = _mm512_set1_epi8(0x0F);
  // qh bytes keep bit pairs 0-1 and 4-5 in the low 256 bits, 2-3 and 6-7 in the high.
  __m512i qh_keep =
      _mm512_inserti64x4(_mm512_set1_epi8(0x33), _mm256_set1_epi8(static_cast<char>(0xCC)), 1);
  // 32-bit shift counts moving pair 0-1 / 2-3 (low-nibble batch: left by 4 / 2) and
  // pair 4-5 / 6-7 (high-nibble batch: right by 0 / 2) to bits 4-5.
  __m512i shl_lo = _mm512_setr_epi32(4, 4, 4, 4, 4, 4, 4, 4, 2, 2, 2, 2, 2, 2, 2, 2);
  __m512i shr_hi = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 2, 2, 2, 2, 2, 2, 2, 2);
  // vpermw indexes building the int16 scales of packs(batch a, batch b): in 128-bit
  // lane L, the first four int16 are batch a's sub-block, the next four batch b's.
  __m512i idx01 = make_idx(0, 4);
  __m512i idx23 = make_idx(8, 12);

  static __m512i make_idx(int a, int b) {
    alignas(64) std::int16_t idx[32];
    for (int p = 0; p < 32; ++p) idx[p] = static_cast<std::int16_t>((p % 8 < 4 ? a : b) + p / 8);
    return _mm512_load_si512(idx);
  }
};

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
  const __m256i sc16 =
      _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w->scales)));
  // -32*sum_g scale_g*bsums[g]: |32*scale| <= 4096 and |bsums| <= 2048 fit int16.
  __m512i sumi = _mm512_zextsi256_si512(_mm256_madd_epi16(_mm256_slli_epi16(sc16, 5), x.neg_bsums));
  const __m512i sc = _mm512_castsi256_si512(sc16);

  __m512i r[4];
  for (int h = 0; h < 2; ++h) {
    const __m512i ql = _mm512_loadu_si512(w->ql + 64 * h);
    const __m512i qh = _mm512_broadcast_i64x4(
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w->qh + 32 * h)));
    const __m512i qhm = _mm512_and_si512(qh, c.qh_keep);
    const __m512i hi_lo = _mm512_sllv_epi32(qhm, c.shl_lo);
    const __m512i hi_hi = _mm512_srlv_epi32(qhm, c.shr_hi);
    // vpternlogd 0xD8: m0F ? nibble : pair, bit by bit (the destination is the dying pair).
    const __m512i q_lo = _mm512_ternarylogic_epi32(hi_lo, ql, c.m0F, 0xD8);
    const __m512i q_hi = _mm512_ternarylogic_epi32(hi_hi, _mm512_srli_epi16(ql, 4), c.m0F, 0xD8);
    r[2 * h] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), q_lo, x.q[2 * h]);
    r[2 * h + 1] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), q_hi, x.q[2 * h + 1]);
  }
  sumi = _mm512_dpwssd_epi32(sumi, _mm512_packs_epi32(r[0], r[1]),
                             _mm512_permutexvar_epi16(c.idx01, sc));
  sumi = _mm512_dpwssd_epi32(sumi, _mm512_packs_epi32(r[2], r[3]),
                             _mm512_permutexvar_epi16(c.idx23, sc));
  return sumi;
}

// Fetches the cache lines of the super-block `ahead` blocks after w (210 bytes: lines
// at +0, +64, +128, +192 cover it, and consecutive blocks leave no line out). The
// address is formed as an integer: it may lie past the matrix, where a prefetch is
// harmless (it never faults).
inline void prefetch_block(const qmv::BlockQ6K* w, std::int64_t ahead) {
  const std::uintptr_t a = reinterpret_cast<std::uintptr_t>(w) +
                           static_cast<std::uintptr_t>(ahead) * sizeof(qmv::BlockQ6K);
  _mm_prefetch(reinterpret_cast<const char*>(a), _MM_HINT_T0);
  _mm_prefetch(reinterpret_cast<const char*>(a + 64), _MM_HINT_T0);
  _mm_prefetch(reinterpret_cast<const char*>(a + 128), _MM_HINT_T0);
  _mm_prefetch(reinterpret_cast<const char*>(a + 192), _MM_HINT_T0);
}

// One row (the rows a tile has over a multiple of four).
float dot_row(const qmv::BlockQ6K* w, const qmv::BlockQ8K* x, std::int64_t n_blocks,
              const Consts& c) {
  __m512 acc = _mm512_setzero_ps();
  for (const qmv::BlockQ6K* const end = w + n_blocks; w != end; ++w, ++x) {
    prefetch_block(w, kPrefetch);
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
void dot_4rows(const qmv::BlockQ6K* w, const qmv::BlockQ8K* x, std::int64_t n_blocks,
               const Consts& c, float* y) {
  const qmv::BlockQ6K* const w0 = w;
  const qmv::BlockQ6K* const w1 = w + n_blocks;
  const qmv::BlockQ6K* const w2 = w + 2 * n_blocks;
  const qmv::BlockQ6K* const w3 = w + 3 * n_blocks;
  // 128-bit lane L, element r: row r's partial sums.
  __m512 acc = _mm512_setzero_ps();
  auto step = [&](std::int64_t b, std::int64_t pf_off) {
    prefetch_block(w0 + b, pf_off);
    prefetch_block(w1 + b, pf_off);
    prefetch_block(w2 + b, pf_off);
    prefetch_block(w3 + b, pf_off);
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
    for (; r + 4 <= r1; r += 4) dot_4rows(w + r * n_blocks, x, n_blocks, c, a.y + r);
    for (; r < r1; ++r) a.y[r] = dot_row(w + r * n_blocks, x, n_blocks, c);
  });
  return qmv::Status::Ok();
}

}  // namespace

QMV_REGISTER_KERNEL(qmv::cpu_matvec_kernel(
    "q6_K.cpu.avx512_vnni_4row", qmv::WeightType::Q6_K, qmv::ActFormat::Q8_K, run,
    "Q6_K x Q8_K, AVX-512 VNNI, four rows share each activation load and one fma per "
    "block, software prefetch in the four row streams",
    qmv::CpuFeature::AVX512F | qmv::CpuFeature::AVX512BW | qmv::CpuFeature::AVX512VL |
        qmv::CpuFeature::AVX512VNNI | qmv::CpuFeature::AVX2 | qmv::CpuFeature::FMA |
        qmv::CpuFeature::F16C));
