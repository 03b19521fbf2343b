#include "kernels/availability.h"

#include <fmt/format.h>

#include "kernels/cpu_features.h"
#ifdef QMV_HAVE_CUDA
#include "kernels/cuda/cuda_device.h"
#endif

namespace qmv {

Availability availability(const KernelSpec& spec) {
  if (spec.backend == Backend::CPU) {
    if (const std::uint32_t masked = masked_cpu_features(spec.cpu_features))
      return {false, "masked out by --cpu-features: " + cpu_feature_names(masked)};
    if (const std::uint32_t missing = missing_cpu_features(spec.cpu_features))
      return {false, "CPU lacks " + cpu_feature_names(missing)};
    return {true, {}};
  }
#ifdef QMV_HAVE_CUDA
  const cuda::DeviceInfo& dev = cuda::current_device();
  if (!dev.present) return {false, dev.why_absent};
  if (dev.sm < spec.min_sm)
    return {false, fmt::format("needs sm_{}, device {} is sm_{}", spec.min_sm, dev.name, dev.sm)};
#if defined(QMV_CUDA_HIGHEST_ARCH) && QMV_CUDA_HIGHEST_ARCH > 0
  // Built only for older architectures, the kernel's code is its trap stub.
  if (spec.min_sm > QMV_CUDA_HIGHEST_ARCH)
    return {false, fmt::format("needs sm_{} code, and this build's newest is sm_{} (QMV_CUDA_ARCHS)", spec.min_sm,
                               QMV_CUDA_HIGHEST_ARCH)};
#endif
  return {true, {}};
#else
  return {false, "this qmvlab was built without CUDA (QMV_CUDA=OFF)"};
#endif
}

}  // namespace qmv
