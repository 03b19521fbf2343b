// The machine's measured memory bandwidth: the roofline every bench row is a share of
// (CPU: a STREAM-like read; GPU: a device-to-device copy).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace qmv {

// One loop of the read family: sums `words` 64-bit words from `p` (any count, any
// uint64_t alignment) and returns the sum modulo 2^64, the same for every loop.
using ReadLoopFn = std::uint64_t (*)(const std::uint64_t* p, std::size_t words);
struct ReadLoop {
  std::string name;         // "<isa>.s<streams>[.t<tile>][.pf<distance>]", e.g. "avx2.s4.pf2k", "avx2.s4.t16k"
  int vector_bits = 0;      // width of each load: 128, 256 or 512
  int streams = 0;          // streams of the slice read in lockstep
  int prefetch_bytes = 0;   // software prefetch distance per stream; 0: none
  int tile_bytes = 0;       // 0: each stream a contiguous part of the slice, the parts far
                            // apart; else streams in adjacent tiles of this size, the next
                            // group of tiles after them (as a row-interleaved kernel reads)
  std::uint32_t features = 0;  // CpuFeature bits the loop needs
  ReadLoopFn sum = nullptr;
};
// Every loop compiled in, whether or not this CPU can run it.
const std::vector<ReadLoop>& all_read_loops();
// The loops the peak tries here: those whose features the CPU has and the ISA mask
// allows, 256- and 512-bit where allowed; the 128-bit (SSE2) ones only without AVX2.
std::vector<ReadLoop> usable_read_loops();
// The usable loop named `name`; throws std::invalid_argument ("'NAME' is not a read loop
// this CPU and ISA mask allow (the usable names)") when there is none.
ReadLoop usable_read_loop(const std::string& name);
// Sums `words` words of `buf` with `threads` OpenMP threads, each reading its own
// contiguous slice (cut at cache-line multiples) with `loop`.
std::uint64_t read_with_threads(const ReadLoop& loop, const std::uint64_t* buf, std::size_t words, int threads);

// A read loop timed over memory that is already resident and read by the work it is
// the roofline of (a decode's own weights, weight_memory_spans()), one slice per pass,
// the slices going round the spans in turn: passes made between a decode's steps give
// the bandwidth of the same pages in the same minutes as the steps, on a host whose
// bandwidth moves by tens of percent between minutes.
class InterleavedRead {
 public:
  // Throws std::invalid_argument when the spans hold fewer than slice_bytes or a span
  // is not 8-byte aligned.
  InterleavedRead(ReadLoop loop, std::vector<std::span<const std::byte>> spans, int threads,
                  std::size_t slice_bytes);
  void pass();  // reads the next slice, timed
  int passes() const { return static_cast<int>(gbps_.size()); }
  double median_gbps() const;  // 0 before the first pass
  const std::vector<double>& pass_gbps() const { return gbps_; }  // each pass's speed, in order
  // With two threads or more, each pass also times thread_round_trip_ns after its read:
  // the round trips in pass order (empty with one thread), and their median (0: none).
  const std::vector<double>& pass_round_trip_ns() const { return round_trip_ns_; }
  double median_round_trip_ns() const;
  const std::string& loop_name() const { return loop_.name; }
  std::size_t slice_bytes() const { return slice_words_ * sizeof(std::uint64_t); }
  std::uint64_t checksum() const { return sum_; }  // the read loop's sum over every pass

 private:
  ReadLoop loop_;
  std::vector<std::span<const std::byte>> spans_;
  int threads_;
  std::size_t slice_words_;
  std::size_t span_ = 0, word_ = 0;  // where the next slice starts
  std::uint64_t sum_ = 0;
  std::vector<double> gbps_;
  std::vector<double> round_trip_ns_;
};

// Nanoseconds for a cache line to go from OpenMP thread 0 to thread 1 and back: the
// median of 8 batches of `rounds` ping-pongs between the two, each batch's time over
// its rounds (0 with fewer than two threads). It is the cost of every hand-over between
// the kernels' threads (a parallel region's start and end, one thread's output read by
// the other), and it tells where the host put the threads: cores that share a
// last-level cache answer several times faster than cores that do not
// (results/README.md, "Two placements").
double thread_round_trip_ns(int rounds = 16);

// One round trip this much longer than another: the host moved the threads between
// cores that share a cache and cores that do not in between (their round trips differ
// several times over; results/README.md, "Two placements").
inline constexpr double kOtherPlacementRatio = 3;
// Whether round trips timed at several moments all met one placement of the threads
// (zeros, untimed, are left out).
bool one_placement(std::span<const double> round_trip_ns);

// The slice an InterleavedRead of a decode's weights reads between two tokens: at most
// 256 MiB and a quarter of the weights (so the slices go round and each finds its bytes
// long out of the caches), in whole pages; 0 (read nothing) when that is less than twice
// `cache_bytes`, as a pass would then be read from the cache.
std::size_t read_between_slice_bytes(std::size_t weight_bytes, std::size_t cache_bytes);

struct ReadLoopSpeed {
  std::string name;
  double best_gbps = 0, median_gbps = 0;
  int repetitions = 0;  // passes timed: 2 for a loop that did not pass the screening
};

struct PeakResult {
  int threads = 0;
  std::size_t bytes = 0;  // size of the buffer read
  double best_gbps = 0;   // the winning loop's best repetition (the STREAM convention)
  double median_gbps = 0; // the winning loop's median
  int repetitions = 0;
  std::string read_loop;  // the winning loop (ReadLoop::name)
  std::vector<std::string> finalists;  // the loops timed beyond the screening, best first
  double huge_page_share = -1;  // of the buffer in huge pages, 0..1; negative: unknown
  std::vector<ReadLoopSpeed> loops;  // every loop timed, best first
  // The roofline a decode divides by: the highest median among the finalists, not the
  // best single pass, which is one quiet moment of a machine whose bandwidth drifts by
  // tens of percent; a decode lasts many of its moments. steady_loop names the loop.
  double steady_gbps() const;
  std::string steady_loop() const;
};

