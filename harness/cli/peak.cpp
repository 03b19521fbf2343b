#include "harness/cli/peak.h"

#include <fmt/format.h>

#include <cstdio>
#include <memory>
#include <stdexcept>
#include <utility>
#include <vector>

#include "harness/cli/command.h"
#include "harness/cli/options.h"
#include "harness/machine.h"
#include "harness/peak.h"
#include "harness/tuning_store.h"

namespace qmv {
namespace {

// The GPU's copy bandwidth next to its datasheet figure.
std::string describe_gpu_peak(const GpuPeakResult& p) {
  return fmt::format("GPU peak ({}): device-to-device copy {:.1f} GB/s (read + write; best of {}, median {:.1f}), "
                     "{:.1f}% of the datasheet {:.1f} GB/s",
                     machine_info().gpu, p.best_gbps, p.repetitions, p.median_gbps,
                     p.datasheet_gbps > 0 ? 100 * p.best_gbps / p.datasheet_gbps : 0.0, p.datasheet_gbps);
}

class PeakCommand : public Command {
 public:
  explicit PeakCommand(CLI::App& app) {
    cmd_ = app.add_subcommand(
        "peak", "Measure the machine's memory bandwidth: per thread count, the best of a family of STREAM-like read "
                "loops, and with a CUDA device a streaming read and a device-to-device copy next to the datasheet "
                "figure");
    cmd_->add_option("--threads", threads_, "Thread counts, e.g. 1,2 or all")->capture_default_str();
    cmd_->add_option("--read-loop", read_loop_,
                     "Time this CPU read loop alone (e.g. avx2.s4.pf2k) instead of the best of the family");
    cmd_->add_flag("--all-loops", all_loops_, "Print every CPU read loop's speed, not only the fastest few");
    cmd_->add_option("--buffer-mib", buffer_mib_,
                     "CPU: size of the buffer read, in MiB (default: 4x the last-level cache, at least 1 GiB, at most "
                     "a quarter of the RAM); a smaller one measures a cache level, or a cold rotation's footprint")
        ->check(CLI::Range(1, 1 << 20));
    cmd_->add_option("--reps", reps_, "Repetitions (the best is the peak)")->check(CLI::Range(1, 100))
        ->capture_default_str();
    cmd_->add_option("--out", out_, "Write a CSV ({machine} expands to this machine's name)");
    cmd_->add_flag("--append", append_, "Append to --out instead of replacing it");
    cmd_->add_option("--device", device_,
                     "cpu, cuda (the GPU alone: exits 1 when there is no device to measure) or all")
        ->check(CLI::IsMember({"cpu", "cuda", "all"}))
        ->capture_default_str();
    cmd_->add_option("--handover", handover_rounds_,
                     "CPU: instead of the bandwidth, this many rounds of what the threads pay to meet, each beside a "
                     "read pass of the cold buffer: an empty parallel region, and one thread rewriting 8 KiB the "
                     "team read last (as a decode hands each activation over); per thread count of 2 or more")
        ->check(CLI::Range(1, 10000));
    cmd_->add_option("--gpu-windows", windows_,
                     "GPU: also the ceiling of a GEMV launched once per matrix of these sizes: the read loops reading "
                     "one window per launch, back to back, cold, on a stream and from a CUDA graph; each size BYTES or "
                     "a matrix TYPE:ROWSxCOLS (e.g. q4_K:4096x14336,q6_K:14336x4096)")
        ->delimiter(',');
  }

  bool chosen() const override { return cmd_->parsed(); }

