// The activation quantizers the kernels' callers run once per vector (Q8_K, Q8_1): the
// widest version the CPU has and the kernels' ISA mask allows, as decode quantizes
// every activation vector. The formats layer holds the plain definitions
// (quantize_row_q8_K_scalar, quantize_row_q8_1_scalar in formats/formats.h); every
// version writes their bytes, which a test checks. The vectorized versions live in the
// CPU instruction-set folders (cpu/x86/activation_quantizers.h).
#pragma once

#include <cstdint>

#include "formats/formats.h"

namespace qmv {

// Q8_K: n a multiple of 256; Q8_1: n a multiple of 32.
void quantize_row_q8_K(const float* x, BlockQ8K* y, std::int64_t n);
void quantize_row_q8_1(const float* x, BlockQ8_1* y, std::int64_t n);

// The activation quantizers' instruction sets, narrowest first (AVX512: F, BW and VL).
enum class QuantizerIsa { Scalar, AVX2, AVX512 };
// The widest the quantizers above may use (default: all); the kernels' ISA mask sets
// it, so a masked run quantizes as a CPU with only those features would.
void set_quantizer_isa_limit(QuantizerIsa widest);
QuantizerIsa active_quantizer_isa();
const char* to_string(QuantizerIsa isa);
// One version by name, for tests; false, writing nothing, where the CPU lacks it.
bool quantize_row_q8_K_with(QuantizerIsa isa, const float* x, BlockQ8K* y, std::int64_t n);
bool quantize_row_q8_1_with(QuantizerIsa isa, const float* x, BlockQ8_1* y, std::int64_t n);

// Prepare an activation vector in format f (a plain copy for F32); `out` must hold
// row_bytes(f, n) bytes. `dequantize_activation` (formats/formats.h) gives back the
// values a kernel sees.
void quantize_activation(ActFormat f, const float* x, void* out, std::int64_t n);

}  // namespace qmv
