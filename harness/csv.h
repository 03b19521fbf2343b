// Results files: our CSV writer (units in column names, the context to rerun every
// row) and readers built on fast-cpp-csv-parser.
#pragma once

#include <cstdint>
#include <exception>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/one_line.h"  // one_line, for messages quoting a file
#include "model/plan.h"

namespace qmv {

// Where and how a row was produced; repeated on every row so a row stands alone.
struct RunContext {
  std::string machine, cpu_model, gpu, compiler, git_commit, command;
  // The Slurm job this process runs in, empty outside one (sweep rows carry them, so
  // rows merged from a cluster name the job and the node that wrote them):
  // SLURM_ARRAY_JOB_ID (or SLURM_JOB_ID outside an array), SLURM_ARRAY_TASK_ID,
  // SLURMD_NODENAME.
  std::string slurm_job_id = {}, slurm_array_task_id = {}, slurm_node = {};
};
RunContext current_context(const std::string& command);

struct BenchRow {
  std::string kernel, op, weight_type, act_format, backend;
  std::int64_t rows = 0, cols = 0;
  int threads = 0;
  std::string cache;  // "cold" or "warm"
  std::int64_t tile_rows = 0, min_parallel_rows = 0;  // CPU row tiling in force
  int repetitions = 0;
  double time_min_us = 0, time_median_us = 0, time_max_us = 0;
  std::int64_t bytes_per_call = 0;
  double gbps_median = 0, gbps_best = 0;
  double peak_gbps = 0;  // measured read bandwidth with the same threads
  double peak_pct = 0;   // gbps_median / peak_gbps * 100
  double gflops = 0;     // at the median time
  // Who turns the f32 activation into the kernel's input, and what it costs:
  // "none" (the kernel reads f32), "before" (the harness quantizes it before the call;
  // act_quant_median_us is that quantization timed alone, one thread), "in_call" (the
  // timed call converts it itself, as ggml's kernels do). A comparison across kernels
  // adds act_quant_median_us to the time of "before" rows (see bench.h).
  std::string act_quant;
  double act_quant_median_us = 0;
  // The one-off weight transform of a CPU kernel that has one (KernelSpec::prepare),
  // never inside the timed calls; both 0 (written empty) for other kernels and for
  // CUDA rows. prepare_us: the wall time of one prepare() of one weight copy as the bench
  // calls it, the median over the copies of the first build of the (kernel, shape)'s
  // rotation; prepared_bytes: the bytes of one prepared copy (both matrices of a fused pair).
  double prepare_us = 0;
  std::int64_t prepared_bytes = 0;
  // Activation vectors per call: a batch kernel's (OpKind::MatVecBatch) count, 1 for
  // every other kernel and in files from before the column. bytes_per_call and gflops
  // count the weights once and the vectors n times.
  int n = 1;
  // CUDA rows only (the GPU columns, empty for CPU rows; see bench_header). Times per
  // call: the on-GPU Q8_1 activation quantization alone, and quantization followed by
  // the matvec (0: not measured, for kernels that take no Q8_1).
  std::int64_t launches_per_rep = 0;  // launches timed between two CUDA events
  double quant_median_us = 0, time_with_quant_median_us = 0;
  double datasheet_gbps = 0;  // 2 x memory clock x bus width / 8
  double datasheet_pct = 0;   // gbps_median / datasheet_gbps * 100
  std::int64_t rotation_bytes = 0;  // weight copies rotated through (cold), or one copy (warm)
  std::string gpu_name, gpu_driver;
  int gpu_sm_count = 0, gpu_sm_clock_mhz = 0, gpu_mem_clock_mhz = 0, gpu_bus_bits = 0;
  std::int64_t gpu_l2_bytes = 0;
  // In memory only, no column: per repetition of a cold CPU point timed beside the read
  // loop, in the order they ran, its time per call and the read loop's speed nearest it
  // in the run (0: unknown). The tuning store keeps the repetitions at each read speed
  // apart (tuning_rows_by_read_speed), as the memory may change speed within one run.
  std::vector<double> rep_us, rep_read_gbps;
};

struct CheckRow {
  std::string kernel, weight_type, act_format, backend;
  std::int64_t rows = 0, cols = 0;
  int threads = 0;
  std::string activation;  // "gaussian", "outliers"; "skipped": not checked, `failure` says why
  std::uint64_t seed = 0;
  double nmse_kernel = 0, max_abs_kernel = 0, max_rel_kernel = 0, nmse_e2e = 0, max_abs_e2e = 0;
  double tol_nmse_kernel = 0, tol_max_rel_kernel = 0, tol_nmse_e2e = 0;
  bool passed = false;
  std::string failure;  // why it failed or was skipped
};

// A CPU row: a read with `threads` threads, the best of the read loops (`read_loop`
// names the winner). A GPU row (threads 0): device "cuda", a device-to-device copy
// counting bytes read and written; "cuda-read", a streaming read (`read_loop`, its
// fastest loop); both with the datasheet figure.
struct PeakRow {
  int threads = 0;
  std::int64_t buffer_bytes = 0;
  int repetitions = 0;
  double gbps_best = 0, gbps_median = 0;
  std::string device = "cpu";
  double datasheet_gbps = 0;
  std::string read_loop = {};  // empty in files from before the read-loop family
  double huge_page_pct = -1;    // of the buffer in huge pages; negative: unknown (GPU rows, older files)
};

// Quotes a field when it holds a comma, quote or newline (RFC 4180).
std::string csv_escape(std::string_view field);

// Writes one header and rows, flushing each row (whole rows only). With append, an
// existing file must have the same header, and rows go at its end. Otherwise a file
// already at the path is written aside (output_file.h) and moved over it when the writer
// is closed or destroyed, unless that happens while an exception unwinds: a run that
// fails leaves the old file as it was. A new file is written in place, so an interrupted
// run leaves the rows it finished (a sweep resumes from them). Refuses a path that is
// neither a regular file nor a character device. Creates parent directories. Throws
// std::runtime_error with the path on any failure.
class CsvWriter {
 public:
  CsvWriter(const std::string& path, const std::vector<std::string>& header, bool append);
  ~CsvWriter();
  CsvWriter(const CsvWriter&) = delete;
  CsvWriter& operator=(const CsvWriter&) = delete;
  void write(const std::vector<std::string>& fields);
  // Moves the finished file into place now (a later read of `path` sees it).
  void close();
  const std::string& path() const { return path_; }

