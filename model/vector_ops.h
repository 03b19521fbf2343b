// The per-vector ops of a CPU decode step that the one-sequence forward (forward.cpp)
// and the batch forward (batch_forward.cpp) share.
#pragma once

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

// gate[i] = silu(gate[i]) * up[i]; `avx2`: 8 lanes at a time (the caller has checked
// that the CPU and the ISA mask allow AVX2).
void swiglu(float* gate, const float* up, int n, bool avx2);

}  // namespace qmv
