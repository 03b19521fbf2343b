#include "harness/cli/cli.h"

#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <map>
#include <cstdio>
#include <random>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "harness/bench.h"
#include "harness/check.h"
#include "harness/cli/accuracy.h"
#include "harness/cli/compare.h"
#include "harness/cli/decode.h"
#include "harness/cli/gate.h"
#include "harness/cli/make_model.h"
#include "harness/cli/sweep.h"
#include "harness/cli/tune.h"
#include "harness/csv.h"
#include "harness/machine.h"
#include "harness/peak.h"
#include "harness/shapes.h"
#include "harness/table.h"
#include "kernels/availability.h"
#include "kernels/cpu_features.h"
#include "kernels/cpu_tiling.h"
#include "kernels/registry.h"
#include "model/config.h"
#include "model/gguf.h"
#include "model/plan.h"
#include "model/tokenizer.h"

namespace qmv {
namespace {

// Bad input from the user: printed as one line, exit code 2.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

std::string command_line(int argc, char** argv) {
  std::string s;
  for (int i = 0; i < argc; ++i) {
    if (i) s += ' ';
    const std::string arg = argv[i];
    s += arg.find_first_of(" *?,'\"") == std::string::npos ? arg : "'" + arg + "'";
  }
  return s;
}

std::vector<const KernelSpec*> select_kernels(const std::string& globs) {
  const auto selected = global_registry().select(globs);
  if (!selected.empty()) return selected;
  const bool has_wildcard = globs.find_first_of("*?[") != std::string::npos;
  std::string known;
  for (const auto& k : global_registry().all()) known += (known.empty() ? "" : ", ") + k.name;
  if (!has_wildcard && globs.find(',') == std::string::npos)
    throw UsageError(fmt::format("unknown kernel '{}' (known: {})", globs, known));
  throw UsageError(fmt::format("no kernel matches '{}' (known: {})", globs, known));
}

std::vector<Shape> shapes_or_throw(const std::string& spec) {
  try {
    return parse_shapes(spec);
  } catch (const std::invalid_argument& e) {
    throw UsageError(e.what());
  }
}

// A shape no selected kernel can take is a mistake worth stopping for; a shape some
// kernels skip (an f32-only shape rule, say) is not.
void require_supported(const std::vector<const KernelSpec*>& kernels, const std::vector<Shape>& shapes) {
  for (Shape s : shapes) {
    const bool any = std::any_of(kernels.begin(), kernels.end(),
                                 [&](const KernelSpec* k) { return k->supports(s); });
    if (!any)
      throw UsageError(fmt::format("shape {} is not supported by any selected kernel ({} needs {})",
                                   to_string(s), kernels.front()->name, kernels.front()->shape_rule));
  }
}

std::vector<int> parse_threads(const std::string& spec) {
  if (spec == "all") return {machine_info().cores};
  std::vector<int> out;
  std::size_t start = 0;
  while (start <= spec.size()) {
    std::size_t end = spec.find(',', start);
    if (end == std::string::npos) end = spec.size();
    const std::string tok = spec.substr(start, end - start);
    start = end + 1;
    if (tok == "all") {
      out.push_back(machine_info().cores);
      continue;
    }
    std::size_t used = 0;
    int t = 0;
    try {
      t = std::stoi(tok, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != tok.size() || t < 1 || t > 4096)
      throw UsageError(fmt::format("bad thread count '{}': expected positive integers or 'all', "
                                   "e.g. --threads 1,2",
                                   tok));
    if (std::find(out.begin(), out.end(), t) == out.end()) out.push_back(t);
  }
  return out;
}

std::string sci(double v) { return fmt::format("{:.2e}", v); }

void print_bench_table(std::vector<BenchRow> rows) {
  std::sort(rows.begin(), rows.end(), [](const BenchRow& a, const BenchRow& b) {
    return std::tie(a.kernel, a.rows, a.cols, a.threads) < std::tie(b.kernel, b.rows, b.cols, b.threads);
  });
  std::vector<std::vector<std::string>> t;
  for (const auto& r : rows)
    t.push_back({r.kernel, fmt::format("{}x{}", r.rows, r.cols), std::to_string(r.threads), r.cache,
                 fmt::format("{:.1f}", r.time_median_us),
                 fmt::format("{:.1f}..{:.1f}", r.time_min_us, r.time_max_us),
                 fmt::format("{:.2f}", r.gbps_median), fmt::format("{:.1f}%", r.peak_pct),
                 fmt::format("{:.2f}", r.peak_gbps), fmt::format("{:.2f}", r.gflops)});
  print_table({"kernel", "shape", "threads", "cache", "median us", "min..max us", "GB/s",
               "% of peak", "peak GB/s", "GFLOP/s"},
              t);
}

void print_check_table(const std::vector<CheckRow>& rows) {
  std::vector<std::vector<std::string>> t;
  for (const auto& r : rows)
    t.push_back({r.kernel, fmt::format("{}x{}", r.rows, r.cols), r.activation, sci(r.nmse_kernel),
                 sci(r.max_rel_kernel), sci(r.nmse_e2e), sci(r.max_abs_e2e),
                 r.passed ? "pass" : "FAIL: " + r.failure});
  print_table({"kernel", "shape", "activation", "NMSE kernel", "worst row kernel", "NMSE end-to-end",
               "max abs e2e", "result"},
              t);
}

void print_peak_table(const std::vector<PeakRow>& rows) {
  std::vector<std::vector<std::string>> t;
  for (const auto& r : rows) {
    const bool gpu = r.device != "cpu";
    const std::string measure = r.device == "cuda-read" ? "streaming read"
                                : gpu                    ? "device-to-device copy"
                                    : fmt::format("read, {} thread{}", r.threads, r.threads == 1 ? "" : "s");
    t.push_back({gpu ? r.device : "cpu", measure,
                 fmt::format("{:.2f}", r.gbps_best), fmt::format("{:.2f}", r.gbps_median),
                 r.datasheet_gbps > 0 ? fmt::format("{:.2f}", r.datasheet_gbps) : "-",
                 fmt::format("{:.0f}", static_cast<double>(r.buffer_bytes) / (1 << 20)), std::to_string(r.repetitions)});
  }
  print_table({"device", "measure", "GB/s (best)", "GB/s (median)", "datasheet GB/s", "buffer MiB", "reps"}, t);
}

std::vector<CheckRow> to_rows(const CheckResult& r, const CheckConfig& cfg) {
  const Tolerance tol = tolerance_for(r.spec->act);
  CheckRow base;
  base.kernel = r.spec->name;
  base.weight_type = std::string(to_string(r.spec->weight));
  base.act_format = std::string(to_string(r.spec->act));
  base.backend = std::string(to_string(r.spec->backend));
  base.rows = r.shape.rows;
  base.cols = r.shape.cols;
  base.threads = cfg.threads;
  base.seed = cfg.seed;
  base.tol_nmse_kernel = tol.kernel_nmse;
  base.tol_max_rel_kernel = tol.kernel_max_rel;
  std::vector<CheckRow> out;
  for (const auto& c : r.cases) {
    CheckRow row = base;
    row.tol_nmse_e2e = c.activation == "gaussian" ? tol.end_to_end_nmse_gaussian : tol.end_to_end_nmse_outliers;
    row.activation = c.activation;
    row.nmse_kernel = c.kernel.nmse;
    row.max_abs_kernel = c.kernel.max_abs;
    row.max_rel_kernel = c.kernel.max_rel;
    row.nmse_e2e = c.end_to_end.nmse;
    row.max_abs_e2e = c.end_to_end.max_abs;
    row.passed = c.passed;
    row.failure = c.failure;
    out.push_back(row);
  }
  return out;
}

// The GPU's copy bandwidth next to its datasheet figure, as `qmvlab peak` prints it.
std::string describe_gpu_peak(const GpuPeakResult& p) {
  return fmt::format("GPU peak ({}): device-to-device copy {:.1f} GB/s (read + write; best of {}, median {:.1f}), "
                     "{:.1f}% of the datasheet {:.1f} GB/s",
                     machine_info().gpu, p.best_gbps, p.repetitions, p.median_gbps,
                     p.datasheet_gbps > 0 ? 100 * p.best_gbps / p.datasheet_gbps : 0.0, p.datasheet_gbps);
}

// CPU read peaks per thread count; with `gpu`, also the GPU's copy peak where there is
// a device (printed, and a CSV row of device "cuda").
std::map<int, double> measure_peaks(const std::vector<int>& threads, int reps, const RunContext* ctx,
                                    const std::string& out, bool append, bool gpu = false,
                                    std::string* gpu_not_measured = nullptr) {
  const bool gpu_columns = gpu && machine_info().gpu != "none";
  std::unique_ptr<CsvWriter> csv;
  if (!out.empty()) csv = std::make_unique<CsvWriter>(expand_machine(out), peak_header(gpu_columns), append);
  std::map<int, double> peaks;
  std::vector<PeakRow> rows;
  for (int t : threads) {
    const PeakResult p = measure_read_bandwidth(t, reps);
    PeakRow row{t, static_cast<std::int64_t>(p.bytes), p.repetitions, p.best_gbps, p.median_gbps};
    fmt::print("peak read bandwidth, {} thread{}: {:.2f} GB/s (best of {}, median {:.2f})\n", t,
               t == 1 ? "" : "s", p.best_gbps, p.repetitions, p.median_gbps);
    std::fflush(stdout);
    if (csv) csv->write(peak_fields(*ctx, row, gpu_columns));
    peaks[t] = p.best_gbps;
  }
  if (gpu) {
    const GpuPeakResult g = measure_gpu_peaks(reps);
    if (!g.measured) {
      fmt::print("GPU peak: not measured: {}\n", g.why_not);
      if (gpu_not_measured) *gpu_not_measured = g.why_not;
    } else {
      fmt::print("{}\n", describe_gpu_peak(g));
      PeakRow row{0, static_cast<std::int64_t>(g.bytes), g.repetitions, g.best_gbps, g.median_gbps, "cuda",
                  g.datasheet_gbps};
      if (csv) csv->write(peak_fields(*ctx, row, gpu_columns));
      if (g.read_measured) {
        fmt::print("GPU read peak ({}): {:.1f} GB/s (best of {}, median {:.1f}), {:.1f}% of the datasheet; "
                   "fastest loop: {}\n",
                   machine_info().gpu, g.read_best_gbps, g.repetitions, g.read_median_gbps,
                   g.datasheet_gbps > 0 ? 100 * g.read_best_gbps / g.datasheet_gbps : 0.0, g.read_loop);
        PeakRow read{0, static_cast<std::int64_t>(g.read_bytes), g.repetitions, g.read_best_gbps, g.read_median_gbps,
                     "cuda-read", g.datasheet_gbps};
        if (csv) csv->write(peak_fields(*ctx, read, gpu_columns));
      } else {
        fmt::print("GPU read peak: {}\n", g.read_loop);
      }
    }
    std::fflush(stdout);
  }
  return peaks;
}

std::string describe_value(const gguf::File& f, const gguf::Value& v, std::size_t max_elems) {
  using gguf::ValueType;
  switch (v.type) {
    case ValueType::STRING: {
      std::string s(v.str.substr(0, 200));
      return fmt::format("\"{}\"{}", s, v.str.size() > 200 ? "..." : "");
    }
    case ValueType::FLOAT32: case ValueType::FLOAT64: return fmt::format("{}", v.f);
    case ValueType::BOOL: return v.u ? "true" : "false";
    case ValueType::INT8: case ValueType::INT16: case ValueType::INT32: case ValueType::INT64:
      return std::to_string(v.i);
    case ValueType::ARRAY: {
      std::string out = fmt::format("{}[{}] [", gguf::to_string(v.elem_type), v.count);
      for (std::uint64_t k = 0; k < std::min<std::uint64_t>(v.count, max_elems); ++k) {
        if (k) out += ", ";
        out += v.elem_type == ValueType::STRING ? fmt::format("\"{}\"", f.array_string(v, k))
                                                : fmt::format("{}", f.array_number(v, k));
      }
      return out + (v.count > max_elems ? ", ...]" : "]");
    }
    default: return std::to_string(v.u);
  }
}

void print_gguf(const std::string& path, bool show_tensors, std::size_t max_elems) {
  const gguf::File f = gguf::File::open(path);
  fmt::print("{}: GGUF v{}, {} bytes, {} metadata keys, {} tensors, alignment {}, data at byte {}\n\n",
             path, f.version(), f.size(), f.keys().size(), f.tensors().size(), f.alignment(), f.data_offset());
  for (const auto& key : f.keys()) {
    const gguf::Value& v = *f.find(key);
    fmt::print("  {} ({}) = {}\n", key, gguf::to_string(v.type), describe_value(f, v, max_elems));
  }
  try {
    const ModelConfig c = read_config(f);
    bind_weights(f, c);
    fmt::print("\nmodel: {} '{}', {} layers, width {}, FFN {}, {} heads ({} key/value) of {}, vocab {}, "
               "context {}, rope base {}{}{}{}\n",
               c.arch, c.name, c.n_layers, c.n_embd, c.n_ff, c.n_head, c.n_head_kv, c.head_dim, c.vocab_size,
               c.context_length, c.rope_freq_base, c.tied_embeddings ? ", tied embeddings" : "",
               c.qkv_bias ? ", QKV bias" : "", c.qk_norm ? ", Q/K norm" : "");
  } catch (const ModelError& e) {
    fmt::print("\nnot a model this runner can run: {}\n", e.what());
  }
  std::map<std::string, std::pair<int, std::uint64_t>> by_type;
  for (const auto& t : f.tensors()) {
    auto& e = by_type[t.type->name];
    ++e.first;
    e.second += t.bytes;
  }
  fmt::print("\n");
  std::vector<std::vector<std::string>> rows;
  for (const auto& [type, e] : by_type)
    rows.push_back({type, std::to_string(e.first), fmt::format("{:.1f}", e.second / 1048576.0)});
  print_table({"tensor type", "tensors", "MiB"}, rows);
  if (show_tensors) {
    rows.clear();
    for (const auto& t : f.tensors()) {
      std::string dims;
      for (auto d : t.dims) dims += (dims.empty() ? "" : "x") + std::to_string(d);
      rows.push_back({t.name, t.type->name, dims, fmt::format("{:.2f}", t.bytes / 1048576.0)});
    }
    fmt::print("\n");
    print_table({"tensor", "type", "dims (row length first)", "MiB"}, rows);
  }
}

}  // namespace

int run_cli(int argc, char** argv) {
  CLI::App app{
      "qmvlab: which quantized GEMV kernel is fastest and accurate enough, on this machine.\n"
      "Kernels are GGUF K-quant matvec plugins; every subcommand reads the registry."};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("qmvlab ") + machine_info().git_commit);
  const std::string cmd = command_line(argc, argv);

