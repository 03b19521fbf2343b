// Q6_K x Q8_1 on the GPU, quarter-warp layout: 8 threads per super-block, 32 weights a
// thread in four runs of eight (two __dp4a each, one scale multiply per run), the four
// groups of a warp on eight neighbouring super-blocks per step: the four 4-aligned ones
// read in 32-bit words, the others in 16/32/16-bit pieces. One warp per row over a
// grid-stride loop, on a grid the device keeps resident at once, sized so every warp
// has the same number of rows. Fewer instructions per weight than halfwarp_dp4a_q8_1,
// whose per-sub-block work is spread over four weights a thread.
#include <cstdint>

#include "kernels/cuda/q5_K_q6_K_kernels.cuh"
#include "kernels/cuda/q6_K_lanes.h"

namespace {

constexpr const char* kName = "q6_K.cuda.quarterwarp_dp4a_q8_1";

qmv::Status run(const qmv::MatVecArgs& a) {
  using namespace qmv::cuda::q5q6;
  return run_resident_warp_per_row<Q6KQuarterWarpRow>(a, kName);
}

}  // namespace

QMV_REGISTER_KERNEL(qmv::cuda_matvec_kernel(kName, qmv::WeightType::Q6_K, qmv::ActFormat::Q8_1, run,
                                            "Q6_K x Q8_1, quarter-warp per super-block, __dp4a, 32 weights a thread, "
                                            "8 super-blocks per warp in flight",
                                            61));
