// Memory for weights that kernels stream: the bench's arenas, the kernels' prepared
// (repacked) copies, a loaded model and the peak's read buffer. All of it lies in
// 2 MiB-aligned mappings advised for transparent huge pages, so a cold read that walks
// gigabytes takes one TLB miss per 2 MiB instead of one per 4 KiB: where the OS grants
// the pages, the peak and every kernel read faster alike (results/README.md, "Pages").
// A large buffer has a mapping of its own, whole huge pages long; smaller ones are
// carved out of shared chunks, so that neither a small matrix nor the end of a
// large one is left in ordinary pages.
// The OS may refuse (THP "never", fragmented memory): the buffer is then ordinary
// pages, which huge_page_share() reports. QMV_HUGE_PAGES=off in the environment asks
// for ordinary pages throughout (MADV_NOHUGEPAGE), to measure what the huge ones are
// worth.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace qmv {

// The environment variable that chooses the pages: unset or "on", huge where granted;
// "off", ordinary.
inline constexpr const char* kHugePagesEnv = "QMV_HUGE_PAGES";

// Why the environment's QMV_HUGE_PAGES is not a setting ("" when it is unset, "on" or
// "off"), for the command line to refuse it before anything is allocated.
std::string huge_pages_setting_error();

// A transparent huge page on x86-64 Linux.
inline constexpr std::size_t kHugePageBytes = std::size_t{2} << 20;
// The shared chunks, and the largest buffer carved out of one. A chunk's space comes
// back to the OS only with its last buffer: a buffer freed before then is not reused.
inline constexpr std::size_t kWeightChunkBytes = std::size_t{64} << 20;
inline constexpr std::size_t kLargestCarvedBytes = kWeightChunkBytes / 4;

// `bytes` of uninitialised memory, 64-byte aligned (2 MiB-aligned for a buffer over
// kLargestCarvedBytes); nullptr when out of memory. Free with free_weight_memory and
// the same byte count.
void* alloc_weight_memory(std::size_t bytes);
void free_weight_memory(void* p, std::size_t bytes);
// How many shared chunks are mapped now: each holds at least one buffer.
std::size_t weight_memory_chunks();

// While one lives (in any thread), every buffer alloc_weight_memory makes, whatever its
// size, is carved back to back out of large shared mappings: for weights held together
// for as long as they are used (a forward's resident and repacked copies), where a
// mapping each would leave each large buffer's last huge page part empty, resident all
// the same (up to 2 MiB a matrix). Not for buffers freed and made again while others
// live, as a bench rotation's: a shared mapping comes back only with its last buffer.
class PackedWeightMemory {
 public:
  PackedWeightMemory();
  ~PackedWeightMemory();
  PackedWeightMemory(const PackedWeightMemory&) = delete;
  PackedWeightMemory& operator=(const PackedWeightMemory&) = delete;
};

// The written part of all weight memory live now, one span per mapping: a shared chunk
// up to what has been carved from it, a buffer with a mapping of its own whole. In a
// decode that is its resident weights and their repacked copies, on the pages the
// kernels read them from: what a read loop streams to measure the memory the kernels
// meet, without a buffer of its own. Empty where buffers are not tracked (not Linux).
std::vector<std::span<const std::byte>> weight_memory_spans();

// Advises the whole 2 MiB pages inside [p, p + bytes) as the buffers above are: for
// weight memory allocated elsewhere (a peer's repacked buffer) before it is first
// written, so it reads on the pages ours do. Does nothing where unsupported.
void advise_huge_pages(void* p, std::size_t bytes);

// The share (0..1) of [p, p + bytes) backed by huge pages now, from /proc/self/smaps;
// negative where that cannot be read (not Linux, no procfs).
double huge_page_share(const void* p, std::size_t bytes);

// The share (0..1) of all weight memory resident now (every live buffer of
// alloc_weight_memory: the bench's arenas, a forward's resident weights and our
// kernels' repacked copies) that huge pages back, from /proc/self/smaps: for memory
// made of many buffers whose addresses the caller does not hold. 0 when none is
// resident; negative where smaps cannot be read.
double weight_memory_huge_page_share();

// The process's resident memory, in bytes, from /proc/self/status: now (VmRSS) and at
// its peak (VmHWM, since the process started or since reset_peak_resident()); negative
// where that cannot be read.
std::int64_t resident_bytes();
std::int64_t peak_resident_bytes();
// Starts the peak over from the memory resident now (writes "5" to
// /proc/self/clear_refs), so what ran before (a kernel timed on big buffers) is not
// counted. False where the kernel does not allow it: the peak then runs from the
// process's start.
bool reset_peak_resident();

// An owned weight buffer (alloc_weight_memory), movable.
class WeightMemory {
 public:
  WeightMemory() = default;
  explicit WeightMemory(std::size_t bytes);  // throws std::bad_alloc
  WeightMemory(WeightMemory&& o) noexcept : data_(o.data_), bytes_(o.bytes_) { o.data_ = nullptr, o.bytes_ = 0; }
  WeightMemory& operator=(WeightMemory&& o) noexcept;
  WeightMemory(const WeightMemory&) = delete;
  WeightMemory& operator=(const WeightMemory&) = delete;
  ~WeightMemory() { free_weight_memory(data_, bytes_); }

  void* data() const { return data_; }
  std::size_t bytes() const { return bytes_; }

 private:
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
};

}  // namespace qmv