  // list
  auto* list = app.add_subcommand("list", "List registered kernels, their requirements and availability here");
  std::string list_kernels = "*";
  list->add_option("--kernels", list_kernels, "Comma-separated globs of kernel names")->capture_default_str();

  CpuTiling tiling = cpu_tiling();
  auto add_tiling_options = [&tiling](CLI::App* sub) {
    sub->add_option("--tile-rows", tiling.tile_rows, "CPU kernels: rows per OpenMP work item")
        ->check(CLI::Range(1, 1 << 20))->capture_default_str();
    sub->add_option("--min-parallel-rows", tiling.min_parallel_rows,
                    "CPU kernels: calls with fewer rows run on one thread")
        ->check(CLI::Range(0, 1 << 30))->capture_default_str();
  };
  // check
  auto* check = app.add_subcommand(
      "check", "Check kernels against an Eigen double-precision reference (random weights, Gaussian "
               "and outlier activations, outputs poisoned with NaN)");
  std::string check_kernels = "*", check_shapes = "default", check_out;
  int check_threads = machine_info().cores;
  std::uint64_t check_seed = 0;
  bool check_append = false;
  check->add_option("--kernels", check_kernels, "Comma-separated globs of kernel names")->capture_default_str();
  check->add_option("--shapes", check_shapes, "ROWSxCOLS list or preset (see `qmvlab list --shapes`)")
      ->capture_default_str();
  check->add_option("--threads", check_threads, "Threads for the kernels")->check(CLI::PositiveNumber)
      ->capture_default_str();
  check->add_option("--seed", check_seed, "Random seed (0: a fresh one, printed)");
  add_tiling_options(check);
  check->add_option("--out", check_out, "Write a CSV of results ({machine} expands to this machine's name)");
  check->add_flag("--append", check_append, "Append to --out instead of replacing it");