  int run(const std::string& command_line) override {
    const RunContext ctx = current_context(command_line);
    if (handover_rounds_ > 0) return measure_handovers();
    // Sizes are parsed before anything is measured, so a typo costs nothing.
    std::vector<std::pair<std::string, std::size_t>> windows;
    for (const std::string& w : windows_) try {
        windows.emplace_back(w, parse_window_bytes(w));
      } catch (const std::invalid_argument& e) {
        throw std::invalid_argument(std::string("--gpu-windows: ") + e.what());
      }
    if (!windows.empty() && device_ == "cpu")
      throw std::invalid_argument("--gpu-windows measures the GPU: it needs --device cuda or all");
    const auto cpu_threads = device_ == "cuda" ? std::vector<int>{} : parse_threads(threads_);
    std::string gpu_not_measured;
    std::map<int, PeakResult> cpu_results;
    measure_peaks(cpu_threads, reps_, &ctx, out_, append_, device_ != "cpu", &gpu_not_measured, read_loop_, all_loops_,
                  nullptr, static_cast<std::size_t>(buffer_mib_) << 20, &cpu_results);
    if (!out_.empty()) fmt::print("wrote {}\n", expand_machine(out_));
    // The whole family on the cold buffer is the machine's roofline; one loop, or a
    // buffer sized for a cache level, is a question of its own.
    if (read_loop_.empty() && buffer_mib_ == 0 && !cpu_results.empty()) {
      std::vector<TuningRow> rows;
      for (const auto& [t, p] : cpu_results) {
        rows.push_back(peak_tuning_row(t, p.steady_gbps(), p.steady_loop(), p.repetitions, "peak"));
        fmt::print("roofline for decode, {} thread{}: {:.2f} GB/s ({}, its median)\n", t, t == 1 ? "" : "s",
                   p.steady_gbps(), p.steady_loop());
      }
      const TuningStore store;
      if (const std::string error = store.add(rows); error.empty())
        fmt::print("saved to the tuning store {}\n", store.path());
      else
        fmt::print(stderr, "qmvlab: the tuning store was not updated: {}\n", error);
    }
    if (device_ == "cuda" && !gpu_not_measured.empty()) {
      fmt::print(stderr, "peak: the GPU was not measured: {}\n", gpu_not_measured);
      return 1;
    }
    if (!windows.empty()) return measure_windows(ctx, windows);
    return 0;
  }

  // --handover: the rounds as they end, then their costs grouped by the host's read speed.
  int measure_handovers() {
    if (!out_.empty() || append_ || !windows_.empty() || all_loops_ || device_ == "cuda")
      throw std::invalid_argument("--handover prints its rounds on the CPU alone: it takes --threads, --read-loop, "
                                  "--buffer-mib, not --out, --append, --all-loops, --gpu-windows or --device cuda");
    std::vector<int> teams;
    for (int t : parse_threads(threads_))
      if (t >= 2) teams.push_back(t);
    if (teams.empty()) throw std::invalid_argument("--handover needs a thread count of 2 or more (--threads)");
    const std::string loop = read_loop_.empty() ? usable_read_loops().front().name : read_loop_;
    for (int t : teams) {
      const auto rounds = measure_handover(
          t, handover_rounds_, loop, static_cast<std::size_t>(buffer_mib_) << 20,
          [&](const HandoverRound& r, int i) {
            fmt::print("round {}/{}, {} threads: read {:.1f} GB/s ({}), parallel region {:.2f} us, hand-over of {} "
                       "KiB {:.2f} us\n",
                       i + 1, handover_rounds_, t, r.read_gbps, loop, r.region_us, kHandoverBytes / 1024,
                       r.handover_us);
            std::fflush(stdout);
          });
      for (const HandoverGroup& g : group_by_read_speed(rounds))
        fmt::print("{} threads, {} round{} reading {:.1f}-{:.1f} GB/s: parallel region {:.2f} us, hand-over {:.2f} "
                   "us (medians)\n",
                   t, g.rounds, g.rounds == 1 ? "" : "s", g.read_min_gbps, g.read_max_gbps, g.region_us,
                   g.handover_us);
    }
    return 0;
  }

  // The window reads, each size on a stream and from a graph, appended to --out.
  int measure_windows(const RunContext& ctx, const std::vector<std::pair<std::string, std::size_t>>& windows) {
    const GpuPeakResult& peak = gpu_peak();
    if (!peak.measured) {
      fmt::print(stderr, "peak: --gpu-windows: no GPU to measure: {}\n", peak.why_not);
      return 1;
    }
    std::unique_ptr<CsvWriter> csv;
    if (!out_.empty()) csv = std::make_unique<CsvWriter>(expand_machine(out_), peak_header(true), true);
    for (const auto& [spec, bytes] : windows) {
      for (const bool graph : {false, true}) {
        const GpuWindowReadResult w = measure_gpu_window_read(bytes, graph, reps_);
        if (!w.measured) {
          fmt::print(stderr, "peak: the window read of {} ({} bytes) failed: {}\n", spec, bytes, w.why_not);
          return 1;
        }
        fmt::print("GPU window read {} ({:.2f} MiB, {}): {:.1f} GB/s median ({:.1f} best) = {:.1f}% of the read "
                   "peak; {}\n",
                   spec, static_cast<double>(w.window_bytes) / (1 << 20), graph ? "graph" : "stream", w.median_gbps,
                   w.best_gbps, 100 * w.median_gbps / peak.roofline_gbps(), w.read_loop);
        std::fflush(stdout);
        PeakRow row{0, static_cast<std::int64_t>(w.window_bytes), w.repetitions, w.best_gbps, w.median_gbps,
                    graph ? "cuda-read-window-graph" : "cuda-read-window", peak.datasheet_gbps,
                    fmt::format("{}; {} launches per repetition over {} bytes", w.read_loop,
                                w.launches_per_repetition, w.arena_bytes)};
        if (csv) csv->write(peak_fields(ctx, row, true));
      }
    }
    return 0;
  }

