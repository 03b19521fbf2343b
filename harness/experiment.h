// Declarative experiments: a TOML file naming kernels x shapes x threads x cache, its
// expansion into points, sharding, and the sweep CSV those points are written to.
#pragma once

#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "harness/csv.h"
#include "harness/shapes.h"
#include "kernels/registry.h"

namespace qmv {

// A bad experiment file: the message names the file, the key and the line, on one
// line (control characters quoted from the file are escaped).
struct ExperimentError : std::runtime_error {
  explicit ExperimentError(const std::string& what) : std::runtime_error(one_line(what)) {}
};

// Why the comma-separated kernel globs select nothing when a pattern matched and the
// exclusions ("!glob") then took out every kernel it matched, naming those exclusions
// and what they took out; "" when nothing matched in the first place.
std::string exclusions_removed_all(std::string_view globs, const Registry& registry = global_registry());

struct Experiment {
  std::string source;  // the file it was read from
  std::string name;    // [A-Za-z0-9._-]+, names the results file
  std::string description;
  std::vector<std::string> kernel_globs;
  std::vector<TaggedShape> shapes;
  std::vector<int> threads;         // "all" resolved to this machine's cores
  std::vector<std::string> caches;  // "cold", "warm"
  // Activation vectors per call (`n = [1, 2, 4, 8]`): a batch kernel (op matvec_batch)
  // is swept with each count up to its max_n, every other kernel with 1 where the list
  // holds it.
  std::vector<int> vectors{1};
  int repetitions = 5;
  double min_time_s = 0.1;
  bool check = true;
};

// `text` is the TOML; `source` names it in errors. Kernel globs must select at least
// one kernel of `registry`.
Experiment parse_experiment(std::string_view text, const std::string& source,
                            const Registry& registry = global_registry());
Experiment load_experiment(const std::string& path, const Registry& registry = global_registry());

// One measurement: a kernel on a shape with a thread count and a cache state.
struct SweepPoint {
  const KernelSpec* kernel = nullptr;
  TaggedShape shape;
  int threads = 1;
  std::string cache;
  std::string skip_reason;  // set when the point cannot run here (and why)
  int n = 1;                // activation vectors per call
};

// Identifies a point across runs and machines: "kernel|ROWSxCOLS|threads|cache", and
// "|n<n>" after it for a batch point of n > 1 vectors (so the keys of single-vector
// points are those of files from before the n axis).
std::string point_key(const std::string& kernel, std::int64_t rows, std::int64_t cols, int threads,
                      const std::string& cache, int n = 1);
std::string point_key(const SweepPoint& p);
// Sort order of points in merged files: kernel, rows, cols, threads, cache, n.
bool point_less(const SweepPoint& a, const SweepPoint& b);

// kernels x shapes x threads x cache x n, in that nesting, kernels in name order. Points a
// kernel cannot run (shape rule, missing CPU features or device, GPU not timed here)
// are kept with their skip_reason.
std::vector<SweepPoint> expand_points(const Experiment& e, const Registry& registry = global_registry());

// "i/n" with 1 <= i <= n; throws std::invalid_argument.
struct Shard {
  int index = 1, count = 1;
};
Shard parse_shard(std::string_view spec);
// Whether a point belongs to the shard: by a hash of its key alone, so the split is
// the same on every machine and whatever other points there are.
bool in_shard(const std::string& key, Shard shard);

// The sweep CSV: the bench columns, then experiment, model_op, status, reason, the
// check results and the Slurm job from `ctx` (see sweep_header() in csv.h).
struct SweepCheck {
  bool ran = false;
  bool passed = false;
  double nmse_kernel = 0;  // worst over the activation cases
  double nmse_e2e_gaussian = 0, nmse_e2e_outliers = 0;
  std::string failure;
};
std::vector<std::string> sweep_fields(const RunContext& ctx, const std::string& experiment,
                                      const SweepPoint& point, const BenchRow* bench,
                                      const SweepCheck& check, const std::string& status,
                                      const std::string& reason);

// A results CSV read as text: its header line's columns and each row's fields.
struct CsvTable {
  std::vector<std::string> header;
  std::vector<std::vector<std::string>> rows;
  bool older_header = false;  // read_sweep_csv: the file has a legacy header (its missing columns read "")
  std::size_t column(const std::string& name) const;  // throws when absent
  std::string key(std::size_t row) const;             // point_key of a sweep row
};
// Reads a sweep CSV, its rows in the current columns; refuses a header that is neither
// sweep_header() nor one of legacy_sweep_headers(). A last line cut short by an
// interrupted write is dropped (and `dropped_partial` set) rather than refused.
CsvTable read_sweep_csv(const std::string& path, bool* dropped_partial = nullptr);

// Joins sweep CSVs: same header required; a point met again is dropped (its key is
// added to `duplicates`); rows sorted by point.
CsvTable merge_sweeps(const std::vector<std::string>& paths, std::vector<std::string>* duplicates);

}  // namespace qmv
