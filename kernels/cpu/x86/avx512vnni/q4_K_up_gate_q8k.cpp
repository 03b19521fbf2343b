// Fused FFN up+gate: y = W x and y2 = W2 x, two Q4_K matrices of the same shape
// against one Q8_K activation, AVX-512 VNNI. For the model runner: W_up as w/y and
// W_gate as w2/y2 (the op is symmetric, so the other way round works as well). The activation is prepared once; per row tile, each step computes two
// rows of each matrix (row k of the tile's first and second half, in W and in W2), so
// every 64-byte activation vector is loaded once per super-block for four weight
// streams, each prefetched in software. Both outputs are written in the one parallel
// region (one parallel_row_tiles call). The math per row is that of
// q4_K.cpu.avx512vnni_q8k (q4_K.h); the fused kernel against the plain
// ones: results/intel-xeon-2c/fused-up-gate.csv.
//
// Two rows per matrix (four streams) rather than four (eight streams, NR = 8): eight
// streams were no faster on the FFN shapes, and four keep the register pressure low.
#include "q4_K.h"
#include "kernels/cpu_tiling.h"

namespace {

using qmv::q4k_vnni::XBlock;

qmv::Status run(const qmv::MatVecArgs& a) {
  const std::int64_t nb = a.shape.cols / qmv::kSuperBlock;
  const auto* w = static_cast<const qmv::BlockQ4K*>(a.w);
  const auto* w2 = static_cast<const qmv::BlockQ4K*>(a.w2);
  const XBlock* x = qmv::q4k_vnni::prepared_activation(a, nb);
  qmv::parallel_row_tiles(a.shape.rows, a.threads, [&](std::int64_t r0, std::int64_t r1) {
    const std::int64_t q = (r1 - r0) / 2;
    for (std::int64_t k = 0; k < q; ++k) {
      const std::int64_t ra = r0 + k, rb = r0 + q + k;
      const qmv::BlockQ4K* rows[4] = {w + ra * nb, w + rb * nb, w2 + ra * nb, w2 + rb * nb};
      float out[4];
      qmv::q4k_vnni::dot_rows<4, true>(rows, x, nb, out);
      a.y[ra] = out[0];
      a.y[rb] = out[1];
      a.y2[ra] = out[2];
      a.y2[rb] = out[3];
    }
    for (std::int64_t r = r0 + 2 * q; r < r1; ++r) {
      const qmv::BlockQ4K* rows[2] = {w + r * nb, w2 + r * nb};
      float out[2];
      qmv::q4k_vnni::dot_rows<2, true>(rows, x, nb, out);
      a.y[r] = out[0];
      a.y2[r] = out[1];
    }
  });
  return qmv::Status::Ok();
}

constexpr qmv::KernelRecord make_record() {
  qmv::KernelRecord s = qmv::cpu_matvec_kernel(
      "q4_K.cpu.avx512vnni_up_gate_q8k", qmv::WeightType::Q4_K, qmv::ActFormat::Q8_K, run,
      "fused FFN up+gate (y = W x, y2 = W2 x), Q4_K x Q8_K, AVX-512 VNNI: two rows of each "
      "matrix share each activation load, prefetched; both outputs in one parallel region",
      qmv::q4k_vnni::kFeatures);
  s.op = qmv::OpKind::FusedUpGate;
  return s;
}

}  // namespace

QMV_REGISTER_KERNEL(make_record());
