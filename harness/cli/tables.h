// The terminal tables of the results CSVs, one printer per kind, shared by the
// command that measures and by `qmvlab report` that reads the CSV back.
#pragma once

#include <vector>

#include "harness/csv.h"

namespace qmv {

// Sorted by kernel, shape and threads.
void print_bench_table(std::vector<BenchRow> rows);
void print_check_table(const std::vector<CheckRow>& rows);
void print_peak_table(const std::vector<PeakRow>& rows);

}  // namespace qmv