  // bench
  auto* bench = app.add_subcommand(
      "bench", "Time kernels, GB/s as a share of the measured peak (CPU: Google Benchmark, real time; CUDA: events "
               "around many launches, NVTX ranges named after the kernels, one host thread)");
  std::string bench_kernels = "*", bench_shapes = "llama-2-7b", bench_threads = "1,all", bench_out;
  BenchConfig bcfg;
  bool bench_append = false;
  int bench_peak_reps = 5;
  bench->add_option("--kernels", bench_kernels, "Comma-separated globs of kernel names")->capture_default_str();
  bench->add_option("--shapes", bench_shapes, "ROWSxCOLS list or preset")->capture_default_str();
  bench->add_option("--threads", bench_threads, "Thread counts, e.g. 1,2 or all")->capture_default_str();
  bench->add_flag("--warm", bcfg.warm,
                  "Reuse one weight copy (warm caches) instead of rotating copies past the LLC / GPU L2");
  bool no_interleave = false;
  bench->add_flag("--no-interleave", no_interleave,
                  "Run each point's repetitions back to back instead of interleaving all points");
  bench->add_option("--reps", bcfg.repetitions, "Repetitions per point (min/median/max over them)")
      ->check(CLI::Range(1, 1000))->capture_default_str();
  bench->add_option("--min-time", bcfg.min_time_s, "Minimum seconds per repetition")
      ->check(CLI::Range(0.001, 60.0))->capture_default_str();
  bench->add_option("--peak-reps", bench_peak_reps, "Repetitions of the peak bandwidth read")
      ->check(CLI::Range(1, 100))->capture_default_str();
  add_tiling_options(bench);
  bench->add_option("--out", bench_out, "Write a CSV of results ({machine} expands to this machine's name)");
  bench->add_flag("--append", bench_append, "Append to --out instead of replacing it");