 private:
  CLI::App* cmd_ = nullptr;
  std::string threads_ = "1,all", out_, device_ = "all", read_loop_;
  std::vector<std::string> windows_;
  int reps_ = 7, buffer_mib_ = 0, handover_rounds_ = 0;
  bool append_ = false, all_loops_ = false;
};

}  // namespace

std::map<int, double> measure_peaks(const std::vector<int>& threads, int reps, const RunContext* ctx,
                                    const std::string& out, bool append, bool gpu, std::string* gpu_not_measured,
                                    const std::string& read_loop, bool all_loops,
                                    std::map<int, std::vector<std::string>>* finalist_loops, std::size_t buffer_bytes,
                                    std::map<int, PeakResult>* results) {
  const bool gpu_columns = gpu && machine_info().gpu != "none";
  std::unique_ptr<CsvWriter> csv;
  if (!out.empty()) csv = std::make_unique<CsvWriter>(expand_machine(out), peak_header(gpu_columns), append);
  std::map<int, double> peaks;
  for (int t : threads) {
    const PeakResult p = measure_read_bandwidth(t, reps, read_loop, buffer_bytes);
    PeakRow row{t, static_cast<std::int64_t>(p.bytes), p.repetitions, p.best_gbps, p.median_gbps};
    row.read_loop = p.read_loop;
    if (p.huge_page_share >= 0) row.huge_page_pct = 100 * p.huge_page_share;
    fmt::print("peak read bandwidth, {} thread{}: {:.2f} GB/s (best of {}, median {:.2f}), read loop {}{}{}\n", t,
               t == 1 ? "" : "s", p.best_gbps, p.repetitions, p.median_gbps, p.read_loop,
               p.loops.size() > 1 ? fmt::format(" of {} screened", p.loops.size()) : "",
               p.huge_page_share >= 0 ? fmt::format(", {:.0f}% of the buffer in huge pages", 100 * p.huge_page_share)
                                      : "");
    if (all_loops) {
      for (const ReadLoopSpeed& l : p.loops)
        fmt::print("  {:<18} best {:6.2f} GB/s, median {:6.2f} ({} pass{})\n", l.name, l.best_gbps, l.median_gbps,
                   l.repetitions, l.repetitions == 1 ? "" : "es");
    } else if (p.loops.size() > 1) {
      std::string runners;
      for (std::size_t i = 1; i < p.loops.size() && i < 4; ++i)
        runners += fmt::format("{}{} {:.2f}", i == 1 ? "" : ", ", p.loops[i].name, p.loops[i].best_gbps);
      fmt::print("  next best: {}; slowest: {} {:.2f}\n", runners, p.loops.back().name, p.loops.back().best_gbps);
    }
    std::fflush(stdout);
    if (csv) csv->write(peak_fields(*ctx, row, gpu_columns));
    peaks[t] = p.best_gbps;
    if (finalist_loops) (*finalist_loops)[t] = p.finalists;
    if (results) (*results)[t] = p;
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
                     "cuda-read", g.datasheet_gbps, g.read_loop};
        if (csv) csv->write(peak_fields(*ctx, read, gpu_columns));
      } else {
        fmt::print("GPU read peak: {}\n", g.read_loop);
      }
    }
    std::fflush(stdout);
  }
  return peaks;
}

std::unique_ptr<Command> peak_command(CLI::App& app) { return std::make_unique<PeakCommand>(app); }

}  // namespace qmv