// The machine's read ceiling with `threads` OpenMP threads: a buffer several times the
// last-level cache (or `buffer_bytes`, when not 0) read, no writes, by every loop of
// usable_read_loops(): two screening passes each, then `repetitions` interleaved passes of
// the fastest three; the result is the loop with the highest best pass. With `only_loop`,
// that loop alone, `repetitions` times (throws std::invalid_argument if it is not usable).
PeakResult measure_read_bandwidth(int threads, int repetitions = 7, const std::string& only_loop = {},
                                  std::size_t buffer_bytes = 0);

// A buffer size that defeats the caches: 4x the last-level cache, at least 1 GiB,
// at most a quarter of the RAM.
std::size_t cold_buffer_bytes();
// What a bench's prepared weight copies may hold at once (harness/bench_cpu.cpp): a
// quarter of the RAM, at least 1 GiB.
std::size_t prepared_copies_budget_bytes();
// The bytes of weight copies a cold bench point's calls go round (harness/bench_cpu.cpp),
// and of the read loop timed among `auto`'s kernels: 16x the last-level cache, at least
// 512 MiB, at most a twelfth of prepared_copies_budget_bytes() (a 48th of the RAM).
// 4x the cache is not cold: a last-level cache that does not evict in LRU order keeps
// part of a scan several times its size, and a host may spread the threads over two of
// them (results/amd-zen5-2c/cold-footprint-read.csv, cold-footprint-bench.csv).
std::size_t cold_rotation_bytes();

// What a CPU decode pays each time its threads meet, beside the read speed of the same
// moment: one round of measure_handover.
struct HandoverRound {
  double read_gbps = 0;    // one pass of the read loop over the cold buffer
  double region_us = 0;    // an empty parallel region of the team (median of the round's)
  double handover_us = 0;  // one thread writing kHandoverBytes the whole team read last (median)
};
// The bytes of the hand-over: an activation vector of a few thousand values.
inline constexpr std::size_t kHandoverBytes = 8192;

// `rounds` rounds with a team of `threads` >= 2 OpenMP threads, each a pass of
// `read_loop` over the buffer (cold_buffer_bytes(), or `buffer_bytes` when not 0), then
// the region and hand-over timings; each(round, index) as each ends. Throws
// std::invalid_argument for fewer than two threads or an unusable loop.
std::vector<HandoverRound> measure_handover(int threads, int rounds, const std::string& read_loop,
                                            std::size_t buffer_bytes,
                                            const std::function<void(const HandoverRound&, int)>& each = {});

// Rounds of one read speed: their count, read range and median costs.
struct HandoverGroup {
  int rounds = 0;
  double read_min_gbps = 0, read_max_gbps = 0, region_us = 0, handover_us = 0;
};
// The rounds split at the widest gap between neighbouring read speeds where the fastest
// read is 1.3x the slowest or more (a host with two speeds), else one group; slowest
// first. None for no rounds.
std::vector<HandoverGroup> group_by_read_speed(std::vector<HandoverRound> rounds);

// The GPU's bandwidth, two ways: a large device-to-device copy (bytes read plus bytes
// written, CUDA events) and a streaming read (bytes read, no writes: a GEMV's traffic,
// so its share of this is what a CPU kernel's share of the CPU read peak means); with
// the datasheet figure (2 x memory clock x bus width / 8). `measured` is false, with
// the reason, without a device.
struct GpuPeakResult {
  bool measured = false;
  std::string why_not;
  std::size_t bytes = 0;  // size of the buffer copied
  int repetitions = 0;
  double best_gbps = 0, median_gbps = 0;  // the copy
  double datasheet_gbps = 0;
  bool read_measured = false;
  std::size_t read_bytes = 0;  // size of the buffer read
  double read_best_gbps = 0, read_median_gbps = 0;
  std::string read_loop;  // which read loop was fastest
  // The roofline of a GEMV: the read peak, or the copy where the read could not run.
  double roofline_gbps() const { return read_measured ? read_best_gbps : best_gbps; }
};
GpuPeakResult measure_gpu_peaks(int repetitions = 7);
// The same, measured on first use and kept for the process (roofline_gbps() is the
// bench's and the decode's roofline).
const GpuPeakResult& gpu_peak();

// Bytes of weight copies a cold GPU bench rotates through: 4x the L2, at least 64 MiB.
std::size_t gpu_cold_bytes(std::size_t l2_bytes);

// The ceiling of a GEMV launched once per matrix: the read peak's loops reading one
// window of `window_bytes` per launch, back to back, rotating through gpu_cold_bytes of
// windows as the cold bench rotates through weight copies; on a stream, or replayed
// from a CUDA graph (`graph`). `measured` is false, with the reason, without a device.
struct GpuWindowReadResult {
  bool measured = false;
  std::string why_not;
  std::size_t window_bytes = 0, arena_bytes = 0;
  bool graph = false;
  int launches_per_repetition = 0, repetitions = 0;
  double best_gbps = 0, median_gbps = 0;
  std::string read_loop;
};
GpuWindowReadResult measure_gpu_window_read(std::size_t window_bytes, bool graph, int repetitions = 7);

// A window size: "BYTES" or the bytes of a matrix, "TYPE:ROWSxCOLS" (e.g.
// "q4_K:4096x14336"). Throws std::invalid_argument naming the bad token.
std::size_t parse_window_bytes(std::string_view spec);

}  // namespace qmv
