#include "cpu_features.h"

#include <cpuinfo.h>

#include <atomic>
#include <stdexcept>
#include <utility>

#include "formats/formats.h"
#include "kernel.h"
#include "kernels/activation_quantizers.h"
#include "kernels/one_line.h"

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

constexpr std::uint32_t kAllFeatures = ~std::uint32_t{0};
std::atomic<std::uint32_t> g_mask{kAllFeatures};

// Bits of `required` the hardware lacks.
std::uint32_t absent_in_hardware(std::uint32_t required) {
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

}  // namespace

std::uint32_t missing_cpu_features(std::uint32_t required) {
  return absent_in_hardware(required) | (required & ~g_mask.load());
}

std::uint32_t masked_cpu_features(std::uint32_t required) {
  return required & ~g_mask.load() & ~absent_in_hardware(required);
}

void set_cpu_feature_mask(std::uint32_t allowed) {
  g_mask.store(allowed);
  // The activation quantizers (kernels/activation_quantizers.h) follow the mask from here.
  const auto has = [&](std::uint32_t bits) { return (allowed & bits) == bits; };
  set_quantizer_isa_limit(has(CpuFeature::AVX512F | CpuFeature::AVX512BW | CpuFeature::AVX512VL) ? QuantizerIsa::AVX512
                          : has(static_cast<std::uint32_t>(CpuFeature::AVX2))                   ? QuantizerIsa::AVX2
                                                                                                : QuantizerIsa::Scalar);
}
std::uint32_t cpu_feature_mask() { return g_mask.load(); }
bool cpu_features_masked() { return g_mask.load() != kAllFeatures; }

std::uint32_t parse_cpu_features(std::string_view list) {
  std::uint32_t bits = 0;
  std::string known;
  for (const auto& p : kProbes) known += (known.empty() ? "" : ", ") + std::string(p.name);
  while (!list.empty()) {
    const std::size_t comma = list.find(',');
    std::string_view name = list.substr(0, comma);
    list = comma == std::string_view::npos ? std::string_view{} : list.substr(comma + 1);
    while (!name.empty() && name.front() == ' ') name.remove_prefix(1);
    while (!name.empty() && name.back() == ' ') name.remove_suffix(1);
    if (name.empty()) continue;
    bool found = false;
    for (const auto& p : kProbes)
      if (name == p.name) {
        bits |= static_cast<std::uint32_t>(p.feature);
        found = true;
      }
    if (!found)
      throw std::invalid_argument("unknown CPU feature '" + one_line(name) + "' (known: " + known + ")");
  }
  return bits;
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