 private:
  std::string path_, aside_;  // aside_: where a file replacing path_ is written, or empty
  std::size_t columns_;
  int exceptions_at_open_ = 0;
  std::ofstream out_;
};

// Before appending rows of `header` to `path`: where the file was written in one of the
// `older` headers (each a subset of `header`'s columns), rewrites it in `header`, the
// columns it lacked empty in its rows, so the append goes on in one file. Returns true
// when it rewrote; a file in any other header is left for CsvWriter to refuse.
bool widen_csv_header(const std::string& path, const std::vector<std::string>& header,
                      const std::vector<std::vector<std::string>>& older);

// With gpu_columns, the CUDA columns of BenchRow come before `command` (a run that
// selects CUDA kernels writes them; CPU rows leave them empty). Without, the CPU
// columns alone, as CPU-only benches write. Files written before the act_quant
// columns, or before prepare_us and prepared_bytes (legacy_bench_headers), are still
// read, the columns they lack empty; as are files before the `n` column (after
// prepared_bytes), read as n = 1.
std::vector<std::string> bench_header(bool gpu_columns = false);
std::vector<std::vector<std::string>> legacy_bench_headers(bool gpu_columns = false);
std::vector<std::string> bench_fields(const RunContext& ctx, const BenchRow& r, bool gpu_columns = false);
std::vector<std::string> check_header();
std::vector<std::string> check_fields(const RunContext& ctx, const CheckRow& r);
// With gpu_columns (a machine with a CUDA device), `device` and `datasheet_gbps`. Files
// written before the `huge_page_pct` column, or also before `read_loop`
// (legacy_peak_headers, newest first), are still read, the columns they lack empty.
std::vector<std::string> peak_header(bool gpu_columns = false);
std::vector<std::vector<std::string>> legacy_peak_headers(bool gpu_columns = false);
// A sweep row: the CPU bench columns but prepare_us and prepared_bytes, then
// experiment, model_op, status, reason, the check results and the Slurm job
// (slurm_job_id, slurm_array_task_id, slurm_node; harness/experiment.h writes and
// reads them). Files written before the `n` column, also before the Slurm columns, or
// also before the act_quant ones (legacy_sweep_headers, newest first), still read and
// resume, the columns they lack empty (n read as 1). sweep_bench_fields: the bench part of a sweep row.
std::vector<std::string> sweep_header();
std::vector<std::vector<std::string>> legacy_sweep_headers();
std::vector<std::string> sweep_bench_fields(const RunContext& ctx, const BenchRow& r);
std::vector<std::string> peak_fields(const RunContext& ctx, const PeakRow& r, bool gpu_columns = false);

// The speeds a plan's `auto` chooses by, from bench rows.
std::vector<KernelSpeed> kernel_speeds(const std::vector<BenchRow>& rows);

enum class CsvKind { Bench, Check, Peak, Sweep, Unknown };
// Which of our files this is, from its header. Throws if it cannot be read.
CsvKind detect_csv_kind(const std::string& path);

// Readers (context columns are read back into `ctx` from the first row when given).
// Throw std::runtime_error naming the file and the problem (missing column, bad number),
// with the line and the column where one is at fault. Numbers must parse whole; an empty
// number field reads as 0. The GPU columns are optional: a file without them reads with
// them zero / "cpu".
std::vector<BenchRow> read_bench_csv(const std::string& path, RunContext* ctx = nullptr);
std::vector<CheckRow> read_check_csv(const std::string& path);
std::vector<PeakRow> read_peak_csv(const std::string& path);

// The first line of a results file, without its line end: every reader matches our
// headers by it, and a file saved with CRLF line ends (fast-cpp-csv-parser reads its
// rows either way) must read as the same file with LF. header_line_of(path) reads it ("" for
// an empty file); throws std::runtime_error naming a file it cannot open.
std::string_view header_line(std::string_view text);
std::string header_line_of(const std::string& path);

// Throws std::runtime_error "<path>: <why>" when `path` is not a regular file one can
// read as input: missing, a directory, a FIFO (input_file_problem, output_file.h).
void require_input_file(const std::string& path);

// The statuses a sweep row is written with (harness/cli/sweep.cpp): "ok" (checked and
// timed), "failed" (its check failed or its run threw), "skipped" (it cannot run here).
bool known_sweep_status(std::string_view status);
inline constexpr const char* kSweepStatuses = "ok, failed, skipped";

// For every reader of results CSVs (these, sweeps, compare): one line naming the file,
// and the line where the reader stopped, for an exception fast-cpp-csv-parser threw
// (its own messages leave the line of a header fault at -1). `line` is the reader's
// get_file_line() (0: nothing read yet).
std::string csv_read_error(const std::string& path, unsigned line, const std::exception& error);
// A number field read whole ("12", "-3", "1.5e-3", "inf"; no sign '+', no spaces):
// T is int, std::int64_t, std::uint64_t or double. Throws std::runtime_error
// "<path>: line <line>: column <column>: '<text>' is not a number" (or out of range).
template <class T>
T csv_number(std::string_view text, const std::string& path, unsigned line, std::string_view column);

}  // namespace qmv
