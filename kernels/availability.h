// Whether a registered kernel can run on this machine: the CPU features it needs (as
// the ISA mask allows them), or a CUDA device of its minimum SM.
#pragma once

#include <string>

#include "kernels/kernel.h"

namespace qmv {

struct Availability {
  bool available = false;
  std::string reason;  // why not: missing CPU features, no CUDA device, an SM too old
};

// Whether `spec` can run here, and if not, why (missing CPU features, no CUDA device,
// an SM below the kernel's minimum, a binary built without CUDA).
Availability availability(const KernelSpec& spec);

}  // namespace qmv
