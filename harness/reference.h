// The double-precision reference products the check (harness/check.cpp) compares
// kernels with, shared with the accuracy measurements (harness/accuracy.h).
#pragma once

#include <Eigen/Dense>
#include <cstdint>
#include <utility>
#include <vector>

#include "kernels/kernel.h"

namespace qmv {

// W xs and |W| |xs| for every column of xs at once (xs: cols x cases), W the
// rows x cols matrix `w` of `type` dequantized in double. The second product is the
// error floor compare() takes (abs_products).
std::pair<Eigen::MatrixXd, Eigen::MatrixXd> reference_products(WeightType type, Shape s,
                                                               const std::vector<std::uint8_t>& w,
                                                               const Eigen::MatrixXd& xs);

}  // namespace qmv
