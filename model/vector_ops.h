// The per-vector ops of a CPU decode step that the one-sequence forward (forward.cpp)
// and the batch forward (batch_forward.cpp) share.
#pragma once

namespace qmv {

// y = x / rms(x) * weight, accumulated in double: the sum of squares of a few thousand
// values is where float loses digits. y may be x.
void rms_norm(const float* x, const float* weight, float* y, int n, float eps);

// gate[i] = silu(gate[i]) * up[i]; `avx2`: 8 lanes at a time (the caller has checked
// that the CPU and the ISA mask allow AVX2).
void swiglu(float* gate, const float* up, int n, bool avx2);

}  // namespace qmv
