// Where a result was measured: the context every results row carries.
#pragma once

#include <cstddef>
#include <string>

#include "kernels/kernel.h"

namespace qmv {

struct MachineInfo {
  std::string machine;    // slug used for results/<machine>/, e.g. "intel-xeon-processor-2c"
  std::string cpu_model;  // as the CPU names itself
  int cores = 0;
  std::size_t llc_bytes = 0;   // last-level cache, all instances together
  std::size_t ram_bytes = 0;
  std::string compiler;        // compiler and build type of this binary
  std::string git_commit;      // short hash, "+dirty" when the tree had changes
  std::string gpu;             // "none" or the device name with SM, driver
  std::string gpu_status;      // one line for people: the device, or why there is none
};

// Computed once per process.
const MachineInfo& machine_info();

// The commit results rows name: $QMV_GIT_COMMIT where set (a bundle built elsewhere),
// else this source tree's HEAD, "+dirty" when tracked files outside results/ changed.
std::string source_commit();

// Replaces "{machine}" in a path with the machine slug.
std::string expand_machine(std::string path);

}  // namespace qmv