  // peak
  auto* peak = app.add_subcommand(
      "peak", "Measure the machine's memory bandwidth: a STREAM-like read per thread count, and with a CUDA "
              "device a streaming read and a device-to-device copy next to the datasheet figure");
  std::string peak_threads = "1,all", peak_out, peak_device = "all";
  int peak_reps = 7;
  bool peak_append = false;
  peak->add_option("--threads", peak_threads, "Thread counts, e.g. 1,2 or all")->capture_default_str();
  peak->add_option("--reps", peak_reps, "Repetitions (the best is the peak)")->check(CLI::Range(1, 100))
      ->capture_default_str();
  peak->add_option("--out", peak_out, "Write a CSV ({machine} expands to this machine's name)");
  peak->add_flag("--append", peak_append, "Append to --out instead of replacing it");
  peak->add_option("--device", peak_device,
                   "cpu, cuda (the GPU alone: exits 1 when there is no device to measure) or all")
      ->check(CLI::IsMember({"cpu", "cuda", "all"}))
      ->capture_default_str();

  // gguf
  auto* gguf_cmd = app.add_subcommand("gguf", "Validate a GGUF file and print its metadata and tensors");
  std::string gguf_path;
  bool gguf_tensors = false;
  std::size_t gguf_max_elems = 8;
  gguf_cmd->add_option("file", gguf_path, "GGUF file")->required();
  gguf_cmd->add_flag("--tensors", gguf_tensors, "List every tensor (name, type, dims, size)");
  gguf_cmd->add_option("--max-array", gguf_max_elems, "Array elements to show per key")->capture_default_str();

