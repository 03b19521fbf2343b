#include "harness/csv.h"

#include <fmt/format.h>

#include "harness/csv_columns.h"
#include "harness/fccp.h"
#include "kernels/former_names.h"

#include <algorithm>
#include <array>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <limits>
#include <optional>
#include <stdexcept>
#include <tuple>
#include <type_traits>
#include <utility>

#include "harness/machine.h"
#include "harness/output_file.h"

namespace qmv {

namespace {

std::string env_or_empty(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

}  // namespace

RunContext current_context(const std::string& command) {
  const MachineInfo& m = machine_info();
  RunContext ctx{m.machine, m.cpu_model, m.gpu, m.compiler, m.git_commit, command};
  // An array task's own SLURM_JOB_ID differs per task; the array's id and the task's
  // index are what squeue, sacct and scancel name it by ("1234_5").
  ctx.slurm_array_task_id = env_or_empty("SLURM_ARRAY_TASK_ID");
  ctx.slurm_job_id = env_or_empty(ctx.slurm_array_task_id.empty() ? "SLURM_JOB_ID" : "SLURM_ARRAY_JOB_ID");
  ctx.slurm_node = env_or_empty("SLURMD_NODENAME");
  return ctx;
}

std::string csv_escape(std::string_view field) {
  if (field.find_first_of(",\"\n\r") == std::string_view::npos) return std::string(field);
  std::string out = "\"";
  for (char c : field) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

namespace {

std::string join(const std::vector<std::string>& fields) {
  std::string line;
  for (std::size_t i = 0; i < fields.size(); ++i) {
    if (i) line += ',';
    line += csv_escape(fields[i]);
  }
  return line;
}

// Shortest text that reads back to the same double.
std::string num(double v) { return fmt::format("{}", v); }

std::vector<std::string> with_context(std::vector<std::string> ctx_first,
                                      const std::vector<std::string>& rest) {
  ctx_first.insert(ctx_first.end(), rest.begin(), rest.end());
  return ctx_first;
}

const std::vector<std::string> kContextColumns = {"machine", "cpu_model", "gpu", "compiler",
                                                  "git_commit"};
std::vector<std::string> context_fields(const RunContext& c) {
  return {c.machine, c.cpu_model, c.gpu, c.compiler, c.git_commit};
}

}  // namespace

CsvWriter::CsvWriter(const std::string& path, const std::vector<std::string>& header, bool append)
    : path_(path), columns_(header.size()), exceptions_at_open_(std::uncaught_exceptions()) {
  const OutputTarget target = output_target(path);
  const std::filesystem::path p(path);
  std::error_code ec;
  if (p.has_parent_path()) std::filesystem::create_directories(p.parent_path(), ec);
  if (ec) throw std::runtime_error(fmt::format("{}: cannot create directory: {}", path, ec.message()));
  const bool exists = target == OutputTarget::Regular && std::filesystem::file_size(p, ec) > 0;
  if (append && exists) {
    if (header_line_of(path) != join(header))
      throw std::runtime_error(fmt::format(
          "{}: cannot append, its header differs from this command's columns", path));
    out_.open(path, std::ios::app);
  } else {
    if (exists) aside_ = aside_path(path);
    out_.open(aside_.empty() ? path : aside_, std::ios::trunc);
  }
  if (!out_) throw std::runtime_error(fmt::format("{}: cannot open for writing", path));
  if (!(append && exists)) out_ << join(header) << '\n' << std::flush;
}

CsvWriter::~CsvWriter() {
  if (aside_.empty()) return;
  std::error_code ec;
  if (std::uncaught_exceptions() > exceptions_at_open_) {
    out_.close();
    std::filesystem::remove(aside_, ec);  // the run failed: the old file stays
    return;
  }
  try {
    close();
  } catch (const std::exception& e) {
    fmt::print(stderr, "qmvlab: {}\n", e.what());
  }
}

void CsvWriter::close() {
  out_.close();
  if (aside_.empty()) return;
  const std::string aside = std::exchange(aside_, std::string());
  if (std::rename(aside.c_str(), path_.c_str()) != 0) {
    const int err = errno;
    std::error_code ec;
    std::filesystem::remove(aside, ec);
    throw std::runtime_error(fmt::format("{}: cannot move the finished file into place: {}", path_, std::strerror(err)));
  }
}

void CsvWriter::write(const std::vector<std::string>& fields) {
  if (fields.size() != columns_)
    throw std::logic_error(fmt::format("{}: row has {} fields, header {}", path_, fields.size(), columns_));
  out_ << join(fields) << '\n' << std::flush;
  if (!out_) throw std::runtime_error(fmt::format("{}: write failed", path_));
}

namespace {

// The CUDA columns of a bench row, in the order written (before `command`).
const std::vector<std::string> kGpuBenchColumns = {
    "launches_per_rep", "quant_median_us", "time_with_quant_median_us", "datasheet_gbps", "datasheet_pct",
    "rotation_bytes",   "gpu_name",        "gpu_sm_count",              "gpu_driver",     "gpu_sm_clock_mhz",
    "gpu_mem_clock_mhz", "gpu_bus_bits",   "gpu_l2_bytes"};
const std::vector<std::string> kGpuPeakColumns = {"device", "datasheet_gbps"};

// `h` without its columns from `first` to `last`, both included.
std::vector<std::string> without(std::vector<std::string> h, std::string_view first, std::string_view last) {
  const auto from = std::find(h.begin(), h.end(), first);
  h.erase(from, std::find(from, h.end(), last) + 1);
  return h;
}

// The bench columns a sweep row has: all the CPU ones but the weight transform's.
std::vector<std::string> sweep_bench_header() { return without(bench_header(), "prepare_us", "prepared_bytes"); }

// Inserts `extra` before the last column (`command`).
std::vector<std::string> before_command(std::vector<std::string> fields, const std::vector<std::string>& extra) {
  fields.insert(fields.end() - 1, extra.begin(), extra.end());
  return fields;
}

std::vector<std::string> gpu_bench_fields(const BenchRow& r) {
  if (r.gpu_name.empty()) return std::vector<std::string>(kGpuBenchColumns.size());
  auto optional = [](double v) { return v > 0 ? num(v) : std::string(); };
  return {std::to_string(r.launches_per_rep), optional(r.quant_median_us), optional(r.time_with_quant_median_us),
          num(r.datasheet_gbps),              num(r.datasheet_pct),         std::to_string(r.rotation_bytes),
          r.gpu_name,                         std::to_string(r.gpu_sm_count), r.gpu_driver,
          std::to_string(r.gpu_sm_clock_mhz), std::to_string(r.gpu_mem_clock_mhz), std::to_string(r.gpu_bus_bits),
          std::to_string(r.gpu_l2_bytes)};
}

}  // namespace

std::vector<std::string> bench_header(bool gpu_columns) {
  std::vector<std::string> h = with_context(
      kContextColumns, {"kernel", "op", "weight_type", "act_format", "backend", "rows", "cols", "threads", "cache",
                        "tile_rows", "min_parallel_rows", "repetitions", "time_min_us", "time_median_us",
                        "time_max_us", "bytes_per_call", "gbps_median", "gbps_best", "peak_gbps", "peak_pct",
                        "gflops", "act_quant", "act_quant_median_us", "prepare_us", "prepared_bytes", "n", "command"});
  return gpu_columns ? before_command(std::move(h), kGpuBenchColumns) : h;
}

std::vector<std::vector<std::string>> legacy_bench_headers(bool gpu_columns) {
  const std::vector<std::string> before_n = without(bench_header(gpu_columns), "n", "n");
  const std::vector<std::string> before_prepare = without(before_n, "prepare_us", "prepared_bytes");
  return {before_n, before_prepare, without(before_prepare, "act_quant", "act_quant_median_us")};
}

std::vector<std::string> bench_fields(const RunContext& ctx, const BenchRow& r, bool gpu_columns) {
  const bool prepared = r.prepare_us > 0 || r.prepared_bytes > 0;
  std::vector<std::string> f = with_context(
      context_fields(ctx),
      {r.kernel, r.op, r.weight_type, r.act_format, r.backend, std::to_string(r.rows), std::to_string(r.cols),
       std::to_string(r.threads), r.cache, std::to_string(r.tile_rows), std::to_string(r.min_parallel_rows),
       std::to_string(r.repetitions), num(r.time_min_us), num(r.time_median_us), num(r.time_max_us),
       std::to_string(r.bytes_per_call), num(r.gbps_median), num(r.gbps_best), num(r.peak_gbps), num(r.peak_pct),
       num(r.gflops), r.act_quant, r.act_quant_median_us > 0 ? num(r.act_quant_median_us) : std::string(),
       prepared ? num(r.prepare_us) : std::string(), prepared ? std::to_string(r.prepared_bytes) : std::string(),
       std::to_string(r.n), ctx.command});
  return gpu_columns ? before_command(std::move(f), gpu_bench_fields(r)) : f;
}

std::vector<std::string> check_header() {
  return with_context(kContextColumns,
                      {"kernel", "weight_type", "act_format", "backend", "rows", "cols", "threads",
                       "activation", "seed", "nmse_kernel", "max_abs_kernel", "max_rel_kernel",
                       "nmse_e2e", "max_abs_e2e", "tol_nmse_kernel", "tol_max_rel_kernel",
                       "tol_nmse_e2e", "passed", "failure", "command"});
}

std::vector<std::string> check_fields(const RunContext& ctx, const CheckRow& r) {
  return with_context(context_fields(ctx),
                      {r.kernel, r.weight_type, r.act_format, r.backend, std::to_string(r.rows),
                       std::to_string(r.cols), std::to_string(r.threads), r.activation,
                       std::to_string(r.seed), num(r.nmse_kernel), num(r.max_abs_kernel),
                       num(r.max_rel_kernel), num(r.nmse_e2e), num(r.max_abs_e2e),
                       num(r.tol_nmse_kernel), num(r.tol_max_rel_kernel), num(r.tol_nmse_e2e),
                       r.passed ? "1" : "0", r.failure, ctx.command});
}

std::vector<std::string> peak_header(bool gpu_columns) {
  std::vector<std::string> h = with_context(kContextColumns, {"threads", "buffer_bytes", "repetitions", "gbps_best",
                                                              "gbps_median", "read_loop", "huge_page_pct", "command"});
  return gpu_columns ? before_command(std::move(h), kGpuPeakColumns) : h;
}

std::vector<std::vector<std::string>> legacy_peak_headers(bool gpu_columns) {
  const std::vector<std::string> before_pages = without(peak_header(gpu_columns), "huge_page_pct", "huge_page_pct");
  return {before_pages, without(before_pages, "read_loop", "read_loop")};
}

namespace {
const std::vector<std::string> kSweepColumns = {"experiment", "model_op",    "status",            "reason",
                                                "check_passed", "nmse_kernel", "nmse_e2e_gaussian", "nmse_e2e_outliers"};
const std::vector<std::string> kSlurmColumns = {"slurm_job_id", "slurm_array_task_id", "slurm_node"};
}  // namespace

std::vector<std::string> sweep_header() {
  std::vector<std::string> h = sweep_bench_header();
  h.insert(h.end(), kSweepColumns.begin(), kSweepColumns.end());
  h.insert(h.end(), kSlurmColumns.begin(), kSlurmColumns.end());
  return h;
}

std::vector<std::vector<std::string>> legacy_sweep_headers() {
  std::vector<std::string> before_slurm = without(sweep_bench_header(), "n", "n");
  before_slurm.insert(before_slurm.end(), kSweepColumns.begin(), kSweepColumns.end());
  return {without(sweep_header(), "n", "n"), before_slurm, without(before_slurm, "act_quant", "act_quant_median_us")};
}

std::vector<std::string> sweep_bench_fields(const RunContext& ctx, const BenchRow& r) {
  std::vector<std::string> f = bench_fields(ctx, r);
  const std::vector<std::string> h = bench_header();
  const auto at = std::find(h.begin(), h.end(), "prepare_us") - h.begin();
  f.erase(f.begin() + at, f.begin() + at + 2);
  return f;
}

std::vector<std::string> peak_fields(const RunContext& ctx, const PeakRow& r, bool gpu_columns) {
  std::vector<std::string> f = with_context(
      context_fields(ctx), {std::to_string(r.threads), std::to_string(r.buffer_bytes), std::to_string(r.repetitions),
                            num(r.gbps_best), num(r.gbps_median), r.read_loop,
                            r.huge_page_pct >= 0 ? num(r.huge_page_pct) : std::string(), ctx.command});
  if (!gpu_columns) return f;
  return before_command(std::move(f), {r.device, r.datasheet_gbps > 0 ? num(r.datasheet_gbps) : std::string()});
}

std::string csv_read_error(const std::string& path, unsigned line, const std::exception& error) {
  namespace err = io::error;
  const std::string at = line > 0 ? fmt::format("{}: line {}", path, line) : path;
  if (dynamic_cast<const err::can_not_open_file*>(&error)) return fmt::format("{}: cannot open", path);
  if (dynamic_cast<const err::header_missing*>(&error)) return fmt::format("{}: empty file (no header line)", path);
  if (const auto* e = dynamic_cast<const err::missing_column_in_header*>(&error))
    return fmt::format("{}: the header has no column '{}'", at, one_line(e->column_name));
  if (const auto* e = dynamic_cast<const err::duplicated_column_in_header*>(&error))
    return fmt::format("{}: column '{}' appears twice in the header", at, one_line(e->column_name));
  if (const auto* e = dynamic_cast<const err::extra_column_in_header*>(&error))
    return fmt::format("{}: unexpected column '{}' in the header", at, one_line(e->column_name));
  if (dynamic_cast<const err::too_few_columns*>(&error))
    return fmt::format("{}: fewer fields than the header has columns", at);
  if (dynamic_cast<const err::too_many_columns*>(&error))
    return fmt::format("{}: more fields than the header has columns", at);
  if (dynamic_cast<const err::escaped_string_not_closed*>(&error))
    return fmt::format("{}: a quoted field is not closed on its line", at);
  if (dynamic_cast<const err::line_length_limit_exceeded*>(&error))
    return fmt::format("{}: line longer than the reader's limit of 16 MiB", at);
  return fmt::format("{}: {}", at, error.what());
}

std::string_view header_line(std::string_view text) {
  std::string_view line = text.substr(0, text.find('\n'));
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  return line;
}

std::string header_line_of(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(fmt::format("{}: cannot open", path));
  std::string first;
  std::getline(in, first);
  return std::string(header_line(first));
}

void require_input_file(const std::string& path) {
  if (const std::string problem = input_file_problem(path); !problem.empty())
    throw std::runtime_error(fmt::format("{}: {}", path, problem));
}

bool known_sweep_status(std::string_view status) {
  return status == "ok" || status == "failed" || status == "skipped";
}

template <class T>
T csv_number(std::string_view text, const std::string& path, unsigned line, std::string_view column) {
  T v{};
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, v);
  const bool parsed = !text.empty() && ec == std::errc() && ptr == end;
  // Every number qmvlab writes is finite and none is negative (times, bandwidths,
  // shares, counts, errors): a NaN or a -5 GB/s row is damage, refused where it is read.
  if (parsed && !(std::is_floating_point_v<T> && !std::isfinite(static_cast<double>(v))) && !(v < T{})) return v;
  // An unsigned reader does not parse a sign: "-7" is a negative number all the same.
  const bool minus = std::is_unsigned_v<T> && !text.empty() && text.front() == '-' &&
                     std::from_chars(text.data() + 1, end, v).ptr == end;
  const char* why = minus ? "negative"
                    : !parsed ? (ec == std::errc::result_out_of_range ? "out of range" : "not a number")
                    : v < T{} ? "negative"
                              : "not a finite number";
  throw std::runtime_error(fmt::format("{}: line {}: column {}: '{}' is {}", path, line, column, one_line(text), why));
}
template int csv_number<int>(std::string_view, const std::string&, unsigned, std::string_view);
template std::int64_t csv_number<std::int64_t>(std::string_view, const std::string&, unsigned, std::string_view);
template std::uint64_t csv_number<std::uint64_t>(std::string_view, const std::string&, unsigned, std::string_view);
template double csv_number<double>(std::string_view, const std::string&, unsigned, std::string_view);

namespace {

using csv_columns::Fields;

}  // namespace

CsvKind detect_csv_kind(const std::string& path) {
  require_input_file(path);
  const std::string first = header_line_of(path);
  std::error_code ec;
  if (first.empty() && std::filesystem::file_size(path, ec) == 0 && !ec)
    throw std::runtime_error(fmt::format("{}: empty file", path));
  for (bool gpu : {false, true}) {
    if (first == join(bench_header(gpu))) return CsvKind::Bench;
    for (const auto& h : legacy_bench_headers(gpu))
      if (first == join(h)) return CsvKind::Bench;
  }
  if (first == join(check_header())) return CsvKind::Check;
  for (bool gpu : {false, true}) {
    if (first == join(peak_header(gpu))) return CsvKind::Peak;
    for (const auto& h : legacy_peak_headers(gpu))
      if (first == join(h)) return CsvKind::Peak;
  }
  if (first == join(sweep_header())) return CsvKind::Sweep;
  for (const auto& h : legacy_sweep_headers())
    if (first == join(h)) return CsvKind::Sweep;
  return CsvKind::Unknown;
}

std::vector<BenchRow> read_bench_csv(const std::string& path, RunContext* ctx) {
  // The CPU columns older files have too, then the optional ones: the GPU's (as
  // kGpuBenchColumns), the activation quantization's, the weight transform's, n.
  static constexpr std::array<const char*, 45> kNames = {
      "machine", "cpu_model", "gpu", "compiler", "git_commit", "kernel", "op", "weight_type", "act_format",
      "backend", "rows", "cols", "threads", "cache", "tile_rows", "min_parallel_rows", "repetitions",
      "time_min_us", "time_median_us", "time_max_us", "bytes_per_call", "gbps_median", "gbps_best", "peak_gbps",
      "peak_pct", "gflops", "command",
      "launches_per_rep", "quant_median_us", "time_with_quant_median_us", "datasheet_gbps", "datasheet_pct",
      "rotation_bytes", "gpu_name", "gpu_sm_count", "gpu_driver", "gpu_sm_clock_mhz", "gpu_mem_clock_mhz",
      "gpu_bus_bits", "gpu_l2_bytes", "act_quant", "act_quant_median_us", "prepare_us", "prepared_bytes", "n"};
  std::vector<BenchRow> rows;
  require_input_file(path);
  csv_columns::read(path, "bench", kNames, 27, [&](const Fields& f) {
    if (ctx && rows.empty())
      *ctx = {f["machine"], f["cpu_model"], f["gpu"], f["compiler"], f["git_commit"], f["command"]};
    BenchRow r;
    r.kernel = std::string(current_kernel_name(f["kernel"]));  // a row from before a rename: its name now
    r.op = f["op"];
    r.weight_type = f["weight_type"];
    r.act_format = f["act_format"];
    r.backend = f["backend"];
    r.rows = f.number<std::int64_t>("rows");
    r.cols = f.number<std::int64_t>("cols");
    r.threads = f.number<int>("threads");
    r.cache = f["cache"];
    r.tile_rows = f.number<std::int64_t>("tile_rows");
    r.min_parallel_rows = f.number<std::int64_t>("min_parallel_rows");
    r.repetitions = f.number<int>("repetitions");
    r.time_min_us = f.number<double>("time_min_us");
    r.time_median_us = f.number<double>("time_median_us");
    r.time_max_us = f.number<double>("time_max_us");
    r.bytes_per_call = f.number<std::int64_t>("bytes_per_call");
    r.gbps_median = f.number<double>("gbps_median");
    r.gbps_best = f.number<double>("gbps_best");
    r.peak_gbps = f.number<double>("peak_gbps");
    r.peak_pct = f.number<double>("peak_pct");
    r.gflops = f.number<double>("gflops");
    r.launches_per_rep = f.number<std::int64_t>("launches_per_rep");
    r.quant_median_us = f.number<double>("quant_median_us");
    r.time_with_quant_median_us = f.number<double>("time_with_quant_median_us");
    r.datasheet_gbps = f.number<double>("datasheet_gbps");
    r.datasheet_pct = f.number<double>("datasheet_pct");
    r.rotation_bytes = f.number<std::int64_t>("rotation_bytes");
    r.gpu_name = f["gpu_name"];
    r.gpu_sm_count = f.number<int>("gpu_sm_count");
    r.gpu_driver = f["gpu_driver"];
    r.gpu_sm_clock_mhz = f.number<int>("gpu_sm_clock_mhz");
    r.gpu_mem_clock_mhz = f.number<int>("gpu_mem_clock_mhz");
    r.gpu_bus_bits = f.number<int>("gpu_bus_bits");
    r.gpu_l2_bytes = f.number<std::int64_t>("gpu_l2_bytes");
    r.act_quant = f["act_quant"];
    r.act_quant_median_us = f.number<double>("act_quant_median_us");
    r.prepare_us = f.number<double>("prepare_us");
    r.prepared_bytes = f.number<std::int64_t>("prepared_bytes");
    r.n = f.number_or<int>("n", 1);
    rows.push_back(std::move(r));
  });
  return rows;
}

std::vector<CheckRow> read_check_csv(const std::string& path) {
  static constexpr std::array<const char*, 19> kNames = {
      "kernel", "weight_type", "act_format", "backend", "rows", "cols", "threads", "activation", "seed",
      "nmse_kernel", "max_abs_kernel", "max_rel_kernel", "nmse_e2e", "max_abs_e2e", "tol_nmse_kernel",
      "tol_max_rel_kernel", "tol_nmse_e2e", "passed", "failure"};
  std::vector<CheckRow> rows;
  require_input_file(path);
  csv_columns::read(path, "check", kNames, kNames.size(), [&](const Fields& f) {
    CheckRow r;
    r.kernel = std::string(current_kernel_name(f["kernel"]));  // a row from before a rename: its name now
    r.weight_type = f["weight_type"];
    r.act_format = f["act_format"];
    r.backend = f["backend"];
    r.rows = f.number<std::int64_t>("rows");
    r.cols = f.number<std::int64_t>("cols");
    r.threads = f.number<int>("threads");
    r.activation = f["activation"];
    r.seed = f.number<std::uint64_t>("seed");
    // The check writes an error as inf where the output held NaN or inf, or the kernel
    // did not run to the end (compare() in check.h).
    const auto error = [&](std::string_view column) {
      return f[column] == "inf" ? std::numeric_limits<double>::infinity() : f.number<double>(column);
    };
    r.nmse_kernel = error("nmse_kernel");
    r.max_abs_kernel = error("max_abs_kernel");
    r.max_rel_kernel = error("max_rel_kernel");
    r.nmse_e2e = error("nmse_e2e");
    r.max_abs_e2e = error("max_abs_e2e");
    r.tol_nmse_kernel = f.number<double>("tol_nmse_kernel");
    r.tol_max_rel_kernel = f.number<double>("tol_max_rel_kernel");
    r.tol_nmse_e2e = f.number<double>("tol_nmse_e2e");
    r.passed = f.number<int>("passed") != 0;
    r.failure = f["failure"];
    rows.push_back(std::move(r));
  });
  return rows;
}

bool widen_csv_header(const std::string& path, const std::vector<std::string>& header,
                      const std::vector<std::vector<std::string>>& older) {
  constexpr std::size_t kMaxColumns = 64;
  if (header.size() > kMaxColumns) throw std::logic_error("widen_csv_header: more columns than it reads");
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path) || std::filesystem::file_size(path, ec) == 0) return false;
  const std::string first = header_line_of(path);
  if (first == join(header)) return false;
  const auto was = std::find_if(older.begin(), older.end(), [&](const auto& h) { return first == join(h); });
  if (was == older.end()) return false;
  for (const std::string& column : *was)
    if (std::find(header.begin(), header.end(), column) == header.end())
      throw std::logic_error(fmt::format("widen_csv_header: older column '{}' is not in the header", column));

