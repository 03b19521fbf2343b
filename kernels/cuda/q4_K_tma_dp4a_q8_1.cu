// Q4_K x Q8_1 fed by TMA copies (sm_90 and newer): each CTA's rows streamed into a
// ring of shared-memory stages by cp.async.bulk (tma_kernels.cuh), the warps
// computing from the stages with the quarter-warp lane code. Constants: tma_dp4a in
// q4_K_lanes.h.
#include "kernels/cuda/q4_K_kernels.cuh"
#include "kernels/cuda/tma_kernels.cuh"

namespace qmv::cuda::q4k {
namespace {

constexpr const char* kName = "q4_K.cuda.tma_dp4a_q8_1";

// The weights from the stage (plain shared-memory loads: every super-block of a stage
// starts on a 16-byte boundary); the activations as Q4KLoads reads them. 16-byte
// loads are all the quarter-warp lane layout makes of the weights (qs and header); the
// narrower weight loads read global memory only, so lane code calling one with a
// stage's address does not compile.
struct StageLoads : Q4KLoads {
  std::uint8_t weight_u8(const void*) const = delete;
  std::uint16_t weight_u16(const void*) const = delete;
  std::uint32_t weight_u32(const void*) const = delete;
  U32x2 weight_u32x2(const void*) const = delete;
  std::uint16_t weight_u16_if(bool, const void*) const = delete;
  std::uint32_t weight_u32_if(bool, const void*) const = delete;
  QMV_HD U32x4 weight_u32x4(const void* p) const {
    const uint4 v = *static_cast<const uint4*>(p);
    return {v.x, v.y, v.z, v.w};
  }
};

struct Q4KChunk {
  using Act = std::uint32_t;  // Q8_1 blocks, read as words
  static constexpr int kBlockBytes = q4k::kBlockBytes;
  static constexpr int kChunkBlocks = tma_dp4a::kChunkBlocks;
  static constexpr int kStages = tma_dp4a::kStages;
  static constexpr int kMinCtasPerSm = 3;  // 72 KiB of stages each; 85 registers a thread
  __device__ static float partial(const std::uint8_t* row, const std::uint32_t* x, int block0, int blocks, int lane) {
    using namespace tma_dp4a;
    return grouped_lane_row<kGroups, kUnroll, kWordsPerLane>(StageLoads{}, reinterpret_cast<const std::uint32_t*>(row),
                                                             x + std::int64_t(block0) * kQ8_1WordsPerSuperBlock,
                                                             blocks, lane);
  }
};

Status run(const MatVecArgs& a) { return tma::run_tma_rows<Q4KChunk>(a, kName); }

}  // namespace

QMV_REGISTER_KERNEL(cuda_matvec_kernel(kName, WeightType::Q4_K, ActFormat::Q8_1, run,
                                       "Q4_K x Q8_1, each CTA's rows streamed by TMA copies into a 4-stage "
                                       "shared-memory ring, quarter-warp __dp4a lanes on the stages",
                                       90));

}  // namespace qmv::cuda::q4k