  // plan
  auto* plan_cmd = app.add_subcommand(
      "plan", "Resolve a kernel plan against a model: which kernel drives each matvec, and why");
  std::string plan_model, plan_file, plan_rules, plan_bench;
  int plan_threads = machine_info().cores;
  plan_cmd->add_option("--model", plan_model, "GGUF model")->required();
  plan_cmd->add_option("--plan", plan_file,
                       "auto, a TOML plan file ([default] / [OP] tables of TYPE = \"KERNEL\") or OP.TYPE=KERNEL rules");
  plan_cmd->add_option("--rules", plan_rules, "Rules OP.TYPE=KERNEL,... (after --plan; * for any; KERNEL may be auto)");
  plan_cmd->add_option("--bench-csv", plan_bench, "Bench results for `auto` to pick the fastest kernel from");
  plan_cmd->add_option("--threads", plan_threads, "Threads the plan is for (matches bench rows)")
      ->check(CLI::PositiveNumber)->capture_default_str();
  std::string plan_route_k;
  auto* plan_route = plan_cmd->add_option("--route-outliers", plan_route_k,
                                          "Route int8-activation matvecs to their f32 siblings on vectors with "
                                          "max|x| > K rms (--route-outliers[=K]; K from the plan, else 8)")
                         ->expected(0, 1);

  // tokenize
  auto* tok_cmd = app.add_subcommand("tokenize", "Tokenize text with a model's tokenizer: ids, then the pieces");
  std::string tok_model, tok_text;
  bool tok_bos = false, tok_ids_only = false;
  tok_cmd->add_option("--model", tok_model, "GGUF model")->required();
  tok_cmd->add_option("text", tok_text, "Text to tokenize")->required();
  tok_cmd->add_flag("--bos", tok_bos, "Start with the BOS token");
  tok_cmd->add_flag("--ids", tok_ids_only, "Print only the ids, space separated");

