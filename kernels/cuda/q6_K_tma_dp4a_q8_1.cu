// Q6_K x Q8_1 fed by TMA copies (sm_90 and newer): each CTA's rows streamed into a
// ring of shared-memory stages by cp.async.bulk (tma_kernels.cuh), each warp
// running the quarter-warp row code (q6_K_lanes.h) on one row's chunk of eight
// super-blocks per stage. The shape rule and the widened copies: q6k_tma.
#include <cstdint>

#include "kernels/cuda/q6_K_lanes.h"
#include "kernels/cuda/tma_kernels.cuh"

namespace qmv::cuda::q5q6 {
namespace {

constexpr const char* kName = "q6_K.cuda.tma_dp4a_q8_1";

// The weights from the stage: plain shared-memory loads, zero where the predicate is
// off, as Q5KQ6KLoads' are; the activations as Q5KQ6KLoads reads them.
struct StageLoads : Q5KQ6KLoads {
  // The unpredicated weight loads read global memory only, so lane code calling one
  // with a stage's address does not compile.
  std::uint8_t weight_u8(const void*) const = delete;
  std::uint16_t weight_u16(const void*) const = delete;
  std::uint32_t weight_u32(const void*) const = delete;
  U32x2 weight_u32x2(const void*) const = delete;
  U32x4 weight_u32x4(const void*) const = delete;
  QMV_HD std::uint16_t weight_u16_if(bool pred, const void* p) const {
    return pred ? *static_cast<const std::uint16_t*>(p) : std::uint16_t{0};
  }
  QMV_HD std::uint32_t weight_u32_if(bool pred, const void* p) const {
    return pred ? *static_cast<const std::uint32_t*>(p) : 0u;
  }
};

struct Q6KChunk {
  using Act = BlockQ8_1;
  static constexpr int kBlockBytes = kQ6KBlockBytes;
  static constexpr int kChunkBlocks = q6k_tma::kChunkBlocks;
  static constexpr int kStages = q6k_tma::kStages;
  static constexpr int kMinCtasPerSm = 3;  // 66 KiB of stages each; 85 registers a thread
  __device__ static float partial(const std::uint8_t* row, const BlockQ8_1* x, int block0, int blocks, int lane) {
    StageLoads mem;
    WarpShuffle shfl;
    return Q6KQuarterWarpRowOf<true>::partial(mem, shfl, row, x + std::int64_t(block0) * (kSuperBlock / kQ8_1Block),
                                              blocks, lane);
  }
};

Status run(const MatVecArgs& a) { return tma::run_tma_rows<Q6KChunk>(a, kName); }

constexpr KernelRecord record() {
  KernelRecord r = cuda_matvec_kernel(kName, WeightType::Q6_K, ActFormat::Q8_1, run,
                                      "Q6_K x Q8_1, each CTA's rows streamed by TMA copies into a 5-stage "
                                      "shared-memory ring, quarter-warp __dp4a lanes on the stages",
                                      90);
  r.supports = q6k_tma::supports;
  r.shape_rule = q6k_tma::kShapeRule;
  return r;
}

}  // namespace

QMV_REGISTER_KERNEL(record());

}  // namespace qmv::cuda::q5q6
