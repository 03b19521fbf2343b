// `qmvlab bench`: kernels timed, GB/s as a share of the peak measured in the same run.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <set>
#include <stdexcept>
#include <string>
#include <tuple>

#include "harness/bench.h"
#include "harness/cli/command.h"
#include "harness/cli/options.h"
#include "harness/cli/peak.h"
#include "harness/cli/tables.h"
#include "harness/csv.h"
#include "harness/machine.h"
#include "harness/peak.h"
#include "harness/tuning_store.h"

namespace qmv {
namespace {

class BenchCommand : public Command {
 public:
  explicit BenchCommand(CLI::App& app) {
    cmd_ = app.add_subcommand(
        "bench", "Time kernels, GB/s as a share of the measured peak (CPU: Google Benchmark, real time; CUDA: events "
                 "around many launches, NVTX ranges named after the kernels, one host thread)");
    cmd_->add_option("--kernels", kernels_, "Comma-separated globs of kernel names")->capture_default_str();
    cmd_->add_option("--shapes", shapes_, "ROWSxCOLS list or preset")->capture_default_str();
    cmd_->add_option("--threads", threads_, "Thread counts, e.g. 1,2 or all")->capture_default_str();
    cmd_->add_option("--n", config_.vectors,
                     "Activation vectors per call, e.g. 1,2,4,8: batch kernels (op matvec_batch) are timed with "
                     "each count up to their max_n, every other kernel only with 1")
        ->delimiter(',')
        ->check(CLI::Range(1, 64))
        ->capture_default_str();
    cmd_->add_flag("--warm", config_.warm,
                   "Reuse one weight copy (warm caches) instead of rotating copies past the LLC / GPU L2");
    cmd_->add_flag("--gpu-graph", config_.gpu_graph,
                   "CUDA: replay the timed launches from a CUDA graph, as the GPU decode runs them, instead of "
                   "launching each from the host");
    cmd_->add_flag("--gpu-overlap", config_.gpu_overlap,
                   "CUDA: launch each timed matvec as a programmatic dependent of the one before, as decode "
                   "--overlap-weights does (the bulk-copy kernels stream weights meanwhile; others ignore it)");
    cmd_->add_flag("--no-interleave", no_interleave_,
                   "Run each point's repetitions back to back instead of interleaving all points");
    cmd_->add_option("--reps", config_.repetitions, "Repetitions per point (min/median/max over them)")
        ->check(CLI::Range(1, 1000))->capture_default_str();
    cmd_->add_option("--min-time", config_.min_time_s, "Minimum seconds per repetition")
        ->check(CLI::Range(0.001, 60.0))->capture_default_str();
    cmd_->add_option("--peak-reps", peak_reps_, "Repetitions of the peak bandwidth read")
        ->check(CLI::Range(1, 100))->capture_default_str();
    cmd_->add_option("--peak-buffer-mib", peak_buffer_mib_,
                     "CPU: read a buffer of this many MiB for the peak instead of the cold size (4x the last-level "
                     "cache, at least 1 GiB): seconds quicker, but not the roofline (a smoke run's option)")
        ->check(CLI::Range(1, 1 << 20));
    cmd_->add_option("--cold-mib", cold_mib_,
                     "CPU, cold: the weights each point's calls go round, in MiB, instead of 16x the last-level "
                     "cache (at least 512 MiB): smaller, the cache answers part of the reads (how cold is cold); rows "
                     "timed over less than the default are not added to the tuning store")
        ->check(CLI::Range(1, 1 << 20));
    cmd_->add_flag(
        "--peak-once", peak_once_,
        "CPU, cold: every row's % of peak against the peak measured before the run (its best pass), not "
        "against the read loops timed interleaved with the kernels (the highest of their medians in the run); "
        "implied by "
        "--warm and --no-interleave");
    cmd_->add_option("--peak-loops", peak_loops_,
                     "CPU, cold, interleaved: the read loops timed among the kernels (comma-separated, e.g. "
                     "avx2.s2,avx2.s4.pf2k; `qmvlab peak --all-loops` lists them), instead of the finalists of the "
                     "peak measured before the run; the rows' peak is the highest of their medians")
        ->delimiter(',');
    add_tiling_options(cmd_, tiling_);
    cmd_->add_option("--out", out_, "Write a CSV of results ({machine} expands to this machine's name)");
    cmd_->add_flag("--append", append_, "Append to --out instead of replacing it");
  }

