// Which build of a kernel ran: measurements of a kernel hold for the code that was
// measured, so results kept across runs (the tuning store) name the build with them.
#pragma once

#include <string>
#include <vector>

#include "kernels/kernel.h"

namespace qmv {

// A kernel source file (relative to the source tree, e.g. "kernels/cpu/x86/avx2/q4_K_q8k.cpp")
// and its build: a hash of the toolchain and of the code of the file and of every
// project file it includes (include lines and paths left out, so a move keeps the build) (kernels/kernel_build_ids.cmake writes the table at build time).
struct KernelSourceBuild {
  const char* source;
  const char* build;
};
const std::vector<KernelSourceBuild>& kernel_source_builds();

// The build of the code `spec` runs: its source file's build, followed by the peer's
// version for another project's kernel; "unknown" for a kernel registered from a file
// the table lacks (a test's own kernels).
std::string kernel_build_id(const KernelSpec& spec);

}  // namespace qmv
