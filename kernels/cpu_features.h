// Run-time CPU feature detection (libcpuinfo), so one binary picks the variants the
// CPU it runs on can execute.
#pragma once

#include <cstdint>
#include <string>

namespace qmv {

// Bits of `required` (CpuFeature values) this CPU lacks; 0 when all are present.
std::uint32_t missing_cpu_features(std::uint32_t required);
// "avx2 fma" style list of the CpuFeature bits in `mask`.
std::string cpu_feature_names(std::uint32_t mask);

}  // namespace qmv