  bool chosen() const override { return cmd_->parsed(); }

  int run(const std::string& command_line) override {
    set_cpu_tiling(tiling_);
    const auto kernels = select_kernels(kernels_);
    const auto shapes = shapes_or_throw(shapes_);
    require_supported(kernels, shapes);
    BenchConfig& cfg = config_;
    cfg.threads = parse_threads(threads_);
    cfg.interleave = !no_interleave_;
    if (cold_mib_ > 0) {
      cfg.rotation_bytes = static_cast<std::size_t>(cold_mib_) << 20;
      if (const std::size_t ram = machine_info().ram_bytes; ram && cfg.rotation_bytes > ram / 4)
        throw std::invalid_argument(fmt::format("--cold-mib {}: more than a quarter of the RAM ({} MiB)", cold_mib_,
                                                ram / 4 >> 20));
    }
    // A misspelt loop is refused before the up-front peak, not after it.
    for (const std::string& name : peak_loops_)
      try {
        (void)usable_read_loop(name);
      } catch (const std::invalid_argument& e) {
        throw std::invalid_argument(std::string("--peak-loops: ") + e.what());
      }
    const RunContext ctx = current_context(command_line);
    // Selecting a CUDA kernel adds the GPU columns (empty on CPU rows), whether or not
    // a device is here, so the file's columns follow from the command alone.
    const auto any_of_backend = [&](Backend b) {
      return std::any_of(kernels.begin(), kernels.end(), [b](const KernelSpec* k) { return k->backend == b; });
    };
    const bool gpu_columns = any_of_backend(Backend::CUDA);
    std::unique_ptr<CsvWriter> csv;
    if (!out_.empty()) csv = std::make_unique<CsvWriter>(expand_machine(out_), bench_header(gpu_columns), append_);
    // The CPU roofline, when CPU kernels are timed (the GPU's is measured by the bench).
    std::map<int, std::vector<std::string>> finalist_loops;
    const std::size_t peak_buffer = static_cast<std::size_t>(peak_buffer_mib_) << 20;
    cfg.peak_buffer_bytes = peak_buffer;
    const auto peaks = any_of_backend(Backend::CPU) ? measure_peaks(cfg.threads, peak_reps_, nullptr, "", false, false,
                                                                    nullptr, "", false, &finalist_loops, peak_buffer)
                                                    : std::map<int, double>{};
    if (!peak_loops_.empty())
      for (auto& [t, loops] : finalist_loops) loops = peak_loops_;
    // Back to back, the read loops would run in a minute of their own: no common stretch.
    if (!cfg.warm && cfg.interleave && !peak_once_) cfg.peak_read_loops = finalist_loops;
    fmt::print("timing {} kernel(s) x {} shape(s) x {} thread count(s), {} cache, {} reps{}\n", kernels.size(),
               shapes.size(), cfg.threads.size(), cfg.warm ? "warm" : "cold", cfg.repetitions,
               cfg.interleave ? ", interleaved" : "");
    std::fflush(stdout);
    const auto started = std::chrono::steady_clock::now();
    const BenchOutcome res = run_bench(
        kernels, shapes, cfg, peaks,
        [&](const BenchRow& r, int done, int total) {
          print_progress(r, done, total);
          if (csv) csv->write(bench_fields(ctx, r, gpu_columns));
        },
        [&](int runs_done, int runs_total) {
          // With interleaving, points finish together at the end: report rounds meanwhile.
          const int per_round = runs_total / cfg.repetitions;
          if (!cfg.interleave || runs_done % per_round != 0 || runs_done == runs_total) return;
          const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
          fmt::print("repetition round {}/{} done, {:.0f} s elapsed, about {:.0f} s to go\n", runs_done / per_round,
                     cfg.repetitions, s, s * (runs_total - runs_done) / runs_done);
          std::fflush(stdout);
        });
    // Rows timed over less than the cold footprint, or of an overlapped launch (whose time
    // belongs to a pair of kernels, not to the kernel alone), stay out of the store.
    const bool below_cold = !cfg.warm && cfg.rotation_bytes && cfg.rotation_bytes < cold_rotation_bytes();
    if (below_cold)
      fmt::print("not added to the tuning store: timed over {} MiB of weights, under the {} MiB a cold row needs\n",
                 cold_mib_, cold_rotation_bytes() >> 20);
    else if (!cfg.gpu_overlap)
      record_in_store(res.rows, "bench", res.interleaved_peak_gbps);
    print_interleaved_peaks(res);
    for (const auto& s : res.skipped) fmt::print("SKIP {} {}: {}\n", s.kernel, to_string(s.shape), s.reason);
    fmt::print("\n");
    print_bench_table(res.rows);
    print_weight_transforms(res.rows);
    if (csv) fmt::print("\nwrote {}\n", csv->path());
    return res.rows.empty() ? 1 : 0;
  }

