// Run-time CPU feature detection (libcpuinfo), so one binary picks the variants the
// CPU it runs on can execute; and an ISA mask, so it can behave as on a CPU with fewer
// features (an AVX-512 machine reproducing an AVX2-only one's plans and sweeps).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace qmv {

// Bits of `required` (CpuFeature values) this CPU lacks, or the mask leaves out; 0 when
// all are usable.
std::uint32_t missing_cpu_features(std::uint32_t required);
// Of those, the ones the CPU has but the mask leaves out.
std::uint32_t masked_cpu_features(std::uint32_t required);
// "avx2 fma" style list of the CpuFeature bits in `mask`.
std::string cpu_feature_names(std::uint32_t mask);

// The mask: the features the process may use. Set once, before anything is measured
// (the machine name records it); by default every feature is allowed.
void set_cpu_feature_mask(std::uint32_t allowed);
std::uint32_t cpu_feature_mask();
bool cpu_features_masked();
// "avx2,fma,f16c" (names as cpu_feature_names writes them, comma-separated) -> bits.
// Throws std::invalid_argument naming an unknown feature and the known ones.
std::uint32_t parse_cpu_features(std::string_view list);
// The environment variable that sets the mask for every qmvlab run (scripts, tests).
inline constexpr const char* kCpuFeaturesEnv = "QMV_CPU_FEATURES";

}  // namespace qmv
