// Comparing two results CSVs (bench CSVs, or any CSV with the bench columns such as a
// sweep's): rows matched by kernel or by shape, the ratio of a metric per matched row
// and the geometric mean of the ratios.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "harness/summary.h"

namespace qmv {

// Bad input to a comparison (unreadable file, missing columns, nothing to match).
struct CompareError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The columns of a results row that a comparison needs.
struct ResultRow {
  std::string kernel, op, weight_type, backend, cache;  // op empty when the CSV has none
  std::int64_t rows = 0, cols = 0;
  int threads = 0;
  int n = 1;  // vectors per call (the batch op); 1 in files from before the column
  double time_median_us = 0, gbps_median = 0, peak_pct = 0;
  // For the peer ratio (harness/summary.h): empty / 0 where the CSV has no such column.
  std::string act_format, act_quant;
  double act_quant_median_us = 0;
};

struct ResultsFile {
  std::string path, machine, cpu_model, gpu, git_commit;  // context from the first row
  std::vector<ResultRow> rows;
  int skipped_not_ok = 0;  // rows whose `status` column said other than ok
  bool has_op = false;     // an `op` column; matching uses op only when both files have it
};

// Reads the bench columns of a results CSV; extra columns are ignored, and when there
// is a `status` column only its "ok" rows are kept. Throws CompareError naming the file
// and the problem.
ResultsFile read_results_csv(const std::string& path);

enum class CompareBy { Kernel, Shape };
enum class Metric { Gbps, Time, PeakPct };

// "gbps", "time", "peak_pct"; throws CompareError listing the known ones.
Metric parse_metric(const std::string& name);
CompareBy parse_compare_by(const std::string& name);
const char* metric_label(Metric m);  // column heading for the values, e.g. "GB/s"
double metric_value(const ResultRow& r, Metric m);

struct ComparedRow {
  ResultRow a, b;
  double value_a = 0, value_b = 0;
  double ratio = 0;  // > 1 when B is better: B/A for GB/s and % of peak, A/B for time
  int candidates_a = 1, candidates_b = 1;  // rows the best of each side was chosen from
};

struct Comparison {
  CompareBy by = CompareBy::Kernel;
  Metric metric = Metric::Gbps;
  std::vector<ComparedRow> matched;  // in a stable order: weight type, shape, kernel, threads
  int unmatched_a = 0, unmatched_b = 0;  // keys present on one side only
  int duplicates_a = 0, duplicates_b = 0;  // rows sharing a key with a better row (best kept)
  int peer_rows_a = 0, peer_rows_b = 0;  // ggml rows left out of a match by shape
  double geomean = 0;  // geometric mean of the ratios
};

// Matches A's rows with B's.
// By kernel: same kernel, shape, threads and cache; when a file holds several rows for
// one key (e.g. different tilings), the fastest (max GB/s) is kept.
// By shape: the fastest row per (shape, weight type, op, cache) on each side, whatever
// its kernel or thread count, so different machines and backends can be set side by
// side (op keeps a fused pair, which reads two matrices, apart from a plain matvec).
// ggml's kernels are left out of it: it compares qmvlab with itself, and the peer ratio
// (compare_peers) sets ggml against it on each side.
// Throws CompareError saying why when no row matches.
Comparison compare_results(const ResultsFile& a, const ResultsFile& b, CompareBy by, Metric metric);

// Markdown report: the sources, one table row per match, the geometric mean and counts.
void print_comparison(const ResultsFile& a, const ResultsFile& b, const Comparison& c);

// Where qmvlab stands against ggml on each side: per weight type (and op, backend),
// threads and cache, each side's ggml time / qmvlab time over its own shapes (see
// peer_groups). Rows pair up on threads where the two sides share a thread count, else
// each side's highest thread count is set against the other's.
struct PeerComparison {
  struct Row {
    std::string weight_type, op, backend, cache;
    int threads_a = 0, threads_b = 0;
    PeerGroup a, b;  // ratio_shapes 0: that side has no ratio here
  };
  bool peer_a = false, peer_b = false;  // the side has status-ok ggml rows
  bool same_threads = true;
  std::vector<Row> rows;
  int only_a = 0, only_b = 0;  // groups with a ratio on one side only
};
PeerComparison compare_peers(const ResultsFile& a, const ResultsFile& b);
// Prints nothing when neither side has ggml rows, one line when only one has.
void print_peer_comparison(const PeerComparison& p);

}  // namespace qmv