 private:
  static void print_progress(const BenchRow& r, int done, int total) {
    if (r.gpu_name.empty()) {
      fmt::print("[{}/{}] {} {}x{} threads={}{}: median {:.1f} us, {:.2f} GB/s = {:.1f}% of {:.2f} GB/s peak, "
                 "{:.2f} GFLOP/s\n",
                 done, total, r.kernel, r.rows, r.cols, r.threads, r.n > 1 ? fmt::format(" n={}", r.n) : "",
                 r.time_median_us, r.gbps_median, r.peak_pct, r.peak_gbps, r.gflops);
    } else {
      fmt::print("[{}/{}] {} {}x{} on {}: median {:.2f} us ({} launches per rep), {:.1f} GB/s = {:.1f}% of the "
                 "{:.1f} GB/s read peak, {:.1f}% of the {:.1f} GB/s datasheet{}\n",
                 done, total, r.kernel, r.rows, r.cols, r.gpu_name, r.time_median_us, r.launches_per_rep,
                 r.gbps_median, r.peak_pct, r.peak_gbps, r.datasheet_pct, r.datasheet_gbps,
                 r.time_with_quant_median_us > 0
                     ? fmt::format("; with the on-GPU Q8_1 quantization {:.2f} us (quantizer alone {:.2f} us)",
                                   r.time_with_quant_median_us, r.quant_median_us)
                     : std::string());
    }
    std::fflush(stdout);
  }

  // One line per (kernel, shape) whose kernel transforms its weights once (the thread
  // counts share the prepared copies).
  static void print_weight_transforms(const std::vector<BenchRow>& rows) {
    std::set<std::tuple<std::string, std::int64_t, std::int64_t>> printed;
    for (const BenchRow& r : rows) {
      if (r.prepared_bytes <= 0 || !printed.insert({r.kernel, r.rows, r.cols}).second) continue;
      if (printed.size() == 1) fmt::print("\n");
      const double bytes = static_cast<double>(r.prepared_bytes);
      fmt::print("prepared weights: {} {}x{}: {:.2f} ms once, {:.1f} {}\n", r.kernel, r.rows, r.cols,
                 r.prepare_us / 1e3, bytes >= 1e6 ? bytes / 1e6 : bytes / 1e3, bytes >= 1e6 ? "MB" : "kB");
    }
  }

  CLI::App* cmd_ = nullptr;
  std::vector<std::string> peak_loops_;
  std::string kernels_ = "*", shapes_ = "llama-2-7b", threads_ = "1,all", out_;
  BenchConfig config_;
  bool append_ = false, no_interleave_ = false;
  int peak_reps_ = 5;
  int peak_buffer_mib_ = 0;  // 0: the cold size
  int cold_mib_ = 0;         // 0: cold_rotation_bytes()
  bool peak_once_ = false;
  CpuTiling tiling_ = cpu_tiling();
};

}  // namespace

std::unique_ptr<Command> bench_command(CLI::App& app) { return std::make_unique<BenchCommand>(app); }

}  // namespace qmv
