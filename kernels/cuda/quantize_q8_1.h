// The GPU activation quantizer for the DP4A kernels: float activations in device
// memory to Q8_1 blocks in device memory, the same bytes as quantize_row_q8_1 on the
// host up to the rounding of ties. Plain C++ header so g++-compiled harness code can
// call it.
#pragma once

#include <cstdint>

#include "kernels/formats/formats.h"
#include "kernels/kernel.h"

namespace qmv::cuda {

// n a multiple of 32; x and y device pointers; stream a cudaStream_t (nullptr: the
// default stream). Launches and checks the launch; does not synchronize.
Status quantize_q8_1(const float* x, BlockQ8_1* y, std::int64_t n, void* stream);

}  // namespace qmv::cuda
