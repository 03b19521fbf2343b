#include "harness/peak.h"

#include <omp.h>

#include <fmt/format.h>

#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "harness/machine.h"
#include "harness/shapes.h"
#include "kernels/cpu_features.h"
#include "kernels/formats/formats.h"
#include "kernels/kernel.h"
#include "kernels/weight_memory.h"
#ifdef QMV_HAVE_CUDA
#include "kernels/cuda/cuda_device.h"
#endif

namespace qmv {

std::size_t cold_buffer_bytes() {
  const MachineInfo& m = machine_info();
  std::size_t bytes = std::max<std::size_t>(4 * m.llc_bytes, std::size_t(1) << 30);
  if (m.ram_bytes) bytes = std::min(bytes, m.ram_bytes / 4);
  return bytes;
}

std::size_t prepared_copies_budget_bytes() {
  return std::max<std::size_t>(machine_info().ram_bytes / 4, std::size_t(1) << 30);
}

std::size_t cold_rotation_bytes() {
  return std::min(std::max<std::size_t>(16 * machine_info().llc_bytes, std::size_t(512) << 20),
                  prepared_copies_budget_bytes() / 12);
}

namespace {

// The read family. A kernel reads its weights as several row streams at once, with
// 256- or 512-bit loads, some with software prefetch; one loop with one stream per thread
// is not the ceiling (kernels read above it), so the peak is the best of these.
// Each loop reads `Streams` streams in lockstep, 128 bytes (two cache lines) of each per
// step, one accumulator per stream: the adds are never the bound, the loads are. The
// streams lie either far apart (the slice cut into `Streams` contiguous parts) or a tile
// apart: `Streams` adjacent tiles of `TileBytes`, then the next `Streams`, as a
// row-interleaved kernel reads its groups of rows. Close streams read faster on some
// machines (results/README.md, "amd-zen3-2c"), so the family has both.
typedef std::uint64_t U64x2 __attribute__((vector_size(16)));
typedef std::uint64_t U64x4 __attribute__((vector_size(32)));
typedef std::uint64_t U64x8 __attribute__((vector_size(64)));

constexpr std::size_t kStepWords = 128 / sizeof(std::uint64_t);
constexpr std::size_t kLineWords = 64 / sizeof(std::uint64_t);

// An unaligned load of the vector width (through a reference: a vector return value
// would be an ABI question outside the ISA's functions).
template <class V>
[[gnu::always_inline]] inline void add_words(V& acc, const std::uint64_t* p) {
  V v;
  __builtin_memcpy(&v, p, sizeof v);
  acc += v;
}

// Inlined into the per-ISA functions below, so its vectors are that ISA's registers.
template <class V, int Streams, int PrefetchBytes>
[[gnu::always_inline]] inline std::uint64_t sum_in_streams(const std::uint64_t* p, std::size_t n) {
  constexpr std::size_t kLanes = sizeof(V) / sizeof(std::uint64_t);
  constexpr std::size_t kAhead = PrefetchBytes / sizeof(std::uint64_t);
  const std::size_t part = n / Streams / kStepWords * kStepWords;
  V acc[Streams] = {};
  for (std::size_t i = 0; i < part; i += kStepWords) {
    for (int s = 0; s < Streams; ++s) {
      const std::uint64_t* q = p + s * part + i;
      if constexpr (PrefetchBytes > 0) {
        // Within this stream's part only: past it is another stream's data or the end.
        if (i + kAhead + kStepWords <= part) {
          __builtin_prefetch(q + kAhead);
          __builtin_prefetch(q + kAhead + kLineWords);
        }
      }
      V step = {};
      for (std::size_t v = 0; v < kStepWords; v += kLanes) add_words(step, q + v);
      acc[s] += step;
    }
  }
  std::uint64_t sum = 0;
  for (std::size_t i = Streams * part; i < n; ++i) sum += p[i];
  for (int s = 0; s < Streams; ++s)
    for (std::size_t l = 0; l < kLanes; ++l) sum += acc[s][l];
  return sum;
}

// The tiled order: whole groups of `Streams` tiles, then the words left over read as one
// stream (fewer than Streams x TileBytes, a small share of any slice worth timing).
template <class V, int Streams, int PrefetchBytes, int TileBytes>
[[gnu::always_inline]] inline std::uint64_t sum_in_tiles(const std::uint64_t* p, std::size_t n) {
  static_assert(TileBytes % 128 == 0, "tiles are whole steps");
  constexpr std::size_t kLanes = sizeof(V) / sizeof(std::uint64_t);
  constexpr std::size_t kAhead = PrefetchBytes / sizeof(std::uint64_t);
  constexpr std::size_t kTileWords = TileBytes / sizeof(std::uint64_t);
  const std::size_t groups = n / (kTileWords * Streams);
  V acc[Streams] = {};
  for (std::size_t g = 0; g < groups; ++g) {
    const std::uint64_t* group = p + g * kTileWords * Streams;
    for (std::size_t i = 0; i < kTileWords; i += kStepWords) {
      for (int s = 0; s < Streams; ++s) {
        const std::uint64_t* q = group + s * kTileWords + i;
        if constexpr (PrefetchBytes > 0) {
          // Ahead within the tile or past it into the tiles that follow, but never past
          // the last group (its streams prefetch within their own tiles).
          if (g + 1 < groups || i + kAhead + kStepWords <= kTileWords) {
            __builtin_prefetch(q + kAhead);
            __builtin_prefetch(q + kAhead + kLineWords);
          }
        }
        V step = {};
        for (std::size_t v = 0; v < kStepWords; v += kLanes) add_words(step, q + v);
        acc[s] += step;
      }
    }
  }
  const std::size_t done = groups * kTileWords * Streams;
  std::uint64_t sum = sum_in_streams<V, 1, 0>(p + done, n - done);
  for (int s = 0; s < Streams; ++s)
    for (std::size_t l = 0; l < kLanes; ++l) sum += acc[s][l];
  return sum;
}

// Far-apart streams with TileBytes 0, tiled ones otherwise.
template <class V, int Streams, int PrefetchBytes, int TileBytes>
[[gnu::always_inline]] inline std::uint64_t sum_any(const std::uint64_t* p, std::size_t n) {
  if constexpr (TileBytes == 0) {
    return sum_in_streams<V, Streams, PrefetchBytes>(p, n);
  } else {
    return sum_in_tiles<V, Streams, PrefetchBytes, TileBytes>(p, n);
  }
}

#if defined(__x86_64__) || defined(__i386__)
template <int Streams, int PrefetchBytes, int TileBytes>
__attribute__((target("avx512f"))) std::uint64_t sum_avx512(const std::uint64_t* p, std::size_t n) {
  return sum_any<U64x8, Streams, PrefetchBytes, TileBytes>(p, n);
}
template <int Streams, int PrefetchBytes, int TileBytes>
__attribute__((target("avx2"))) std::uint64_t sum_avx2(const std::uint64_t* p, std::size_t n) {
  return sum_any<U64x4, Streams, PrefetchBytes, TileBytes>(p, n);
}
#endif
template <int Streams, int PrefetchBytes, int TileBytes>
std::uint64_t sum_baseline(const std::uint64_t* p, std::size_t n) {
  return sum_any<U64x2, Streams, PrefetchBytes, TileBytes>(p, n);
}

// "<isa>.s<streams>[.t<tile>][.pf<distance>]", sizes as 512 or 16k.
std::string loop_name(const char* isa, int streams, int prefetch_bytes, int tile_bytes) {
  const auto size = [](int bytes) {
    return bytes >= 1024 ? std::to_string(bytes / 1024) + "k" : std::to_string(bytes);
  };
  std::string name = std::string(isa) + ".s" + std::to_string(streams);
  if (tile_bytes > 0) name += ".t" + size(tile_bytes);
  if (prefetch_bytes > 0) name += ".pf" + size(prefetch_bytes);
  return name;
}

template <int Streams, int PrefetchBytes, int TileBytes = 0>
void add_loops(std::vector<ReadLoop>& loops) {
  const auto loop = [](const char* isa, int bits, std::uint32_t features, ReadLoopFn fn) {
    return ReadLoop{
        loop_name(isa, Streams, PrefetchBytes, TileBytes), bits, Streams, PrefetchBytes, TileBytes, features, fn};
  };
#if defined(__x86_64__) || defined(__i386__)
  loops.push_back(loop("avx512", 512, static_cast<std::uint32_t>(CpuFeature::AVX512F),
                       sum_avx512<Streams, PrefetchBytes, TileBytes>));
  loops.push_back(
      loop("avx2", 256, static_cast<std::uint32_t>(CpuFeature::AVX2), sum_avx2<Streams, PrefetchBytes, TileBytes>));
  loops.push_back(loop("sse2", 128, 0, sum_baseline<Streams, PrefetchBytes, TileBytes>));
#else
  loops.push_back(loop("plain", 128, 0, sum_baseline<Streams, PrefetchBytes, TileBytes>));
#endif
}

// Far-apart streams: prefetch distances per stream of none, a few lines, and a few
// pages (the hardware prefetchers stop at 4 KiB page boundaries; a software prefetch
// does not).
template <int Streams>
void add_prefetch_distances(std::vector<ReadLoop>& loops) {
  add_loops<Streams, 0>(loops);
  add_loops<Streams, 512>(loops);
  add_loops<Streams, 2048>(loops);
  add_loops<Streams, 8192>(loops);
}

// Tiled streams: tiles the size of a row-interleaved group of eight rows, of 2048 to
// 11008 columns at 4.5 to 8.5 bits per weight (9 to 90 KiB); prefetch none or a few lines.
template <int Streams>
void add_tiles(std::vector<ReadLoop>& loops) {
  add_loops<Streams, 0, 16384>(loops);
  add_loops<Streams, 512, 16384>(loops);
  add_loops<Streams, 0, 65536>(loops);
  add_loops<Streams, 512, 65536>(loops);
}

double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

const std::vector<ReadLoop>& all_read_loops() {
  static const std::vector<ReadLoop> loops = [] {
    std::vector<ReadLoop> v;
    add_prefetch_distances<1>(v);
    add_prefetch_distances<2>(v);
    add_prefetch_distances<4>(v);
    add_prefetch_distances<8>(v);
    add_tiles<2>(v);
    add_tiles<4>(v);
    add_tiles<8>(v);
    return v;
  }();
  return loops;
}

std::vector<ReadLoop> usable_read_loops() {
  const bool avx2 = !missing_cpu_features(static_cast<std::uint32_t>(CpuFeature::AVX2));
  std::vector<ReadLoop> out;
  for (const ReadLoop& l : all_read_loops())
    if (!missing_cpu_features(l.features) && !(avx2 && l.vector_bits < 256)) out.push_back(l);
  return out;
}

ReadLoop usable_read_loop(const std::string& name) {
  const std::vector<ReadLoop> loops = usable_read_loops();
  const auto it = std::find_if(loops.begin(), loops.end(), [&](const ReadLoop& l) { return l.name == name; });
  if (it != loops.end()) return *it;
  std::string names;
  for (const ReadLoop& l : loops) names += (names.empty() ? "" : ", ") + l.name;
  throw std::invalid_argument("'" + name + "' is not a read loop this CPU and ISA mask allow (" + names + ")");
}

std::uint64_t read_with_threads(const ReadLoop& loop, const std::uint64_t* buf, std::size_t words, int threads) {
  std::uint64_t total = 0;
#pragma omp parallel num_threads(threads) reduction(+ : total)
  {
    const std::size_t nt = static_cast<std::size_t>(omp_get_num_threads());
    const std::size_t t = static_cast<std::size_t>(omp_get_thread_num());
    // Slices start on a cache line (of an aligned buffer): no line is read by two threads.
    const std::size_t begin = t == 0 ? 0 : words * t / nt / kLineWords * kLineWords;
    const std::size_t end = t + 1 == nt ? words : words * (t + 1) / nt / kLineWords * kLineWords;
    total += loop.sum(buf + begin, end - begin);
  }
  return total;
}

namespace {

// The words of the buffer a read pass reads: `buffer_bytes`, or the cold size.
std::size_t read_buffer_words(std::size_t buffer_bytes) {
  return (buffer_bytes ? buffer_bytes : cold_buffer_bytes()) / sizeof(std::uint64_t);
}

// First touch by the threads that will read the buffer, so its pages land on their node.
void first_touch(std::uint64_t* buf, std::size_t words, int threads) {
#pragma omp parallel for num_threads(threads) schedule(static)
  for (std::size_t i = 0; i < words; ++i) buf[i] = i;
}

}  // namespace

PeakResult measure_read_bandwidth(int threads, int repetitions, const std::string& only_loop,
                                  std::size_t buffer_bytes) {
  const std::vector<ReadLoop> loops =
      only_loop.empty() ? usable_read_loops() : std::vector{usable_read_loop(only_loop)};
  repetitions = std::max(repetitions, 1);
  const std::size_t words = read_buffer_words(buffer_bytes);
  // Weight memory, as the kernels read: the same pages (huge where granted), so the
  // ceiling is the one their reads meet.
  WeightMemory memory(words * sizeof(std::uint64_t));
  auto* buf = static_cast<std::uint64_t*>(memory.data());
  first_touch(buf, words, threads);

  volatile std::uint64_t sink = 0;
  const double gigabytes = static_cast<double>(words * sizeof(std::uint64_t)) / 1e9;
  const auto timed_pass = [&](const ReadLoop& loop) {
    const auto t0 = std::chrono::steady_clock::now();
    const std::uint64_t total = read_with_threads(loop, buf, words, threads);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    sink = sink + total;
    return gigabytes / s;
  };

  // Screening: two passes of each loop, the second round in reverse order, so that a
  // busy moment of the machine costs no loop both; the three with the fastest pass go on.
  std::vector<std::vector<double>> gbps(loops.size());
  std::vector<std::size_t> finalists(loops.size());
  for (std::size_t i = 0; i < loops.size(); ++i) finalists[i] = i;
  constexpr std::size_t kFinalists = 3;
  if (loops.size() > kFinalists) {
    for (std::size_t i = 0; i < loops.size(); ++i) gbps[i].push_back(timed_pass(loops[i]));
    for (std::size_t i = loops.size(); i-- > 0;) gbps[i].push_back(timed_pass(loops[i]));
    const auto fastest = [&](std::size_t i) { return std::max(gbps[i][0], gbps[i][1]); };
    std::sort(finalists.begin(), finalists.end(),
              [&](std::size_t a, std::size_t b) { return fastest(a) > fastest(b); });
    finalists.resize(kFinalists);
  }
  // The finalists interleaved, the order turning each round, so a busy moment of the
  // machine falls on each of them alike; the screening passes count as two more.
  for (int r = 0; r < repetitions; ++r)
    for (std::size_t k = 0; k < finalists.size(); ++k) {
      const std::size_t i = finalists[(k + static_cast<std::size_t>(r)) % finalists.size()];
      gbps[i].push_back(timed_pass(loops[i]));
    }

  PeakResult result;
  result.threads = threads;
  result.bytes = words * sizeof(std::uint64_t);
  result.huge_page_share = huge_page_share(buf, result.bytes);
  for (std::size_t i = 0; i < loops.size(); ++i)
    result.loops.push_back({loops[i].name, *std::max_element(gbps[i].begin(), gbps[i].end()), median_of(gbps[i]),
                            static_cast<int>(gbps[i].size())});
  std::stable_sort(result.loops.begin(), result.loops.end(),
                   [](const ReadLoopSpeed& a, const ReadLoopSpeed& b) { return a.best_gbps > b.best_gbps; });
  // The winner among the finalists: screening passes alone are too few to stand for a loop.
  const ReadLoopSpeed* winner = nullptr;
  for (const ReadLoopSpeed& l : result.loops)
    if (!winner && l.repetitions > 2) winner = &l;
  if (!winner) winner = &result.loops.front();
  result.best_gbps = winner->best_gbps;
  result.median_gbps = winner->median_gbps;
  result.repetitions = winner->repetitions;
  result.read_loop = winner->name;
  for (const ReadLoopSpeed& l : result.loops)
    if (l.repetitions > 2 || loops.size() <= kFinalists) result.finalists.push_back(l.name);
  return result;
}

namespace {
const ReadLoopSpeed* steadiest(const PeakResult& p) {
  const ReadLoopSpeed* best = nullptr;
  for (const ReadLoopSpeed& l : p.loops)
    if (std::find(p.finalists.begin(), p.finalists.end(), l.name) != p.finalists.end() &&
        (!best || l.median_gbps > best->median_gbps))
      best = &l;
  return best;
}
}  // namespace

InterleavedRead::InterleavedRead(ReadLoop loop, std::vector<std::span<const std::byte>> spans, int threads,
                                 std::size_t slice_bytes)
    : loop_(std::move(loop)), spans_(std::move(spans)), threads_(threads), slice_words_(slice_bytes / sizeof(std::uint64_t)) {
  std::size_t words = 0;
  for (const auto& s : spans_) {
    if (reinterpret_cast<std::uintptr_t>(s.data()) % alignof(std::uint64_t) != 0)
      throw std::invalid_argument("interleaved read: a span is not 8-byte aligned");
    words += s.size() / sizeof(std::uint64_t);
  }
  if (slice_words_ == 0 || words < slice_words_)
    throw std::invalid_argument(fmt::format("interleaved read: {} bytes of memory to read, less than one slice of {}",
                                            words * sizeof(std::uint64_t), slice_bytes));
}

void InterleavedRead::pass() {
  std::uint64_t total = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (std::size_t left = slice_words_; left > 0;) {
    const std::span<const std::byte>& s = spans_[span_];
    const std::size_t in_span = s.size() / sizeof(std::uint64_t);
    const std::size_t n = std::min(left, in_span - word_);
    total += read_with_threads(loop_, reinterpret_cast<const std::uint64_t*>(s.data()) + word_, n, threads_);
    left -= n;
    word_ += n;
    if (word_ == in_span) span_ = (span_ + 1) % spans_.size(), word_ = 0;
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  sum_ += total;
  gbps_.push_back(static_cast<double>(slice_bytes()) / 1e9 / seconds);
  if (threads_ >= 2) round_trip_ns_.push_back(thread_round_trip_ns());
}

double InterleavedRead::median_round_trip_ns() const {
  return round_trip_ns_.empty() ? 0 : median_of(round_trip_ns_);
}

bool one_placement(std::span<const double> round_trip_ns) {
  double shortest = 0, longest = 0;
  for (const double ns : round_trip_ns) {
    if (ns <= 0) continue;
    shortest = shortest > 0 ? std::min(shortest, ns) : ns;
    longest = std::max(longest, ns);
  }
  return longest <= kOtherPlacementRatio * shortest;
}

double thread_round_trip_ns(int rounds) {
  if (rounds < 1) return 0;
  // The ball's line, alone: thread 0 sends on the odd values, thread 1 on the even.
  struct alignas(64) Ball {
    std::atomic<int> value{0};
  } ball;
  // Timed in batches, each batch's time over its round trips: one round trip is a few
  // ticks of the clock, and the median batch leaves out a preempted one.
  constexpr int kBatches = 8;
  std::vector<double> ns(kBatches);
  bool two = false;
  auto wait_for = [&ball](int v) {
    // A thread that shares its CPU with the other yields now and then, so the other runs.
    for (unsigned spins = 1; ball.value.load(std::memory_order_acquire) != v; ++spins) {
      _mm_pause();
      if (spins % 4096 == 0) std::this_thread::yield();
    }
  };
#pragma omp parallel num_threads(2)
  {
    if (omp_get_num_threads() == 2) {
      const bool first = omp_get_thread_num() == 0;
      int sent = 0;
      for (int b = 0; b < kBatches; ++b) {
        const auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < rounds; ++i, sent += 2) {
          if (first) {
            ball.value.store(sent + 1, std::memory_order_release);
            wait_for(sent + 2);
          } else {
            wait_for(sent + 1);
            ball.value.store(sent + 2, std::memory_order_release);
          }
        }
        if (first)
          ns[static_cast<std::size_t>(b)] =
              std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count() / rounds;
      }
      if (first) two = true;
    }
  }
  return two ? median_of(ns) : 0;
}

std::size_t read_between_slice_bytes(std::size_t weight_bytes, std::size_t cache_bytes) {
  constexpr std::size_t kMaxSlice = std::size_t{256} << 20, kPage = 4096;
  const std::size_t slice = std::min(kMaxSlice, weight_bytes / 4 / kPage * kPage);
  return slice >= 2 * cache_bytes && slice > 0 ? slice : 0;
}

double InterleavedRead::median_gbps() const { return gbps_.empty() ? 0 : median_of(gbps_); }

double PeakResult::steady_gbps() const {
  const ReadLoopSpeed* l = steadiest(*this);
  return l ? l->median_gbps : median_gbps;
}

std::string PeakResult::steady_loop() const {
  const ReadLoopSpeed* l = steadiest(*this);
  return l ? l->name : read_loop;
}

std::size_t gpu_cold_bytes(std::size_t l2_bytes) {
  return std::max<std::size_t>(4 * l2_bytes, std::size_t(64) << 20);
}

GpuPeakResult measure_gpu_peaks(int repetitions) {
  GpuPeakResult r;
#ifdef QMV_HAVE_CUDA
  const cuda::DeviceInfo& dev = cuda::current_device();
  if (!dev.present) {
    r.why_not = dev.why_absent;
    return r;
  }
  r.datasheet_gbps = dev.datasheet_gbps();
  // Far past the L2 (8x), at least 1 GiB; two buffers of it within half the free memory.
  std::size_t bytes = std::max<std::size_t>(8 * dev.l2_bytes, std::size_t(1) << 30);
  if (const std::size_t free = cuda::free_device_memory(); free > 0) bytes = std::min(bytes, free / 4);
  bytes = bytes / (std::size_t(1) << 20) * (std::size_t(1) << 20);
  const cuda::CopyBandwidth c = cuda::measure_copy_bandwidth(bytes, repetitions);
  if (!c.error.empty() || c.gbps.empty()) {
    r.why_not = c.error.empty() ? "no repetitions" : c.error;
    return r;
  }
  std::vector<double> g = c.gbps;
  std::sort(g.begin(), g.end());
  r.measured = true;
  r.bytes = bytes;
  r.repetitions = static_cast<int>(g.size());
  r.best_gbps = g.back();
  r.median_gbps = g[g.size() / 2];
  // The read buffer may be twice the copy's: one buffer instead of two.
  const cuda::ReadBandwidth rd = cuda::measure_read_bandwidth(2 * bytes, repetitions);
  if (rd.error.empty() && !rd.gbps.empty()) {
    std::vector<double> rg = rd.gbps;
    std::sort(rg.begin(), rg.end());
    r.read_measured = true;
    r.read_bytes = rd.buffer_bytes;
    r.read_best_gbps = rg.back();
    r.read_median_gbps = rg[rg.size() / 2];
    r.read_loop = rd.loop;
  } else {
    r.read_loop = "not measured: " + rd.error;
  }
#else
  (void)repetitions;
  r.why_not = "this qmvlab was built without CUDA (QMV_CUDA=OFF)";
#endif
  return r;
}

GpuWindowReadResult measure_gpu_window_read(std::size_t window_bytes, bool graph, int repetitions) {
  GpuWindowReadResult r;
  r.graph = graph;
  r.window_bytes = window_bytes;
#ifdef QMV_HAVE_CUDA
  const cuda::DeviceInfo& dev = cuda::current_device();
  if (!dev.present) {
    r.why_not = dev.why_absent;
    return r;
  }
  const cuda::WindowReadBandwidth w =
      cuda::measure_window_read_bandwidth(window_bytes, gpu_cold_bytes(dev.l2_bytes), graph, repetitions);
  r.window_bytes = w.window_bytes;
  r.arena_bytes = w.arena_bytes;
  if (!w.error.empty() || w.gbps.empty()) {
    r.why_not = w.error.empty() ? "no repetitions" : w.error;
    return r;
  }
  std::vector<double> g = w.gbps;
  std::sort(g.begin(), g.end());
  r.measured = true;
  r.launches_per_repetition = w.launches_per_repetition;
  r.repetitions = static_cast<int>(g.size());
  r.best_gbps = g.back();
  r.median_gbps = g[g.size() / 2];
  r.read_loop = w.loop;
#else
  (void)repetitions;
  r.why_not = "this qmvlab was built without CUDA (QMV_CUDA=OFF)";
#endif
  return r;
}

std::size_t parse_window_bytes(std::string_view spec) {
  const auto bad = [&](const std::string& why) {
    return std::invalid_argument(fmt::format("'{}': {}", spec, why));
  };
  if (const auto colon = spec.find(':'); colon != std::string_view::npos) {
    WeightType type{};
    if (!parse_weight_type(spec.substr(0, colon), type))
      throw bad(fmt::format("'{}' is not a weight type (q4_K, q6_K, q8_0, f16, ...)", spec.substr(0, colon)));
    std::vector<Shape> shapes;
    try {
      shapes = parse_shapes(spec.substr(colon + 1));
    } catch (const std::invalid_argument& e) {
      throw bad(e.what());
    }
    if (shapes.size() != 1) throw bad("expected one ROWSxCOLS after the type");
    if (shapes[0].cols % block_values(type) != 0)
      throw bad(fmt::format("{} columns are not whole {} blocks of {}", shapes[0].cols, to_string(type),
                            block_values(type)));
    return static_cast<std::size_t>(shapes[0].rows) * row_bytes(type, shapes[0].cols);
  }
  std::size_t bytes = 0;
  const auto [end, ec] = std::from_chars(spec.data(), spec.data() + spec.size(), bytes);
  if (ec != std::errc() || end != spec.data() + spec.size() || bytes < 16)
    throw bad("expected a byte count of at least 16, or TYPE:ROWSxCOLS");
  return bytes;
}

const GpuPeakResult& gpu_peak() {
  static const GpuPeakResult peak = measure_gpu_peaks(7);
  return peak;
}

std::vector<HandoverRound> measure_handover(int threads, int rounds, const std::string& read_loop,
                                            std::size_t buffer_bytes,
                                            const std::function<void(const HandoverRound&, int)>& each) {
  if (threads < 2) throw std::invalid_argument("the hand-over needs a team of 2 or more threads");
  const ReadLoop loop = usable_read_loop(read_loop);
  const std::size_t words = read_buffer_words(buffer_bytes);
  WeightMemory memory(words * sizeof(std::uint64_t));
  auto* buf = static_cast<std::uint64_t*>(memory.data());
  first_touch(buf, words, threads);
  // The hand-over's lines, aligned so that no other data shares them.
  constexpr std::size_t kWords = kHandoverBytes / sizeof(std::uint64_t), kLine = 64 / sizeof(std::uint64_t);
  std::vector<std::uint64_t> shared_storage(kWords + kLine);
  std::uint64_t* shared = shared_storage.data();
  while (reinterpret_cast<std::uintptr_t>(shared) % 64 != 0) ++shared;
  constexpr int kRegions = 2000, kHandovers = 1000;
  using Clock = std::chrono::steady_clock;
  auto micros = [](Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration<double, std::micro>(b - a).count();
  };
  volatile std::uint64_t sink = 0;
  std::vector<HandoverRound> out;
  std::vector<double> region(kRegions), handover(kHandovers);
  for (int r = 0; r < rounds; ++r) {
    HandoverRound round;
    auto t0 = Clock::now();
    sink = sink + read_with_threads(loop, buf, words, threads);
    round.read_gbps = static_cast<double>(words * sizeof(std::uint64_t)) / 1e3 / micros(t0, Clock::now());
    for (double& us : region) {
      t0 = Clock::now();
      // As a kernel's team is opened: one piece of work per thread, and nothing in it,
      // so that what is timed is the team's start and its closing barrier.
#pragma omp parallel for num_threads(threads) schedule(static)
      for (int t = 0; t < threads; ++t) asm volatile("" ::: "memory");
      us = micros(t0, Clock::now());
    }
    for (int k = 0; k < kHandovers; ++k) {
      // The team reads the lines, as kernels read an activation; then one thread writes
      // them again, as the next activation is made: that write is the hand-over.
      std::uint64_t total = 0;
#pragma omp parallel num_threads(threads) reduction(+ : total)
      for (std::size_t i = 0; i < kWords; i += kLine) total += shared[i];
      sink = sink + total;
      t0 = Clock::now();
      for (std::size_t i = 0; i < kWords; ++i) shared[i] = i + static_cast<std::uint64_t>(k);
      handover[static_cast<std::size_t>(k)] = micros(t0, Clock::now());
    }
    round.region_us = median_of(region);
    round.handover_us = median_of(handover);
    out.push_back(round);
    if (each) each(round, r);
  }
  return out;
}

std::vector<HandoverGroup> group_by_read_speed(std::vector<HandoverRound> rounds) {
  if (rounds.empty()) return {};
  std::sort(rounds.begin(), rounds.end(),
            [](const HandoverRound& a, const HandoverRound& b) { return a.read_gbps < b.read_gbps; });
  std::size_t split = rounds.size();  // the first round of the faster group
  if (rounds.back().read_gbps >= 1.3 * rounds.front().read_gbps) {
    double widest = 0;
    for (std::size_t i = 1; i < rounds.size(); ++i)
      if (const double gap = rounds[i].read_gbps / rounds[i - 1].read_gbps; gap > widest) {
        widest = gap;
        split = i;
      }
  }
  std::vector<HandoverGroup> out;
  for (const auto& [begin, end] : {std::pair{std::size_t{0}, split}, std::pair{split, rounds.size()}}) {
    if (begin == end) continue;
    HandoverGroup g;
    g.rounds = static_cast<int>(end - begin);
    g.read_min_gbps = rounds[begin].read_gbps;
    g.read_max_gbps = rounds[end - 1].read_gbps;
    std::vector<double> region, handover;
    for (std::size_t i = begin; i < end; ++i) {
      region.push_back(rounds[i].region_us);
      handover.push_back(rounds[i].handover_us);
    }
    g.region_us = median_of(region);
    g.handover_us = median_of(handover);
    out.push_back(g);
  }
  return out;
}

}  // namespace qmv
