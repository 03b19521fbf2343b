#include "harness/csv.h"

#include <fmt/format.h>

#include "harness/fccp.h"

#include <algorithm>
#include <array>
#include <filesystem>
#include <stdexcept>
#include <type_traits>

#include "harness/machine.h"

namespace qmv {

RunContext current_context(const std::string& command) {
  const MachineInfo& m = machine_info();
  return {m.machine, m.cpu_model, m.gpu, m.compiler, m.git_commit, command};
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
    : path_(path), columns_(header.size()) {
  const std::filesystem::path p(path);
  std::error_code ec;
  if (p.has_parent_path()) std::filesystem::create_directories(p.parent_path(), ec);
  if (ec) throw std::runtime_error(fmt::format("{}: cannot create directory: {}", path, ec.message()));
  const bool exists = std::filesystem::exists(p) && std::filesystem::file_size(p, ec) > 0;
  if (append && exists) {
    std::ifstream in(path);
    std::string first;
    std::getline(in, first);
    if (first != join(header))
      throw std::runtime_error(fmt::format(
          "{}: cannot append, its header differs from this command's columns", path));
    out_.open(path, std::ios::app);
  } else {
    out_.open(path, std::ios::trunc);
  }
  if (!out_) throw std::runtime_error(fmt::format("{}: cannot open for writing", path));
  if (!(append && exists)) out_ << join(header) << '\n' << std::flush;
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

// A number from an optional column: empty reads as 0; anything else must parse whole.
template <class T>
T optional_number(const std::string& text, const std::string& path, const char* column) {
  if (text.empty()) return T{};
  try {
    std::size_t used = 0;
    T v{};
    if constexpr (std::is_floating_point_v<T>)
      v = static_cast<T>(std::stod(text, &used));
    else
      v = static_cast<T>(std::stoll(text, &used));
    if (used == text.size()) return v;
  } catch (const std::exception&) {
  }
  throw std::runtime_error(fmt::format("{}: column {}: '{}' is not a number", path, column, text));
}

}  // namespace

std::vector<std::string> bench_header(bool gpu_columns) {
  std::vector<std::string> h = with_context(
      kContextColumns, {"kernel", "op", "weight_type", "act_format", "backend", "rows", "cols", "threads", "cache",
                        "tile_rows", "min_parallel_rows", "repetitions", "time_min_us", "time_median_us",
                        "time_max_us", "bytes_per_call", "gbps_median", "gbps_best", "peak_gbps", "peak_pct",
                        "gflops", "command"});
  return gpu_columns ? before_command(std::move(h), kGpuBenchColumns) : h;
}

std::vector<std::string> bench_fields(const RunContext& ctx, const BenchRow& r, bool gpu_columns) {
  std::vector<std::string> f = with_context(
      context_fields(ctx),
      {r.kernel, r.op, r.weight_type, r.act_format, r.backend, std::to_string(r.rows), std::to_string(r.cols),
       std::to_string(r.threads), r.cache, std::to_string(r.tile_rows), std::to_string(r.min_parallel_rows),
       std::to_string(r.repetitions), num(r.time_min_us), num(r.time_median_us), num(r.time_max_us),
       std::to_string(r.bytes_per_call), num(r.gbps_median), num(r.gbps_best), num(r.peak_gbps), num(r.peak_pct),
       num(r.gflops), ctx.command});
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
  std::vector<std::string> h =
      with_context(kContextColumns, {"threads", "buffer_bytes", "repetitions", "gbps_best", "gbps_median", "command"});
  return gpu_columns ? before_command(std::move(h), kGpuPeakColumns) : h;
}

std::vector<std::string> sweep_header() {
  std::vector<std::string> h = bench_header();
  for (const char* c : {"experiment", "model_op", "status", "reason", "check_passed", "nmse_kernel",
                        "nmse_e2e_gaussian", "nmse_e2e_outliers"})
    h.push_back(c);
  return h;
}

std::vector<std::string> peak_fields(const RunContext& ctx, const PeakRow& r, bool gpu_columns) {
  std::vector<std::string> f = with_context(
      context_fields(ctx), {std::to_string(r.threads), std::to_string(r.buffer_bytes), std::to_string(r.repetitions),
                            num(r.gbps_best), num(r.gbps_median), ctx.command});
  if (!gpu_columns) return f;
  return before_command(std::move(f), {r.device, r.datasheet_gbps > 0 ? num(r.datasheet_gbps) : std::string()});
}

namespace {

template <class Fn>
auto guarded(const std::string& path, Fn fn) {
  if (!std::filesystem::is_regular_file(path))
    throw std::runtime_error(fmt::format("{}: no such file", path));
  try {
    return fn();
  } catch (const io::error::base& e) {
    throw std::runtime_error(fmt::format("{}: {}", path, e.what()));
  }
}

// Whether the file's header holds all of `columns` (our column names need no quoting).
bool has_columns(const std::string& path, const std::vector<std::string>& columns) {
  std::ifstream in(path);
  std::string first;
  std::getline(in, first);
  std::vector<std::string> names;
  for (std::size_t start = 0; start <= first.size();) {
    const std::size_t end = std::min(first.find(',', start), first.size());
    names.push_back(first.substr(start, end - start));
    start = end + 1;
  }
  for (const auto& c : columns)
    if (std::find(names.begin(), names.end(), c) == names.end()) return false;
  return true;
}

// The CUDA columns, where the file has them, into rows read in file order.
void read_gpu_bench_columns(const std::string& path, std::vector<BenchRow>& rows) {
  if (!has_columns(path, kGpuBenchColumns)) return;
  io::CSVReader<13, io::trim_chars<' ', '\t'>, io::double_quote_escape<',', '"'>> in(path);
  in.read_header(io::ignore_extra_column, "launches_per_rep", "quant_median_us", "time_with_quant_median_us",
                 "datasheet_gbps", "datasheet_pct", "rotation_bytes", "gpu_name", "gpu_sm_count", "gpu_driver",
                 "gpu_sm_clock_mhz", "gpu_mem_clock_mhz", "gpu_bus_bits", "gpu_l2_bytes");
  std::array<std::string, 13> f;
  for (BenchRow& r : rows) {
    if (!in.read_row(f[0], f[1], f[2], f[3], f[4], f[5], f[6], f[7], f[8], f[9], f[10], f[11], f[12])) break;
    r.launches_per_rep = optional_number<std::int64_t>(f[0], path, "launches_per_rep");
    r.quant_median_us = optional_number<double>(f[1], path, "quant_median_us");
    r.time_with_quant_median_us = optional_number<double>(f[2], path, "time_with_quant_median_us");
    r.datasheet_gbps = optional_number<double>(f[3], path, "datasheet_gbps");
    r.datasheet_pct = optional_number<double>(f[4], path, "datasheet_pct");
    r.rotation_bytes = optional_number<std::int64_t>(f[5], path, "rotation_bytes");
    r.gpu_name = f[6];
    r.gpu_sm_count = optional_number<int>(f[7], path, "gpu_sm_count");
    r.gpu_driver = f[8];
    r.gpu_sm_clock_mhz = optional_number<int>(f[9], path, "gpu_sm_clock_mhz");
    r.gpu_mem_clock_mhz = optional_number<int>(f[10], path, "gpu_mem_clock_mhz");
    r.gpu_bus_bits = optional_number<int>(f[11], path, "gpu_bus_bits");
    r.gpu_l2_bytes = optional_number<std::int64_t>(f[12], path, "gpu_l2_bytes");
  }
}

}  // namespace

CsvKind detect_csv_kind(const std::string& path) {
  return guarded(path, [&] {
    std::ifstream in(path);
    std::string first;
    if (!std::getline(in, first)) throw std::runtime_error(fmt::format("{}: empty file", path));
    if (first == join(bench_header(false)) || first == join(bench_header(true))) return CsvKind::Bench;
    if (first == join(check_header())) return CsvKind::Check;
    if (first == join(peak_header(false)) || first == join(peak_header(true))) return CsvKind::Peak;
    if (first == join(sweep_header())) return CsvKind::Sweep;
    return CsvKind::Unknown;
  });
}

std::vector<BenchRow> read_bench_csv(const std::string& path, RunContext* ctx) {
  return guarded(path, [&] {
    io::CSVReader<27, io::trim_chars<' ', '\t'>, io::double_quote_escape<',', '"'>> in(path);
    in.read_header(io::ignore_extra_column, "machine", "cpu_model", "gpu", "compiler",
                   "git_commit", "kernel", "op", "weight_type", "act_format", "backend", "rows",
                   "cols", "threads", "cache", "tile_rows", "min_parallel_rows", "repetitions", "time_min_us", "time_median_us",
                   "time_max_us", "bytes_per_call", "gbps_median", "gbps_best", "peak_gbps",
                   "peak_pct", "gflops", "command");
    std::vector<BenchRow> rows;
    RunContext c;
    BenchRow r;
    while (in.read_row(c.machine, c.cpu_model, c.gpu, c.compiler, c.git_commit, r.kernel, r.op,
                       r.weight_type, r.act_format, r.backend, r.rows, r.cols, r.threads, r.cache,
                       r.tile_rows, r.min_parallel_rows, r.repetitions, r.time_min_us, r.time_median_us, r.time_max_us,
                       r.bytes_per_call, r.gbps_median, r.gbps_best, r.peak_gbps, r.peak_pct,
                       r.gflops, c.command)) {
      if (ctx && rows.empty()) *ctx = c;
      rows.push_back(r);
    }
    read_gpu_bench_columns(path, rows);
    return rows;
  });
}

std::vector<CheckRow> read_check_csv(const std::string& path) {
  return guarded(path, [&] {
    io::CSVReader<19, io::trim_chars<' ', '\t'>, io::double_quote_escape<',', '"'>> in(path);
    in.read_header(io::ignore_extra_column, "kernel", "weight_type", "act_format", "backend",
                   "rows", "cols", "threads", "activation", "seed", "nmse_kernel",
                   "max_abs_kernel", "max_rel_kernel", "nmse_e2e", "max_abs_e2e",
                   "tol_nmse_kernel", "tol_max_rel_kernel", "tol_nmse_e2e", "passed", "failure");
    std::vector<CheckRow> rows;
    CheckRow r;
    int passed = 0;
    while (in.read_row(r.kernel, r.weight_type, r.act_format, r.backend, r.rows, r.cols, r.threads,
                       r.activation, r.seed, r.nmse_kernel, r.max_abs_kernel, r.max_rel_kernel,
                       r.nmse_e2e, r.max_abs_e2e, r.tol_nmse_kernel, r.tol_max_rel_kernel,
                       r.tol_nmse_e2e, passed, r.failure)) {
      r.passed = passed != 0;
      rows.push_back(r);
    }
    return rows;
  });
}

std::vector<PeakRow> read_peak_csv(const std::string& path) {
  return guarded(path, [&] {
    io::CSVReader<5, io::trim_chars<' ', '\t'>, io::double_quote_escape<',', '"'>> in(path);
    in.read_header(io::ignore_extra_column, "threads", "buffer_bytes", "repetitions", "gbps_best",
                   "gbps_median");
    std::vector<PeakRow> rows;
    PeakRow r;
    while (in.read_row(r.threads, r.buffer_bytes, r.repetitions, r.gbps_best, r.gbps_median))
      rows.push_back(r);
    if (!has_columns(path, kGpuPeakColumns)) return rows;
    io::CSVReader<2, io::trim_chars<' ', '\t'>, io::double_quote_escape<',', '"'>> gpu(path);
    gpu.read_header(io::ignore_extra_column, "device", "datasheet_gbps");
    std::string device, datasheet;
    for (PeakRow& row : rows) {
      if (!gpu.read_row(device, datasheet)) break;
      row.device = device.empty() ? "cpu" : device;
      row.datasheet_gbps = optional_number<double>(datasheet, path, "datasheet_gbps");
    }
    return rows;
  });
}

std::vector<KernelSpeed> kernel_speeds(const std::vector<BenchRow>& rows) {
  std::vector<KernelSpeed> out;
  out.reserve(rows.size());
  for (const BenchRow& r : rows) out.push_back({r.kernel, r.weight_type, r.rows, r.cols, r.threads, r.gbps_median});
  return out;
}

}  // namespace qmv