  DecodeCommand decode_cmd(app);
  TuneCommand tune_cmd(app);
  GateCommand gate_cmd(app);
  AccuracyCommand accuracy_cmd(app);
  CompareCommand compare_cmd(app);
  SweepCommand sweep_cmd(app);

  // report
  auto* report = app.add_subcommand("report", "Print a results CSV (bench, check, peak or sweep) as a table");
  std::vector<std::string> report_files;
  report->add_option("files", report_files, "Results CSV files ({machine} expands to this machine's name)")
      ->required();

  MakeModelArgs make_model_args;
  auto* make_model_cmd = add_make_model_command(app, make_model_args);

  list->add_flag_callback("--machine", [] {
    fmt::print("{}\n", machine_info().machine);
    throw CLI::Success();
  }, "Print this machine's name (the results/<machine>/ folder) and exit");
  list->add_flag_callback("--shapes", [] {
    for (const auto& p : shape_presets()) {
      std::string s;
      for (const TaggedShape& x : p.shapes)
        s += (s.empty() ? "" : ",") + to_string(x.shape) + (x.ops.empty() ? "" : "[" + x.ops + "]");
      fmt::print("{}: {}\n    {}\n", p.name, p.description, s);
    }
    throw CLI::Success();
  }, "List the shape presets and exit");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  set_cpu_tiling(tiling);

