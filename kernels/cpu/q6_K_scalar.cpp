// Q6_K weights x f32 activations, scalar reference: each block's 6-bit quants are
// unpacked into a small local array and dotted with the float activation. The
// baseline every faster Q6_K variant is measured and checked against.
#include <cstdint>

#include "kernel.h"

namespace {

// Unpacks the 256 quants of a block, centred (q - 32), in weight order. Each half of
// 128 weights has 64 bytes of ql and 32 of qh; byte l of them feeds weights l, l+32,
// l+64, l+96 of the half (ql low nibbles, then high nibbles; qh two bits each).
void unpack_centred_quants(const qmv::BlockQ6K& blk, std::int8_t q[qmv::kSuperBlock]) {
  for (int half = 0; half < 2; ++half) {
    const std::uint8_t* ql = blk.ql + 64 * half;
    const std::uint8_t* qh = blk.qh + 32 * half;
    std::int8_t* out = q + 128 * half;
    for (int l = 0; l < 32; ++l) {
      out[l + 0] = static_cast<std::int8_t>(((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32);
      out[l + 32] = static_cast<std::int8_t>(((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32);
      out[l + 64] = static_cast<std::int8_t>(((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32);
      out[l + 96] = static_cast<std::int8_t>(((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32);
    }
  }
}

// One row: 16 sub-blocks of 16 per super-block, w = d*scale[j]*(q-32).
float dot_row(const qmv::BlockQ6K* blocks, const float* x, std::int64_t n_blocks) {
  float row_sum = 0.0f;
  for (std::int64_t b = 0; b < n_blocks; ++b) {
    const qmv::BlockQ6K& blk = blocks[b];
    std::int8_t q[qmv::kSuperBlock];
    unpack_centred_quants(blk, q);
    const float d = qmv::fp16_to_fp32(blk.d);
    const float* xb = x + b * qmv::kSuperBlock;
    float block_sum = 0.0f;
    for (int j = 0; j < 16; ++j) {
      float q_dot_x = 0.0f;
      for (int l = 0; l < 16; ++l) q_dot_x += static_cast<float>(q[16 * j + l]) * xb[16 * j + l];
      block_sum += d * blk.scales[j] * q_dot_x;
    }
    row_sum += block_sum;
  }
  return row_sum;
}

qmv::Status run(const qmv::MatVecArgs& a) {
  const std::int64_t n_blocks = a.shape.cols / qmv::kSuperBlock;
  const auto* w = static_cast<const qmv::BlockQ6K*>(a.w);
  const auto* x = static_cast<const float*>(a.x);
#pragma omp parallel for num_threads(a.threads) schedule(static)
  for (std::int64_t r = 0; r < a.shape.rows; ++r) {
    a.y[r] = dot_row(w + r * n_blocks, x, n_blocks);
  }
  return qmv::Status::Ok();
}

qmv::KernelSpec make_spec() {
  qmv::KernelSpec spec;
  spec.name = "q6_K.cpu.scalar";
  spec.op = qmv::OpKind::MatVec;
  spec.weight = qmv::WeightType::Q6_K;
  spec.act = qmv::ActFormat::F32;
  spec.backend = qmv::Backend::CPU;
  spec.cpu_features = 0;
  spec.shape_rule = qmv::kSuperBlockColsRule;
  spec.supports = qmv::supports_superblock_cols;
  spec.run = run;
  spec.description = "Q6_K x f32, scalar reference: dequantize in registers, float dot";
  return spec;
}

}  // namespace

QMV_REGISTER_KERNEL(make_spec());
