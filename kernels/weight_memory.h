// Memory for weights that kernels stream: the bench's arenas, the kernels' prepared
// (repacked) copies and the peak's read buffer. A large buffer is mapped on its own,
// 2 MiB-aligned and advised for transparent huge pages, so a cold read that walks
// gigabytes takes one TLB miss per 2 MiB instead of one per 4 KiB: where the OS grants
// the pages, the peak and every kernel read faster alike (results/README.md, "Pages").
// The OS may refuse (THP "never", fragmented memory): the buffer is then ordinary
// pages, which huge_page_share() reports. QMV_HUGE_PAGES=off in the environment asks
// for ordinary pages throughout (MADV_NOHUGEPAGE), to measure what the huge ones are
// worth.
#pragma once

#include <cstddef>
#include <string>

namespace qmv {

// The environment variable that chooses the pages: unset or "on", huge where granted;
// "off", ordinary.
inline constexpr const char* kHugePagesEnv = "QMV_HUGE_PAGES";

// Why the environment's QMV_HUGE_PAGES is not a setting ("" when it is unset, "on" or
// "off"), for the command line to refuse it before anything is allocated.
std::string huge_pages_setting_error();

// Buffers of at least this many bytes get their own huge-page-advised mapping; smaller
// ones come from the heap, 64-byte aligned (a mapping each would waste a huge page on
// a small matrix and run into the process's mapping limit on a long rotation).
inline constexpr std::size_t kHugePageBytes = std::size_t{2} << 20;

// `bytes` of uninitialised memory, 64-byte aligned (2 MiB for a large buffer);
// nullptr when out of memory. Free with free_weight_memory and the same byte count.
void* alloc_weight_memory(std::size_t bytes);
void free_weight_memory(void* p, std::size_t bytes);

// Advises the whole 2 MiB pages inside [p, p + bytes) as the buffers above are: for
// weight memory allocated elsewhere (a peer's repacked buffer) before it is first
// written, so it reads on the pages ours do. Does nothing where unsupported.
void advise_huge_pages(void* p, std::size_t bytes);

// The share (0..1) of [p, p + bytes) backed by huge pages now, from /proc/self/smaps;
// negative where that cannot be read (not Linux, no procfs).
double huge_page_share(const void* p, std::size_t bytes);

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
