// The per-vector ops of a CPU decode step that the one-sequence forward (forward.cpp)
// and the batch forward (batch_forward.cpp) share.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/kernel.h"
#include "model/config.h"

namespace qmv {

// y = x / rms(x) * weight, accumulated in double: the sum of squares of a few thousand
// values is where float loses digits. y may be x.
void rms_norm(const float* x, const float* weight, float* y, int n, float eps);

// The RoPE table of position `pos`: cos and sin of its angle for each of the
// rope_dim / 2 frequencies, computed in double (at long positions float loses the low
// bits of pos * freq).
void rope_table(const ModelConfig& c, int pos, float* cos, float* sin);

// Rotates each of `n_heads` heads of v (head_dim apart) by a position's table: the
// model's RoPE style picks the pairs, neighbours (2i, 2i+1) or halves (i, i + rope_dim/2).
void apply_rope(const ModelConfig& c, float* v, int n_heads, const float* cos, const float* sin);

// Quantizes the n values of x into `shared` (row_bytes(f, n) bytes), a buffer that the
// kernels' other threads read: first into `staging`, this thread's own, then one copy.
// After a matvec the other threads hold `shared`'s lines, and a store must take each
// line back first; the quantizer's stores, spread among its arithmetic, waited on that
// one line at a time, where one copy asks for all of them back to back
// (results/amd-zen4-2c/act-quant-staging.csv).
void quantize_to_shared(ActFormat f, const float* x, std::int64_t n, std::uint8_t* shared,
                        std::vector<std::uint8_t>& staging);

// gate[i] = silu(gate[i]) * up[i]; `avx2`: 8 lanes at a time (the caller has checked
// that the CPU and the ISA mask allow AVX2).
void swiglu(float* gate, const float* up, int n, bool avx2);

}  // namespace qmv
