// The tuning store: what qmvlab has measured on this machine, kept so that its choices
// come from measurements made here (as FFTW keeps wisdom and Triton its autotune cache).
//
// One CSV per machine, `results/<machine>/tuning.csv` (the machine name tells CPUs and
// ISA masks apart, harness/machine.h), committed like any result; a GPU's rows go to its
// own folder, `results/<gpu>/tuning.csv`, named by the device and its architecture. Its
// rows:
//   kind=kernel  the median time of one call of one kernel on one shape, thread count,
//                cache state and count of vectors per call (n: 1 for a matvec or a
//                fused pair, the batch's B for a batch kernel, OpKind::MatVecBatch),
//                written by `bench`, `sweep`, `tune` and the `auto` plan as they
//                measure;
//   kind=peak    the machine's read bandwidth on a thread count (the roofline `decode`
//                divides by), written by `peak` and by the first `decode` that needs it.
// A row is used only on the machine and ISA mask (for a CUDA kernel: the GPU and its
// architecture) that wrote it, and a kernel row only while the kernel's build
// (kernels/build_id.h) is the one measured and, cold on the CPU, only when its calls went
// round a footprint that outruns the caches (cold_enough).
//
// A cold CPU kernel row also keeps the read bandwidth measured beside it (read_gbps):
// a host whose memory runs at two speeds, minutes or seconds apart, can have a
// different fastest kernel at each (results/README.md). A bench's repetitions are
// kept apart by the speed each met (tuning_rows_by_read_speed); a newer row replaces
// the one of its key measured at the same read speed (within kSameReadSpeed), and rows
// at other speeds stay beside it, up to three per key. `auto` ranks kernels over the
// speeds they were all timed at (harness/auto_plan.h).
//
// A damaged file is reported in one line and read as empty; writers take a lock, merge,
// write aside and rename, so concurrent writers lose no row and a reader never sees
// half a file.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "harness/csv.h"
#include "kernels/kernel.h"

namespace qmv {

// Whose measurements a process writes and may use: this CPU within its ISA mask, and
// this GPU with its architecture (none without a CUDA device).
struct StoreScope {
  std::string cpu_machine, cpu_isa;
  std::string gpu_machine, gpu_arch;  // "" without a device
  static StoreScope here();
};

struct TuningRow {
  std::string kind = "kernel";  // "kernel" or "peak"
  std::string machine, isa, cpu_model;
  std::string kernel;        // kernel name; a peak row: the read loop
  std::string kernel_build;  // kernel rows only
  std::string op;            // "matvec", "fused_up_gate"; "read" for a peak row
  std::string weight_type;   // kernel rows only
  std::int64_t rows = 0, cols = 0;
  int threads = 0;
  std::string cache;  // "cold" or "warm" (kernel rows)
  // Activation vectors per call the time is of: a batch kernel's count, 1 for every
  // other row and for files written before the column.
  int n = 1;
  int repetitions = 0;
  double time_median_us = 0;
  double gbps = 0;           // kernel: weights + activation + output per median call; peak: the read bandwidth
  std::string measured_at;   // UTC, ISO 8601
  std::string source;        // the command that measured it: bench, sweep, tune, auto, peak, decode
  std::string git_commit;
  // A cold CPU kernel row: the read bandwidth of the read loop timed in the same run
  // (BenchRow::peak_gbps), the memory's speed while the kernel was timed; 0: unknown
  // (a warm or GPU row, a file written before the column).
  double read_gbps = 0;
  // A CPU kernel row: the bytes of weight copies its calls went round (BenchRow::
  // rotation_bytes); 0: unknown (a file written before the column).
  std::int64_t rotation_bytes = 0;
  // "2026-11-28", what a plan table shows.
  std::string date() const { return measured_at.substr(0, 10); }
};

// The store's columns, in file order.
std::vector<std::string> tuning_store_header();

// Whether a kernel row was measured cold enough to rank by: a cold CPU row whose calls
// went round at least cold_rotation_bytes() of weights (harness/peak.h). One timed on a
// smaller rotation (before the column, when rotations were 4x the last-level cache)
// read part of its weights from that cache, some kernels more than others.
bool cold_enough(const KernelSpec& k, const TuningRow& r);

class TuningStore {
 public:
  // `path`: the store file; "" means default_path(backend).
  explicit TuningStore(std::string path = {}, Backend backend = Backend::CPU);
  // $QMV_TUNING_STORE when set (one file for both backends); else
  // results/<machine>/tuning.csv, for CUDA results/<gpu>/tuning.csv, in the source tree
  // this binary was built from, or under the working directory when that tree is gone
  // (a bundle run on another machine).
  static std::string default_path(Backend backend = Backend::CPU);
  const std::string& path() const { return path_; }

  // Every row of the file; a missing file has none. Throws std::runtime_error naming the
  // file and the line for a damaged one.
  std::vector<TuningRow> read_all() const;
  // The rows this process may use: those of `scope` (a CUDA kernel's rows: its GPU and
  // architecture; all others: its CPU and ISA mask), kernel rows of a registered kernel
  // whose build here is the one measured. A damaged file gives none, with `warning`
  // (when given) set to one line saying why.
  std::vector<TuningRow> usable_rows(std::string* warning = nullptr,
                                     const StoreScope& scope = StoreScope::here()) const;
  // The newest usable peak row for `threads`.
  std::optional<TuningRow> peak(int threads) const;

