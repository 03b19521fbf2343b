// What `qmvlab report` needs of the sweep command (harness/cli/sweep.cpp).
#pragma once

#include <string>

namespace qmv {

// `qmvlab report` of a sweep CSV: one table row per point.
void print_sweep_report(const std::string& path);

}  // namespace qmv
