// What the CPU and the GPU halves of run_bench (bench_cpu.cpp, bench_gpu.cpp) share:
// the points they time, the progress they report through and how a row is made from
// a point's times. Internal to the bench; harness/bench.h is its interface.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "harness/bench.h"

namespace qmv::bench_detail {

struct Point {
  const KernelSpec* spec;
  Shape shape;
  int threads;
  std::string name;  // unique benchmark name
  int n = 1;         // activation vectors per call (batch kernels)
};

// Progress over the CPU and the GPU points of one run_bench call.
struct Progress {
  int points_done = 0, runs_done = 0, total_points = 0, total_runs = 0;
  const std::function<void(const BenchRow&, int, int)>* on_row = nullptr;
  const std::function<void(int, int)>* on_progress = nullptr;

  void run_done() {
    ++runs_done;
    if (*on_progress) (*on_progress)(runs_done, total_runs);
  }
  void point_done(BenchOutcome& out, BenchRow row) {
    ++points_done;
    out.rows.push_back(std::move(row));
    if (*on_row) (*on_row)(out.rows.back(), points_done, total_points);
  }
  void point_failed(BenchOutcome& out, const Point& pt, const std::string& reason, int runs_left) {
    ++points_done;
    runs_done += runs_left;
    out.skipped.push_back({pt.spec->name, pt.shape, reason, pt.n});
  }
};

// The middle value of v (0 for none).
double median(std::vector<double> v);
// One call of a benchmark's function: when it ended (steady clock, seconds), its
// iterations and their time per call by the same clock. Google Benchmark calls it
// several times per repetition, reports the last, and reports a point's repetitions
// together once its last is done, so the report says nothing of when each one ran.
struct BenchCall {
  double end_s = 0;
  std::int64_t iterations = 0;
  double seconds_per_call = 0;
};
// When each reported repetition (its iterations and seconds per call, in the report's
// order) ended: the call of the same iterations whose time per call is nearest its,
// each call matched once; -1 where no call is left to match.
std::vector<double> repetitions_ended(const std::vector<BenchCall>& calls, const std::vector<std::int64_t>& iterations,
                                      const std::vector<double>& seconds_per_call);
// The read loop's speed nearest in time each of the instants `at` (seconds; one below
// 0 is unknown), `reads` being the read loop's repetitions as (when they ended, GB/s):
// the nearer read's speed; between two equally near, their mean where they are one
// speed (kSameReadSpeed) and 0, unknown, where they are not. All 0 without reads.
std::vector<double> nearest_read_speeds(const std::vector<double>& at, std::vector<std::pair<double, double>> reads);
// The bytes of the weights one call of a point reads: both matrices of a fused pair.
std::size_t matrix_bytes(const Point& pt);
// A point's row from its per-call times (seconds); its share of the peak for its thread
// count where peak_gbps has one.
BenchRow make_row(const Point& pt, std::vector<double> t, const BenchConfig& cfg,
                  const std::map<int, double>& peak_gbps);

// The points of each backend, timed: rows and skips into `out`, through `progress`.
void run_cpu_points(const std::vector<Point>& points, const BenchConfig& cfg, const std::map<int, double>& peak_gbps,
                    BenchOutcome& out, Progress& progress);
void run_gpu_points(const std::vector<Point>& points, const BenchConfig& cfg, BenchOutcome& out, Progress& progress);

}  // namespace qmv::bench_detail