  try {
    if (decode_cmd.chosen()) return decode_cmd.run(cmd);
    if (tune_cmd.chosen()) return tune_cmd.run();
    if (gate_cmd.chosen()) return gate_cmd.run();
    if (accuracy_cmd.chosen()) return accuracy_cmd.run(cmd);
    if (compare_cmd.chosen()) return compare_cmd.run();
    if (sweep_cmd.chosen()) return sweep_cmd.run(cmd);
    if (*list) {
      std::vector<std::vector<std::string>> rows;
      for (const KernelSpec* k : select_kernels(list_kernels)) {
        const Availability av = availability(*k);
        std::string needs = k->backend == Backend::CPU
                                ? cpu_feature_names(k->cpu_features)
                                : (k->min_sm ? fmt::format("sm_{}", k->min_sm) : std::string());
        rows.push_back({k->name, std::string(to_string(k->op)), std::string(to_string(k->weight)),
                        std::string(to_string(k->act)), std::string(to_string(k->backend)),
                        needs.empty() ? "-" : needs, av.available ? "yes" : "no: " + av.reason,
                        k->description});
      }
      const MachineInfo& m = machine_info();
      fmt::print("machine {} ({}, {} cores); {}\n\n", m.machine, m.cpu_model, m.cores, m.gpu_status);
      print_table({"kernel", "op", "weights", "activations", "backend", "needs", "available",
                   "description"},
                  rows);
      return 0;
    }

    if (*check) {
      const auto kernels = select_kernels(check_kernels);
      const auto shapes = shapes_or_throw(check_shapes);
      require_supported(kernels, shapes);
      CheckConfig cfg;
      cfg.threads = check_threads;
      cfg.seed = check_seed ? check_seed : std::random_device{}() | (std::uint64_t(std::random_device{}()) << 32);
      const RunContext ctx = current_context(cmd);
      std::unique_ptr<CsvWriter> csv;
      if (!check_out.empty())
        csv = std::make_unique<CsvWriter>(expand_machine(check_out), check_header(), check_append);
      fmt::print("checking {} kernel(s) on {} shape(s), {} thread(s), seed {} (rerun with --seed {})\n",
                 kernels.size(), shapes.size(), cfg.threads, cfg.seed, cfg.seed);
      std::fflush(stdout);
      int passed = 0, failed = 0, skipped = 0;
      std::vector<CheckRow> all;
      run_check(kernels, shapes, cfg, [&](const CheckResult& r) {
        if (!r.skipped.empty()) {
          ++skipped;
          fmt::print("SKIP {:<24} {:>11}  {}\n", r.spec->name, to_string(r.shape), r.skipped);
        } else {
          r.passed() ? ++passed : ++failed;
          std::string detail;
          for (const auto& c : r.cases)
            detail += fmt::format("  {}: kernel {:.1e} e2e {:.1e}{}", c.activation, c.kernel.nmse,
                                  c.end_to_end.nmse, c.passed ? "" : " <- " + c.failure);
          fmt::print("{} {:<24} {:>11}{}\n", r.passed() ? "PASS" : "FAIL", r.spec->name,
                     to_string(r.shape), detail);
          for (const auto& row : to_rows(r, cfg)) {
            if (csv) csv->write(check_fields(ctx, row));
            all.push_back(row);
          }
        }
        std::fflush(stdout);
      });
      if (csv) fmt::print("wrote {}\n", csv->path());
      fmt::print("check: {} passed, {} failed, {} skipped\n", passed, failed, skipped);
      // Asked only for CUDA kernels and none could run (no device, say): a run that
      // checked nothing must not pass as a run that checked everything.
      const bool only_cuda = std::all_of(kernels.begin(), kernels.end(),
                                         [](const KernelSpec* k) { return k->backend == Backend::CUDA; });
      if (only_cuda && passed + failed == 0) {
        fmt::print(stderr, "check: no CUDA kernel ran ({} skipped): nothing was checked\n", skipped);
        return 1;
      }
      return failed ? 1 : 0;
    }

    if (*bench) {
      const auto kernels = select_kernels(bench_kernels);
      const auto shapes = shapes_or_throw(bench_shapes);
      require_supported(kernels, shapes);
      bcfg.threads = parse_threads(bench_threads);
      bcfg.interleave = !no_interleave;
      const RunContext ctx = current_context(cmd);
      // Selecting a CUDA kernel adds the GPU columns (empty on CPU rows), whether or not
      // a device is here, so the file's columns follow from the command alone.
      const bool gpu_columns = std::any_of(kernels.begin(), kernels.end(),
                                           [](const KernelSpec* k) { return k->backend == Backend::CUDA; });
      std::unique_ptr<CsvWriter> csv;
      if (!bench_out.empty())
        csv = std::make_unique<CsvWriter>(expand_machine(bench_out), bench_header(gpu_columns), bench_append);
      // The CPU roofline, when CPU kernels are timed (the GPU's is measured by the bench).
      const bool any_cpu = std::any_of(kernels.begin(), kernels.end(),
                                       [](const KernelSpec* k) { return k->backend == Backend::CPU; });
      const auto peaks = any_cpu ? measure_peaks(bcfg.threads, bench_peak_reps, nullptr, "", false)
                                 : std::map<int, double>{};
      fmt::print("timing {} kernel(s) x {} shape(s) x {} thread count(s), {} cache, {} reps{}\n",
                 kernels.size(), shapes.size(), bcfg.threads.size(), bcfg.warm ? "warm" : "cold",
                 bcfg.repetitions, bcfg.interleave ? ", interleaved" : "");
      std::fflush(stdout);
      const auto started = std::chrono::steady_clock::now();
      const BenchOutcome res = run_bench(
          kernels, shapes, bcfg, peaks,
          [&](const BenchRow& r, int done, int total) {
            if (r.gpu_name.empty()) {
              fmt::print("[{}/{}] {} {}x{} threads={}: median {:.1f} us, {:.2f} GB/s = {:.1f}% of {:.2f} GB/s peak\n",
                         done, total, r.kernel, r.rows, r.cols, r.threads, r.time_median_us, r.gbps_median,
                         r.peak_pct, r.peak_gbps);
            } else {
              fmt::print("[{}/{}] {} {}x{} on {}: median {:.2f} us ({} launches per rep), {:.1f} GB/s = {:.1f}% of the "
                         "{:.1f} GB/s copy peak, {:.1f}% of the {:.1f} GB/s datasheet{}\n",
                         done, total, r.kernel, r.rows, r.cols, r.gpu_name, r.time_median_us, r.launches_per_rep,
                         r.gbps_median, r.peak_pct, r.peak_gbps, r.datasheet_pct, r.datasheet_gbps,
                         r.time_with_quant_median_us > 0
                             ? fmt::format("; with the on-GPU Q8_1 quantization {:.2f} us (quantizer alone {:.2f} us)",
                                           r.time_with_quant_median_us, r.quant_median_us)
                             : std::string());
            }
            std::fflush(stdout);
            if (csv) csv->write(bench_fields(ctx, r, gpu_columns));
          },
          [&](int runs_done, int runs_total) {
            // With interleaving, points finish together at the end: report rounds meanwhile.
            const int per_round = runs_total / bcfg.repetitions;
            if (!bcfg.interleave || runs_done % per_round != 0 || runs_done == runs_total) return;
            const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
            fmt::print("repetition round {}/{} done, {:.0f} s elapsed, about {:.0f} s to go\n",
                       runs_done / per_round, bcfg.repetitions, s, s * (runs_total - runs_done) / runs_done);
            std::fflush(stdout);
          });
      for (const auto& s : res.skipped)
        fmt::print("SKIP {} {}: {}\n", s.kernel, to_string(s.shape), s.reason);
      fmt::print("\n");
      print_bench_table(res.rows);
      if (csv) fmt::print("\nwrote {}\n", csv->path());
      return res.rows.empty() ? 1 : 0;
    }

    if (*peak) {
      const RunContext ctx = current_context(cmd);
      const auto cpu_threads = peak_device == "cuda" ? std::vector<int>{} : parse_threads(peak_threads);
      std::string gpu_not_measured;
      measure_peaks(cpu_threads, peak_reps, &ctx, peak_out, peak_append, peak_device != "cpu", &gpu_not_measured);
      if (!peak_out.empty()) fmt::print("wrote {}\n", expand_machine(peak_out));
      if (peak_device == "cuda" && !gpu_not_measured.empty()) {
        fmt::print(stderr, "peak: the GPU was not measured: {}\n", gpu_not_measured);
        return 1;
      }
      return 0;
    }

    if (*gguf_cmd) {
      print_gguf(gguf_path, gguf_tensors, gguf_max_elems);
      return 0;
    }

    if (*plan_cmd) {
      const LoadedModel m(plan_model);
      const ModelConfig& c = m.config;
      const ModelWeights& w = m.weights;
      KernelPlan plan = load_plan(plan_file);
      if (!plan_rules.empty()) plan.merge(KernelPlan::parse_rules(plan_rules));
      if (plan_route->count() > 0) route_outliers_option(plan, plan_route_k);
      const auto bench = plan_bench.empty() ? std::vector<KernelSpeed>{} : kernel_speeds(read_bench_csv(plan_bench));
      const auto planned = resolve_plan(plan, w, plan_threads, bench);
      fmt::print("model {} ({}), plan {}, {} thread(s)\n\n", c.name, c.arch, plan.describe(), plan_threads);
      print_plan(planned);
      return 0;
    }

    if (*tok_cmd) {
      const gguf::File f = gguf::File::open(tok_model);
      const Tokenizer t = Tokenizer::from_gguf(f);
      const std::vector<int> ids = t.encode(tok_text, tok_bos);
      std::string line;
      for (int id : ids) line += (line.empty() ? "" : " ") + std::to_string(id);
      fmt::print("{}\n", line);
      if (!tok_ids_only) {
        for (int id : ids) fmt::print("{:>7} {:?}\n", id, t.decode(id));
        if (t.decode(ids) != std::string(tok_bos && t.bos() >= 0 ? t.decode(t.bos()) : "") + tok_text)
          fmt::print("note: decoding does not give the text back\n");
      }
      return 0;
    }

    if (*report) {
      for (const auto& file : report_files) {
        const std::string f = expand_machine(file);
        if (report_files.size() > 1) fmt::print("\n## {}\n\n", f);
        switch (detect_csv_kind(f)) {
          case CsvKind::Bench: {
            RunContext ctx;
            const auto rows = read_bench_csv(f, &ctx);
            fmt::print("machine {} ({}), commit {}\n\n", ctx.machine, ctx.cpu_model, ctx.git_commit);
            print_bench_table(rows);
            break;
          }
          case CsvKind::Check: print_check_table(read_check_csv(f)); break;
          case CsvKind::Peak: print_peak_table(read_peak_csv(f)); break;
          case CsvKind::Sweep: print_sweep_report(f); break;
          case CsvKind::Unknown:
            throw UsageError(fmt::format("{}: not a qmvlab results CSV (unknown header)", f));
        }
      }
      return 0;
    }

    if (*make_model_cmd) return run_make_model(make_model_args);
  } catch (const TokenizerError& e) {
    fmt::print(stderr, "qmvlab: {}\n", e.what());
    return 2;
  } catch (const PlanError& e) {
    fmt::print(stderr, "qmvlab: {}\n", e.what());
    return 2;
  } catch (const UsageError& e) {
    fmt::print(stderr, "qmvlab: {}\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    fmt::print(stderr, "qmvlab: {}\n", e.what());
    return 2;
  }
  return 0;
}

}  // namespace qmv
