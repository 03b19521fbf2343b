// Timing. A CPU point (kernel, shape, threads) becomes a Google Benchmark registered
// at run time. A CUDA point is timed with CUDA events around many back-to-back
// launches per repetition, inside an NVTX range named after the kernel; Q8_1 kernels
// are also timed with the on-GPU activation quantization before every launch, and the
// quantizer alone. Rows report GB/s against the measured peak (CPU: a STREAM-like
// read; GPU: a device-to-device copy) and, for GPU rows, the datasheet bandwidth.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "harness/csv.h"
#include "kernels/kernel.h"

namespace qmv {

struct BenchConfig {
  std::vector<int> threads{1};
  // Activation vectors per call (`--n`): a batch kernel (OpKind::MatVecBatch) is timed
  // with each count up to its max_n, every other kernel only where the list holds 1.
  std::vector<int> vectors{1};
  // CUDA kernels are timed once, with the first thread count (host threads do not
  // change a GPU kernel), so their rows' threads column is that count.
  bool warm = false;       // cold (default): rotate weight copies well past the LLC / GPU L2
  // CUDA: the timed launches replayed from a CUDA graph (one lap of the weight copies
  // per graph), as the GPU decode runs its kernels, instead of launched from the host
  // one by one. The rows' command names the choice (--gpu-graph).
  bool gpu_graph = false;
  // CUDA: each timed matvec launched as a programmatic dependent of the launch before
  // (MatVecArgs::overlap_previous), as `decode --overlap-weights` launches them: the
  // kernels that can (the bulk-copy ones) stream their weights while the one before
  // finishes; the others launch as usual. The rows' command names it (--gpu-overlap).
  bool gpu_overlap = false;
  int repetitions = 5;
  double min_time_s = 0.1;  // per repetition
  // Repetitions of all points in random order, so drift of a noisy machine lands on
  // every kernel alike rather than on whichever ran during a slow spell.
  bool interleave = true;
  std::uint64_t seed = 1;
  // Cold CPU runs: per thread count, read loops of the peak's family (ReadLoop::name)
  // timed among the kernels, together one more point per shape of the run (at least
  // three, at least one per loop), on a buffer of `peak_buffer_bytes` (0: the peak's
  // size, cold_buffer_bytes()). Each CPU row's peak_gbps is then the highest of those
  // loops' medians over their repetitions, so on a machine whose bandwidth drifts,
  // peak_pct compares medians of the same stretch of time; several loops, because the
  // up-front winner is picked by its best pass, and the loop fastest in one quiet
  // moment need not be the fastest over the run. Thread counts without a loop, and warm
  // runs, keep the peak_gbps passed to run_bench.
  std::map<int, std::vector<std::string>> peak_read_loops;
  std::size_t peak_buffer_bytes = 0;
  // Cold CPU runs: the bytes of weights each point's calls go round (a kernel's prepared
  // copies, or windows of the arena for one without a transform); 0: cold_rotation_bytes().
  std::size_t rotation_bytes = 0;
};

struct BenchSkip {
  std::string kernel;
  Shape shape;
  std::string reason;
  int n = 0;  // the point's count of vectors; 0: the kernel and shape whatever the count
};

struct BenchOutcome {
  std::vector<BenchRow> rows;
  std::vector<BenchSkip> skipped;
  // The read loops of BenchConfig::peak_read_loops as timed in this run: per thread
  // count, the highest median GB/s among them (what the rows' peak_gbps then is), the
  // loop that had it, and every loop's median.
  std::map<int, double> interleaved_peak_gbps;
  std::map<int, std::string> interleaved_peak_loop;
  std::map<int, std::map<std::string, double>> interleaved_loop_gbps;
  // The share (0..1) of those loops' buffer in huge pages when the run began; -1 when
  // no loop was timed.
  double interleaved_peak_huge_page_share = -1;
};

// peak_gbps: measured read bandwidth per thread count (see peak.h), unless the run
// times its own (BenchConfig::peak_read_loops); CUDA rows use the
// GPU's measured copy bandwidth (gpu_peak(), measured once per process). `on_row` is
// called as each point has all its repetitions (CSV rows written as they come; with an
// interleaved peak, once the whole run is done, as the rows need its median);
// `on_progress` after every timed kernel repetition.
// Unmaps the buffer the interleaved read loops keep between runs (BenchConfig::
// peak_read_loops), for a process that goes on to other work, as a decode after its
// plan's timing.
void release_bench_read_buffer();

BenchOutcome run_bench(const std::vector<const KernelSpec*>& kernels, const std::vector<Shape>& shapes,
                       const BenchConfig& config, const std::map<int, double>& peak_gbps,
                       const std::function<void(const BenchRow&, int done, int total)>& on_row = {},
                       const std::function<void(int runs_done, int runs_total)>& on_progress = {});

}  // namespace qmv
