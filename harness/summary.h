// Where qmvlab stands: the peer ratio (ggml's kernels against qmvlab's own, per weight
// type, shape and threads) and the one-screen report of a machine's results folder
// (peak, sweep, check, decode against llama.cpp, what was skipped and why), as terminal
// text and as Markdown with the folder's plots.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "harness/csv.h"

namespace qmv {

// One row of a bench or sweep CSV, with what the peer comparison needs. A bench CSV has
// no status: its rows read as "ok".
struct TimedRow {
  std::string kernel;  // its current name (a former name is mapped, kernels/former_names.h)
  std::string op, weight_type, act_format, backend, cache, model_op;
  std::int64_t rows = 0, cols = 0, bytes_per_call = 0;
  int threads = 0;
  double time_median_us = 0, gbps_median = 0, peak_gbps = 0;
  std::string act_quant;  // as written; empty in files from before the column
  double act_quant_median_us = 0;
  std::string status = "ok", reason;
};

struct TimedFile {
  std::string path, machine, cpu_model, git_commit;  // context of the first row
  bool has_act_quant = false;  // the act_quant columns are in the header
  std::vector<TimedRow> rows;  // every row; the numbers are read only where status is ok
};

// Reads the bench columns of a bench or sweep CSV (extra columns ignored). Throws
// std::runtime_error naming the file, the line and the column at fault.
TimedFile read_timed_csv(const std::string& path);
std::vector<TimedRow> timed_rows(const std::vector<BenchRow>& rows);

// ggml's kernels, registered beside qmvlab's as "<type>.ggml.<variant>".
bool is_peer_kernel(std::string_view kernel);

// "none", "before" or "in_call" (csv.h, BenchRow). A file from before the column says
// nothing: kernels taking an int8 activation (q8_K, q8_1, q8_0) had it quantized before
// the call, the others read f32; ggml's convert inside the call.
std::string act_quant_of(const TimedRow& r);
// The time a caller holding an f32 activation waits: the kernel's median, plus the
// activation's quantization when the harness did that before the call.
double comparable_time_us(const TimedRow& r);

// The fastest kernel of one side (qmvlab's own, or ggml's) at one point.
struct PeerBest {
  bool found = false;
  std::string kernel;
  double time_us = 0;  // comparable_time_us
  double gbps = 0;     // bytes_per_call over time_us
  double peak_pct = 0; // gbps over the read peak with the same threads; NaN when unknown
  int candidates = 0;  // kernels it was chosen from
  bool act_quant_missing = false;  // "before" with no quantization time recorded
};

// One shape x threads x cache of one weight type and op: qmvlab's fastest kernel and
// ggml's, and ratio = ggml time / qmvlab time (> 1: qmvlab faster; NaN unless both).
struct PeerPoint {
  std::string weight_type, op, backend, cache, model_op;
  std::int64_t rows = 0, cols = 0;
  int threads = 0;
  PeerBest qmv, ggml;
  double ratio = 0;
};

// The points of the status-ok rows, ordered by weight type, op, backend, cache, threads
// and shape. `peaks` (threads -> GB/s) stands in where a row has no peak_gbps.
std::vector<PeerPoint> peer_points(const std::vector<TimedRow>& rows, const std::map<int, double>& peaks = {});

// The points of one weight type, op, backend, threads and cache, summarised over shapes.
struct PeerGroup {
  std::string weight_type, op, backend, cache;
  int threads = 0;
  int shapes = 0;            // points in the group
  std::string qmv_kernel;    // fastest qmvlab kernel on most shapes (ties: by name)
  int qmv_kernel_wins = 0, qmv_shapes = 0;
  double pct_median = 0, pct_min = 0, pct_max = 0;  // of the fastest qmvlab kernel; NaN when unknown
  std::string ggml_kernel;
  int ggml_kernel_wins = 0, ggml_shapes = 0;
  double ratio_geomean = 0, ratio_min = 0, ratio_max = 0;  // over ratio_shapes; NaN when none
  int ratio_shapes = 0;
};
std::vector<PeerGroup> peer_groups(const std::vector<PeerPoint>& points);

// "q4_K", or "q4_K fused_up_gate" for an op other than a plain matvec, with the backend
// when it is not the CPU.
std::string peer_label(const std::string& weight_type, const std::string& op, const std::string& backend);
// "1.23" or "1.23 (0.91-1.60)"; "-" when NaN.
std::string ratio_range(double geomean, double lo, double hi, int n);

// Markdown tables: per point, and per group. `ggml_note` fills the ggml columns when no
// point has a ggml kernel.
std::string peer_point_table(const std::vector<PeerPoint>& points, const std::string& ggml_note);
std::string peer_group_table(const std::vector<PeerGroup>& groups, const std::string& ggml_note);
// A Markdown table with aligned columns (as print_table prints), ending in a newline.
std::string markdown_table(const std::vector<std::string>& header, const std::vector<std::vector<std::string>>& rows);

// A machine's results folder, read: each part present or not ("not measured (no FILE)").
struct ResultsSummary {
  std::string dir;
  std::string machine, cpu_model, git_commit, peer;  // peer: llama.cpp's version, when known
  std::vector<PeakRow> peaks;
  bool has_peak = false, has_sweep = false, has_check = false, has_peer_decode = false, has_decode = false;
  std::string sweep_file;  // the sweep CSV read: the full main job's default.csv, else the quick one's quick.csv
  std::string sweep_name = "default.csv";  // its file name
  std::string cache;       // the cache state summarised ("cold" when there are cold rows)
  int sweep_rows = 0, sweep_ok = 0, act_quant_missing = 0, other_cache_rows = 0;
  int peer_rows = 0, peer_rows_ok = 0;  // ggml rows in the sweep, and those timed
  std::vector<PeerPoint> points;
  std::vector<PeerGroup> groups;
  struct Decode {
    std::string model, weights, plan;
    int threads = 0, runs = 0;
    double qmv_tok_s = 0, llama_tok_s = 0, llama_norepack_tok_s = 0, ratio = 0;  // NaN: not measured
    double roofline_tok_s = 0, qmv_roofline_pct = 0, llama_roofline_pct = 0;      // NaN: not measured
  };
  std::vector<Decode> peer_decode;  // decode-vs-llamacpp.csv: the last row per model, weights and threads
  std::vector<Decode> decode;       // decode.csv: medians per model, plan and threads
  int check_rows = 0, check_pairs = 0, check_failed_pairs = 0;
  struct Reason {
    int count = 0;
    std::string what;  // one line: the count's unit, the reason, an example
  };
  std::vector<Reason> skipped;
  std::vector<std::string> plots;  // PNG files in dir, by name
};

// Reads dir/peak.csv, dir/default.csv, dir/check.csv, dir/decode-vs-llamacpp.csv and
// dir/decode.csv where present. Throws std::runtime_error when dir is not a folder or a
// file present cannot be read.
ResultsSummary summarize_results(const std::string& dir);
// One screen: the context line, the kernels per weight type and threads, decode, what
// was skipped.
std::string summary_text(const ResultsSummary& s);
// The same as Markdown, with the kernels per shape and the plots embedded by their path
// relative to the folder of `markdown_path`.
std::string summary_markdown(const ResultsSummary& s, const std::string& markdown_path);

}  // namespace qmv