  // Adds rows, each replacing the rows of the same key (kind, machine, isa, kernel,
  // build, op, shape, threads, cache, n) at the same read speed. Returns "" on success, else one line saying why the
  // store was not written (the caller warns; a measurement is never lost for it). A
  // damaged file is kept beside the new one as <path>.damaged.
  std::string add(const std::vector<TuningRow>& rows) const;

 private:
  std::string path_;
};

// Two read bandwidths within this ratio are one speed of the memory: the two speeds of
// the host in results/amd-zen4-2c/handover.txt read 28.8-36.8 and 49.9-63.8 GB/s single
// passes, and a run's read figure is a median over its passes, nearer its speed's middle.
inline constexpr double kSameReadSpeed = 1.25;
// Whether two rows' read speeds are the same speed (an unknown one, 0, matches any).
bool same_read_speed(double a_gbps, double b_gbps);
// Read speeds in ascending order cut into groups from the slowest up, each spanning
// kSameReadSpeed from its first: each group's [begin, end) in `ascending_gbps`.
std::vector<std::pair<std::size_t, std::size_t>> read_speed_groups(const std::vector<double>& ascending_gbps);
// How often consecutive reads (an InterleavedRead's passes, in order) are not the same
// speed: a memory that changes speed between a decode's tokens, or a host that stalls a
// pass, makes that run's share of the roofline an unsteady figure.
int read_speed_changes(const std::vector<double>& gbps_in_order);
// A decode's share of its roofline, in percent, spell by spell: its read passes (in
// order; pass k ran between steps k and k + 1) cut into steady spells wherever two
// consecutive ones are not the same speed, and each step's bytes set against the median
// read of its spell (the spell of the pass just before it; the first step's, of the one
// after it), summed, over the time the steps took. A spell of fewer than
// kMinSpellPasses passes is a stall, not a speed: its steps take the spell before it
// (else after it). Without a change of speed this is the share of the run's median
// read; with one, each token meets the memory of its own minutes, where one median for
// the run mixes the speeds. 0 without passes or steps.
inline constexpr std::size_t kMinSpellPasses = 3;
double roofline_pct_by_spell(const std::vector<double>& step_s, const std::vector<double>& step_bytes,
                             const std::vector<double>& pass_gbps);

// The current time as TuningRow::measured_at writes it.
std::string utc_timestamp();
// A store row of `scope` for a bench row (`source`: the command that timed it): a CUDA
// row names the GPU, the others the CPU.
TuningRow tuning_row(const BenchRow& bench, const std::string& source, const StoreScope& scope = StoreScope::here());
// A cold row's repetitions at each read speed they met (BenchRow::rep_read_gbps):
// grouped from the slowest read up, each group spanning kSameReadSpeed, a group kept
// where it holds kMinRepsAtSpeed of them or all of them; a repetition of unknown
// speed joins none, nor does one that read its `bytes_per_call` (0: not checked) more
// than kSameReadSpeed times faster than the speed given it: the memory changed speed
// between it and the read nearest it. Each group's time and read speed are its medians.
struct RepsAtSpeed {
  double time_median_us = 0, read_gbps = 0;
  int repetitions = 0;
};
inline constexpr int kMinRepsAtSpeed = 2;
std::vector<RepsAtSpeed> reps_by_read_speed(const std::vector<double>& rep_us, const std::vector<double>& rep_read_gbps,
                                            double bytes_per_call = 0);
// The store rows of a bench row: a cold one with its repetitions' read speeds gives one
// row per speed they met (reps_by_read_speed), each of its own median time; any other,
// one row of read speed `read_gbps` (0: unknown; warm rows always unknown).
std::vector<TuningRow> tuning_rows_by_read_speed(const BenchRow& bench, const std::string& source, double read_gbps,
                                                 const StoreScope& scope = StoreScope::here());
// A peak row of this machine: `gbps` read by `read_loop` on `threads` threads.
TuningRow peak_tuning_row(int threads, double gbps, const std::string& read_loop, int repetitions,
                          const std::string& source);
// Adds bench rows to the default store of their backend (what decode would meet: CPU
// rows under decode's row tiling, cold CUDA rows; a batch kernel's at every n it was
// timed with, what `decode --batch` would meet), printing one line on stderr if it
// cannot be written. `read_gbps`: per thread count, the read loops' speed timed among
// the kernels (BenchOutcome::interleaved_peak_gbps), a cold CPU row's read_gbps where
// its repetitions' own speeds are not known (tuning_rows_by_read_speed); a row of a
// thread count without one keeps an unknown speed.
void record_in_store(const std::vector<BenchRow>& rows, const std::string& source,
                     const std::map<int, double>& read_gbps = {});

// The CPU read bandwidth every share of the roofline divides by, one figure per machine
// and thread count: the peak row of this machine's store (`qmvlab peak` keeps its
// steadiest read-loop median there), or, where there is none yet, the read family
// measured now (its steadiest median) and kept there, so that every later decode and
// tune divides by the same figure and never by one quiet moment's burst.
struct StoredRoofline {
  double gbps = 0;
  std::string source;     // where the figure came from, for the reader
  std::string read_loop;  // the read loop that measured it
};
// `measured_by` names the command in a row it adds.
StoredRoofline cpu_roofline(int threads, const std::string& measured_by);

}  // namespace qmv
