// Q4_K weights x Q8_K activations, AVX-512 VNNI, one row at a time: per super-block
// two 64-byte weight loads, four vpdpbusd (the unsigned 4-bit weights as the u8
// operand, the int8 activations as the s8 operand), the sub-block scales applied by
// vpackssdw + vpdpwssd, the mins from the bsums (q4_K.h). The
// activation is re-ordered once per call to match the nibble layout and stays in L1.
// The weight stream is prefetched like that of q4_K.cpu.avx2_q8k, so the two differ
// only in the instruction set; q4_K.cpu.avx512vnni_x4_q8k adds the row sharing. The
// prefetch pays here too: without it the kernel is clearly slower on cold weights.
#include "q4_K.h"
#include "kernels/cpu_tiling.h"

namespace {

using qmv::q4k_vnni::XBlock;

qmv::Status run(const qmv::MatVecArgs& a) {
  const std::int64_t nb = a.shape.cols / qmv::kSuperBlock;
  const auto* w = static_cast<const qmv::BlockQ4K*>(a.w);
  const XBlock* x = qmv::q4k_vnni::prepared_activation(a, nb);
  qmv::parallel_row_tiles(a.shape.rows, a.threads, [&](std::int64_t r0, std::int64_t r1) {
    for (std::int64_t r = r0; r < r1; ++r) {
      const qmv::BlockQ4K* rows[1] = {w + r * nb};
      qmv::q4k_vnni::dot_rows<1, true>(rows, x, nb, a.y + r);
    }
  });
  return qmv::Status::Ok();
}

}  // namespace

QMV_REGISTER_KERNEL(qmv::cpu_matvec_kernel(
    "q4_K.cpu.avx512vnni_q8k", qmv::WeightType::Q4_K, qmv::ActFormat::Q8_K, run,
    "Q4_K x Q8_K, AVX-512 VNNI, one row at a time: vpdpbusd nibbles x int8, "
    "scales by vpdpwssd, mins via bsums, weight stream prefetched",
    qmv::q4k_vnni::kFeatures));
