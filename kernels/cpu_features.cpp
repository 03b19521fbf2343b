#include "cpu_features.h"

#include <cpuinfo.h>

#include <utility>

#include "kernel.h"

namespace qmv {
namespace {

struct FeatureProbe {
  CpuFeature feature;
  const char* name;
  bool (*present)();
};

const FeatureProbe kProbes[] = {
    {CpuFeature::AVX2, "avx2", cpuinfo_has_x86_avx2},
    {CpuFeature::FMA, "fma", cpuinfo_has_x86_fma3},
    {CpuFeature::F16C, "f16c", cpuinfo_has_x86_f16c},
    {CpuFeature::AVX512F, "avx512f", cpuinfo_has_x86_avx512f},
    {CpuFeature::AVX512BW, "avx512bw", cpuinfo_has_x86_avx512bw},
    {CpuFeature::AVX512VL, "avx512vl", cpuinfo_has_x86_avx512vl},
    {CpuFeature::AVX512VNNI, "avx512vnni", cpuinfo_has_x86_avx512vnni},
};

}  // namespace

std::uint32_t missing_cpu_features(std::uint32_t required) {
  // cpuinfo_initialize is idempotent and thread-safe; it fails only off x86/ARM Linux
  // oddities, in which case every feature counts as missing.
  const bool ok = cpuinfo_initialize();
  std::uint32_t missing = 0;
  for (const auto& p : kProbes) {
    const auto bit = static_cast<std::uint32_t>(p.feature);
    if ((required & bit) && (!ok || !p.present())) missing |= bit;
  }
  return missing;
}

std::string cpu_feature_names(std::uint32_t mask) {
  std::string out;
  for (const auto& p : kProbes) {
    if (mask & static_cast<std::uint32_t>(p.feature)) {
      if (!out.empty()) out += ' ';
      out += p.name;
    }
  }
  return out;
}

}  // namespace qmv
