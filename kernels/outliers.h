// "Massive activations": a few channels of an activation vector tens of times its rms.
// Int8 activation formats (Q8_K, Q8_1) give every block one scale, set by the block's
// largest value, so an outlier coarsens the step for all its neighbours and the matvec
// loses accuracy. The criterion below flags such a vector so that a caller can run an
// f32-activation kernel on it instead (model/plan.h: outlier routing). It is plain
// arithmetic on a host vector, with no backend in it: the CPU forward pass, the
// accuracy harness and a GPU runner (on the host copy, or replaying it) share it.
//
// The criterion: max |x_i| > k * rms(x), rms(x) = sqrt(sum x_i^2 / n), k >= 0.
// Squared, with no square root or division: max^2 * n > k^2 * sum x_i^2.
// - An empty or all-zero vector never trips it (nothing to lose).
// - A vector holding a NaN or an infinity always trips it: an int8 scale is
//   meaningless there, while the f32 path carries the value through as IEEE does.
// - Strictly greater: a vector exactly at the threshold does not trip.
// - max |x| <= sqrt(n) * rms always (equality for a one-hot vector), so k >= sqrt(n)
//   never trips, and any k < 1 trips every non-zero vector.
#pragma once

#include <cstdint>
#include <optional>

namespace qmv {

// The default threshold: above what Gaussian vectors of model widths reach (a false
// positive needs a |z| > 8 draw, about 1e-15 per value), below what 1 to 4 channels at
// 10x the rms of the rest read. The peak-to-rms figures: fp_max_peak_to_rms in
// results/intel-xeon-2c/outlier-cost.csv, peak_to_rms_median in
// results/intel-xeon-2c/accuracy.csv.
inline constexpr double kDefaultOutlierK = 8.0;

// The decision, exactly as the reference below makes it, at the cost of one float
// pass over x (the reference runs only when that pass cannot decide).
bool has_massive_activation(const float* x, std::int64_t n, double k = kDefaultOutlierK);

// The definition evaluated in double precision, one value at a time: every x_i^2 is
// exact in double, and the sum's rounding (~n * 1e-16 relative) is what "exact" means
// here. This is what has_massive_activation must agree with on every input.
bool has_massive_activation_reference(const float* x, std::int64_t n, double k);

// The fast path on its own: max |x| and sum x^2 in float, in any order (AVX2 where
// the CPU has it; `portable` forces the plain C++ pass other CPUs run). The float sum
// of squares is within (n+2) 2^-24 relative, plus n FLT_MIN for squares that
// underflow, of the exact one; when max^2 * n clears k^2 times both ends of that
// interval the answer is certain. Otherwise, or for a non-finite sum (a NaN or inf in
// x, or float overflow), it returns nullopt.
std::optional<bool> massive_activation_fast_verdict(const float* x, std::int64_t n, double k,
                                                    bool portable = false);

// max |x| / rms(x) in double, for reports: 0 for an empty or all-zero vector, NaN
// when x holds a NaN or an infinity.
double peak_to_rms(const float* x, std::int64_t n);

}  // namespace qmv
