// The terminal tables of the results CSVs, one printer per kind, shared by the
// command that measures and by `qmvlab report` that reads the CSV back.
#pragma once

#include <vector>

#include "harness/bench.h"
#include "harness/csv.h"
#include "harness/summary.h"

namespace qmv {

// Sorted by kernel, shape and threads.
void print_bench_table(std::vector<BenchRow> rows);
void print_check_table(const std::vector<CheckRow>& rows);
void print_peak_table(const std::vector<PeakRow>& rows);
// The read loops timed among a cold bench's kernels: per thread count, each loop's
// median and which one is the rows' peak.
void print_interleaved_peaks(const BenchOutcome& res);
// Where the rows hold ggml's kernels: qmvlab's fastest kernel against ggml's per weight
// type, shape, threads and cache, then per weight type and threads over the shapes.
// Prints nothing when no status-ok row is a ggml kernel.
void print_peer_tables(const std::vector<TimedRow>& rows);

}  // namespace qmv
