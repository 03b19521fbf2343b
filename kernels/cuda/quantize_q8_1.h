// The GPU activation quantizer for the DP4A kernels: float activations in device
// memory to Q8_1 blocks in device memory, byte for byte what quantize_row_q8_1 gives
// on the host (its per-lane arithmetic is quantize_q8_1_lanes.h, which a CPU test
// replays against the host quantizer). Plain C++ header so g++-compiled harness code
// can call it.
#pragma once

#include <cstdint>

#include "kernels/formats/formats.h"
#include "kernels/kernel.h"

namespace qmv::cuda {

// The name the quantizer's errors, NVTX ranges and timings go by.
inline constexpr const char* kQuantizeQ8_1Name = "q8_1.cuda.quantize";

// n a positive multiple of 32; x and y device pointers; stream a cudaStream_t
// (nullptr: the default stream). Launches and checks the launch; does not synchronize.
// Bad arguments are an error before any launch.
Status quantize_q8_1(const float* x, BlockQ8_1* y, std::int64_t n, void* stream);

}  // namespace qmv::cuda
