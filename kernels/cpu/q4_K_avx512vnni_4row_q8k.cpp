// Q4_K weights x Q8_K activations, AVX-512 VNNI, four rows at a time: each 64-byte
// activation vector is loaded once per super-block and fed to the vpdpbusd of four
// rows, whose next super-blocks are prefetched in software (kPrefetchBlocks ahead).
// The math per row is that of q4_K.cpu.avx512vnni_q8k (q4_K_avx512vnni_common.h); what
// the row sharing gains over it: results/intel-xeon-2c/default.csv.
//
// Which four rows: a tile of n rows is cut into four contiguous quarters of q = n/4
// rows, and step k takes row k of each quarter. Each of the four weight streams then
// walks consecutive rows (one long sequential stream, and its prefetch simply runs on
// into the stream's next row), and the four streams lie in different pages. Four
// adjacent rows instead put the four streams in the same few pages, which is slower on
// cold weights, the more so the shorter the rows. (A likely reason, not verified: the
// hardware prefetcher follows streams within a 4 KiB page and keeps more requests in
// flight for four far-apart streams.)
// Rows left over (n % 4, and tiles or calls with fewer than four rows) take the
// one-row path.
#include "q4_K_avx512vnni_common.h"
#include "kernels/cpu_tiling.h"

namespace {

using qmv::q4k_vnni::XBlock;

qmv::Status run(const qmv::MatVecArgs& a) {
  const std::int64_t nb = a.shape.cols / qmv::kSuperBlock;
  const auto* w = static_cast<const qmv::BlockQ4K*>(a.w);
  const XBlock* x = qmv::q4k_vnni::prepared_activation(a, nb);
  qmv::parallel_row_tiles(a.shape.rows, a.threads, [&](std::int64_t r0, std::int64_t r1) {
    const std::int64_t q = (r1 - r0) / 4;
    for (std::int64_t k = 0; k < q; ++k) {
      const std::int64_t r[4] = {r0 + k, r0 + q + k, r0 + 2 * q + k, r0 + 3 * q + k};
      const qmv::BlockQ4K* rows[4] = {w + r[0] * nb, w + r[1] * nb, w + r[2] * nb, w + r[3] * nb};
      float out[4];
      qmv::q4k_vnni::dot_rows<4, true>(rows, x, nb, out);
      for (int i = 0; i < 4; ++i) a.y[r[i]] = out[i];
    }
    for (std::int64_t r = r0 + 4 * q; r < r1; ++r) {
      const qmv::BlockQ4K* rows[1] = {w + r * nb};
      qmv::q4k_vnni::dot_rows<1, true>(rows, x, nb, a.y + r);
    }
  });
  return qmv::Status::Ok();
}

}  // namespace

QMV_REGISTER_KERNEL(qmv::cpu_matvec_kernel(
    "q4_K.cpu.avx512vnni_4row_q8k", qmv::WeightType::Q4_K, qmv::ActFormat::Q8_K, run,
    "Q4_K x Q8_K, AVX-512 VNNI, four rows (one per tile quarter) share each activation "
    "load, software prefetch of the four weight streams; rows % 4 by the one-row path",
    qmv::CpuFeature::AVX512F | qmv::CpuFeature::AVX512BW | qmv::CpuFeature::AVX512VL |
        qmv::CpuFeature::AVX512VNNI | qmv::CpuFeature::F16C));
