#include "harness/cli/tables.h"

#include <fmt/format.h>

#include <algorithm>
#include <string>
#include <tuple>

#include "harness/table.h"

namespace qmv {
namespace {

std::string sci(double v) { return fmt::format("{:.2e}", v); }

}  // namespace

void print_bench_table(std::vector<BenchRow> rows) {
  std::sort(rows.begin(), rows.end(), [](const BenchRow& a, const BenchRow& b) {
    return std::tie(a.kernel, a.rows, a.cols, a.n, a.threads) < std::tie(b.kernel, b.rows, b.cols, b.n, b.threads);
  });
  std::vector<std::vector<std::string>> t;
  for (const auto& r : rows)
    t.push_back({r.n > 1 ? fmt::format("{} n={}", r.kernel, r.n) : r.kernel, fmt::format("{}x{}", r.rows, r.cols), std::to_string(r.threads), r.cache,
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
                 r.passed ? "pass" : (r.activation == "skipped" ? "not checked: " : "FAIL: ") + r.failure});
  print_table({"kernel", "shape", "activation", "NMSE kernel", "worst row kernel", "NMSE end-to-end",
               "max abs e2e", "result"},
              t);
}

void print_peak_table(const std::vector<PeakRow>& rows) {
  std::vector<std::vector<std::string>> t;
  for (const auto& r : rows) {
    const bool gpu = r.device != "cpu";
    const std::string measure = r.device == "cuda-read"              ? "streaming read"
                                : r.device == "cuda-read-window"       ? "window reads, stream"
                                : r.device == "cuda-read-window-graph" ? "window reads, graph"
                                : gpu                                  ? "device-to-device copy"
                                    : fmt::format("read, {} thread{}", r.threads, r.threads == 1 ? "" : "s");
    t.push_back({gpu ? r.device : "cpu", measure,
                 fmt::format("{:.2f}", r.gbps_best), fmt::format("{:.2f}", r.gbps_median),
                 r.datasheet_gbps > 0 ? fmt::format("{:.2f}", r.datasheet_gbps) : "-",
                 fmt::format("{:.0f}", static_cast<double>(r.buffer_bytes) / (1 << 20)), std::to_string(r.repetitions),
                 r.read_loop.empty() ? "-" : r.read_loop,
                 r.huge_page_pct >= 0 ? fmt::format("{:.0f}%", r.huge_page_pct) : "-"});
  }
  print_table({"device", "measure", "GB/s (best)", "GB/s (median)", "datasheet GB/s", "buffer MiB", "reps", "read loop",
               "huge pages"},
              t);
}

void print_interleaved_peaks(const BenchOutcome& res) {
  for (const auto& [t, gbps] : res.interleaved_peak_gbps) {
    std::string others;
    for (const auto& [loop, g] : res.interleaved_loop_gbps.at(t))
      if (loop != res.interleaved_peak_loop.at(t))
        others += fmt::format("{}{} {:.2f}", others.empty() ? "" : ", ", loop, g);
    fmt::print(
        "read peak timed among the kernels, {} thread{}: {:.2f} GB/s (median, {}{}; {:.0f}% of its buffer in "
        "huge pages): the rows' peak\n",
        t, t == 1 ? "" : "s", gbps, res.interleaved_peak_loop.at(t), others.empty() ? "" : "; also timed: " + others,
        100 * res.interleaved_peak_huge_page_share);
  }
}

void print_peer_tables(const std::vector<TimedRow>& rows) {
  if (std::none_of(rows.begin(), rows.end(), [](const TimedRow& r) { return r.status == "ok" && is_peer_kernel(r.kernel); }))
    return;
  const std::vector<PeerPoint> points = peer_points(rows);
  fmt::print("\nqmvlab against ggml: the fastest kernel of each per point (times include the activation's "
             "quantization where the harness does it before the call); ggml/qmvlab = ggml time / qmvlab time, "
             ">1: qmvlab faster\n\n{}",
             peer_point_table(points, ""));
  fmt::print("\nper weight type and threads over the shapes (geometric mean of the ratios, min-max):\n\n{}",
             peer_group_table(peer_groups(points), ""));
}

}  // namespace qmv
