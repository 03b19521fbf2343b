// Kernel names from before the naming scheme of kernels/README.md
// (weights.backend.technique[_activation], parallelism spelled <unit>[x<N>]). They keep
// working wherever a kernel is named (--kernels, plans, compare, the CSVs and the tuning
// store read back), with a one-line deprecation note where a user typed one, so scripts
// and results written with them still run.
#pragma once

#include <span>
#include <string>
#include <string_view>

namespace qmv {

struct FormerName {
  std::string_view former, current;
};

// Every former name and the kernel it names now, sorted by former name.
std::span<const FormerName> former_kernel_names();

// The current name of `name`: itself unless it is a former name.
std::string_view current_kernel_name(std::string_view name);

// Prints, once per former name (or glob of former names) in a process, one line
// saying that `former` is now `current` (a kernel name, or several comma-separated).
void note_former_name(std::string_view former, std::string_view current);

}  // namespace qmv