  // Columns past the header's own take names no file has, so they read empty.
  std::vector<std::string> padding;
  for (std::size_t i = header.size(); i < kMaxColumns; ++i) padding.push_back(fmt::format("\x01unused{}", i));
  std::array<const char*, kMaxColumns> names{};
  for (std::size_t i = 0; i < kMaxColumns; ++i)
    names[i] = i < header.size() ? header[i].c_str() : padding[i - header.size()].c_str();
  std::vector<std::vector<std::string>> rows;
  csv_columns::read(path, "results", names, 0, [&](const csv_columns::Fields& f) {
    rows.emplace_back(f.fields, f.fields + header.size());
  });

  const std::string widened = path + ".widening";
  {
    std::ofstream out(widened, std::ios::trunc);
    out << join(header) << '\n';
    for (const auto& r : rows) out << join(r) << '\n';
    if (!out.flush()) throw std::runtime_error(fmt::format("{}: cannot write", widened));
  }
  std::filesystem::rename(widened, path, ec);
  if (ec) throw std::runtime_error(fmt::format("{}: cannot replace it with its widened copy: {}", path, ec.message()));
  return true;
}

std::vector<PeakRow> read_peak_csv(const std::string& path) {
  // The CPU columns, then the optional ones: the GPU's (as kGpuPeakColumns), read_loop,
  // huge_page_pct.
  static constexpr std::array<const char*, 9> kNames = {"threads",        "buffer_bytes", "repetitions",
                                                        "gbps_best",      "gbps_median",  "device",
                                                        "datasheet_gbps", "read_loop",    "huge_page_pct"};
  std::vector<PeakRow> rows;
  require_input_file(path);
  csv_columns::read(path, "peak", kNames, 5, [&](const Fields& f) {
    PeakRow r;
    r.threads = f.number<int>("threads");
    r.buffer_bytes = f.number<std::int64_t>("buffer_bytes");
    r.repetitions = f.number<int>("repetitions");
    r.gbps_best = f.number<double>("gbps_best");
    r.gbps_median = f.number<double>("gbps_median");
    if (!f["device"].empty()) r.device = f["device"];
    r.datasheet_gbps = f.number<double>("datasheet_gbps");
    r.read_loop = f["read_loop"];
    if (!f["huge_page_pct"].empty()) r.huge_page_pct = f.number<double>("huge_page_pct");
    rows.push_back(std::move(r));
  });
  return rows;
}

std::vector<KernelSpeed> kernel_speeds(const std::vector<BenchRow>& rows) {
  std::vector<KernelSpeed> out;
  out.reserve(rows.size());
  for (const BenchRow& r : rows)
    out.push_back({r.kernel, r.weight_type, r.rows, r.cols, r.threads, r.gbps_median, r.time_median_us, "bench CSV", r.n});
  return out;
}

}  // namespace qmv
