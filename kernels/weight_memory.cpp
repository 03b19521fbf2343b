#include "weight_memory.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <new>
#include <string_view>
#include <utility>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace qmv {
namespace {

std::uintptr_t round_up(std::uintptr_t v, std::uintptr_t to) { return (v + to - 1) / to * to; }

// QMV_HUGE_PAGES=off asks for ordinary pages instead (MADV_NOHUGEPAGE), to measure
// what the huge pages are worth or to read as a program that never asks for them; a
// value that is neither "on" nor "off" the command line refuses
// (huge_pages_setting_error).
bool huge_pages_wanted() {
  static const bool wanted = [] {
    const char* v = std::getenv(kHugePagesEnv);
    return !(v && std::string_view(v) == "off");
  }();
  return wanted;
}

std::atomic<int>& packing_scopes() {
  static std::atomic<int> scopes{0};
  return scopes;
}

#if defined(__linux__)
// Every live mapping made for weight memory (shared chunks and large buffers), by
// base address, so weight_memory_huge_page_share() can find them in smaps.
class Mappings {
 public:
  void add(std::uintptr_t base, std::size_t bytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    spans_[base] = bytes;
  }
  void remove(std::uintptr_t base) {
    std::lock_guard<std::mutex> lock(mutex_);
    spans_.erase(base);
  }
  std::map<std::uintptr_t, std::size_t> spans() {
    std::lock_guard<std::mutex> lock(mutex_);
    return spans_;
  }
  // The bytes of [lo, hi) that lie in some mapping.
  std::uintptr_t overlap(std::uintptr_t lo, std::uintptr_t hi) {
    std::lock_guard<std::mutex> lock(mutex_);
    std::uintptr_t n = 0;
    auto it = spans_.upper_bound(lo);
    if (it != spans_.begin()) --it;
    for (; it != spans_.end() && it->first < hi; ++it) {
      const std::uintptr_t a = std::max(lo, it->first), b = std::min(hi, it->first + it->second);
      if (b > a) n += b - a;
    }
    return n;
  }

 private:
  std::mutex mutex_;
  std::map<std::uintptr_t, std::size_t> spans_;
};

Mappings& mappings() {
  static Mappings* m = new Mappings;  // never destroyed: buffers may outlive statics
  return *m;
}

int page_advice() { return huge_pages_wanted() ? MADV_HUGEPAGE : MADV_NOHUGEPAGE; }

// A 2 MiB-aligned mapping of `bytes` (whole huge pages), advised; nullptr when out of
// memory. Mapped one huge page longer, then the unaligned head and the tail given back.
void* map_huge_aligned(std::size_t bytes) {
  const std::size_t span = bytes + kHugePageBytes;
  void* raw = mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return nullptr;
  const auto start = reinterpret_cast<std::uintptr_t>(raw);
  const std::uintptr_t aligned = round_up(start, kHugePageBytes);
  if (aligned > start) munmap(raw, aligned - start);
  const std::uintptr_t end = start + span, used_end = aligned + bytes;
  if (end > used_end) munmap(reinterpret_cast<void*>(used_end), end - used_end);
  void* p = reinterpret_cast<void*>(aligned);
  madvise(p, bytes, page_advice());  // advice: the OS may refuse it
  mappings().add(aligned, bytes);
  return p;
}

// Buffers up to kLargestCarvedBytes are carved one after another out of shared
// chunks, so a small matrix, and the many copies of a bench rotation, sit in huge
// pages without a mapping each. Larger buffers get a mapping of their own, rounded up
// to whole huge pages (a partial huge page at the end would be backed by ordinary
// ones), so that one freed gives its memory back at once. While weights are packed
// (PackedWeightMemory), buffers of any size are carved back to back out of chunks of
// their own, at least kPackedChunkBytes each, and a large buffer's last huge page is
// shared with the next one instead of left part empty. A chunk is unmapped when the
// last buffer carved from it is freed.
struct Chunk {
  std::size_t bytes = 0;  // mapped
  std::size_t used = 0;   // bytes carved, from the start
  std::size_t live = 0;   // buffers carved and not yet freed
};

constexpr std::size_t kPackedChunkBytes = std::size_t{256} << 20;

class ChunkPool {
 public:
  void* carve(std::size_t bytes, bool packed) {
    const std::size_t n = round_up(bytes, 64);
    std::lock_guard<std::mutex> lock(mutex_);
    std::uintptr_t& current = packed ? packed_current_ : current_;
    auto it = chunks_.find(current);
    if (it == chunks_.end() || it->second.used + n > it->second.bytes) {
      const std::size_t size = packed ? std::max(kPackedChunkBytes, round_up(n, kHugePageBytes)) : kWeightChunkBytes;
      void* base = map_huge_aligned(size);
      if (!base) return nullptr;
      current = reinterpret_cast<std::uintptr_t>(base);
      it = chunks_.emplace(current, Chunk{size, 0, 0}).first;
    }
    void* p = reinterpret_cast<void*>(it->first + it->second.used);
    it->second.used += n;
    ++it->second.live;
    return p;
  }

  // False when `p` was not carved from a chunk (a buffer with a mapping of its own).
  bool release(void* p) {
    const auto a = reinterpret_cast<std::uintptr_t>(p);
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = chunks_.upper_bound(a);
    if (it == chunks_.begin()) return false;
    --it;
    if (a >= it->first + it->second.bytes) return false;
    if (--it->second.live > 0) return true;
    mappings().remove(it->first);
    munmap(reinterpret_cast<void*>(it->first), it->second.bytes);
    if (it->first == current_) current_ = 0;
    if (it->first == packed_current_) packed_current_ = 0;
    chunks_.erase(it);
    return true;
  }

  std::size_t count() {
    std::lock_guard<std::mutex> lock(mutex_);
    return chunks_.size();
  }

  // Each chunk's carved part, by base address.
  std::map<std::uintptr_t, std::size_t> carved() {
    std::lock_guard<std::mutex> lock(mutex_);
    std::map<std::uintptr_t, std::size_t> spans;
    for (const auto& [base, chunk] : chunks_) spans[base] = chunk.used;
    return spans;
  }

 private:
  std::mutex mutex_;
  std::map<std::uintptr_t, Chunk> chunks_;  // by base address
  std::uintptr_t current_ = 0;              // the chunk small buffers are carved from
  std::uintptr_t packed_current_ = 0;       // the chunk packed buffers are carved from
};

ChunkPool& chunk_pool() {
  static ChunkPool* pool = new ChunkPool;  // never destroyed: buffers may outlive statics
  return *pool;
}
#endif

}  // namespace

std::string huge_pages_setting_error() {
  const char* v = std::getenv(kHugePagesEnv);
  if (!v || std::string_view(v) == "on" || std::string_view(v) == "off") return {};
  return std::string(kHugePagesEnv) + "='" + v + "': expected on or off";
}

void* alloc_weight_memory(std::size_t bytes) {
  if (bytes == 0) bytes = 1;
#if defined(__linux__)
  const bool packed = packing_scopes().load() > 0;
  if (packed || bytes <= kLargestCarvedBytes) return chunk_pool().carve(bytes, packed);
  return map_huge_aligned(round_up(bytes, kHugePageBytes));
#else
  return std::aligned_alloc(64, round_up(bytes, 64));
#endif
}

void free_weight_memory(void* p, std::size_t bytes) {
  if (!p) return;
  if (bytes == 0) bytes = 1;
#if defined(__linux__)
  // Carved, whatever its size when it was packed; else a mapping of its own.
  if (chunk_pool().release(p)) return;
  mappings().remove(reinterpret_cast<std::uintptr_t>(p));
  munmap(p, round_up(bytes, kHugePageBytes));
#else
  std::free(p);
#endif
}

PackedWeightMemory::PackedWeightMemory() { packing_scopes().fetch_add(1); }
PackedWeightMemory::~PackedWeightMemory() { packing_scopes().fetch_sub(1); }

std::size_t weight_memory_chunks() {
#if defined(__linux__)
  return chunk_pool().count();
#else
  return 0;
#endif
}

std::vector<std::span<const std::byte>> weight_memory_spans() {
  std::vector<std::span<const std::byte>> out;
#if defined(__linux__)
  const auto carved = chunk_pool().carved();
  for (const auto& [base, bytes] : mappings().spans()) {
    const auto chunk = carved.find(base);
    const std::size_t written = chunk == carved.end() ? bytes : chunk->second;
    if (written > 0) out.emplace_back(reinterpret_cast<const std::byte*>(base), written);
  }
#endif
  return out;
}

void advise_huge_pages(void* p, std::size_t bytes) {
#if defined(__linux__)
  const auto start = reinterpret_cast<std::uintptr_t>(p);
  const std::uintptr_t first = round_up(start, kHugePageBytes);
  const std::uintptr_t last = (start + bytes) / kHugePageBytes * kHugePageBytes;
  if (last > first)
    madvise(reinterpret_cast<void*>(first), last - first, page_advice());
#else
  (void)p, (void)bytes;
#endif
}

double huge_page_share(const void* p, std::size_t bytes) {
  if (bytes == 0) return 0;
  std::FILE* f = std::fopen("/proc/self/smaps", "r");
  if (!f) return -1;
  const auto lo = reinterpret_cast<std::uintptr_t>(p), hi = lo + bytes;
  // Each mapping's header line ("start-end perms ...") is followed by its counters;
  // AnonHugePages of a mapping that overlaps the range counts in proportion to the
  // overlap (a mapping the range covers only in part is not split by the kernel).
  std::uintptr_t vma_lo = 0, vma_hi = 0;
  double huge = 0;
  char line[512];
  while (std::fgets(line, sizeof line, f)) {
    unsigned long a = 0, b = 0, kib = 0;
    char dash = 0;
    if (std::sscanf(line, "%lx%c%lx", &a, &dash, &b) == 3 && dash == '-') {
      vma_lo = a, vma_hi = b;
    } else if (std::sscanf(line, "AnonHugePages: %lu kB", &kib) == 1 && kib > 0) {
      const std::uintptr_t o_lo = std::max<std::uintptr_t>(lo, vma_lo), o_hi = std::min<std::uintptr_t>(hi, vma_hi);
      if (o_hi > o_lo) huge += static_cast<double>(kib) * 1024.0 * static_cast<double>(o_hi - o_lo) / (vma_hi - vma_lo);
    }
  }
  std::fclose(f);
  return std::min(1.0, huge / static_cast<double>(bytes));
}

double weight_memory_huge_page_share() {
#if defined(__linux__)
  std::FILE* f = std::fopen("/proc/self/smaps", "r");
  if (!f) return -1;
  // Rss and AnonHugePages of each mapping, in proportion to its overlap with weight
  // memory (the kernel may merge neighbouring mappings with the same flags into one).
  double rss = 0, huge = 0, share = 0;
  char line[512];
  while (std::fgets(line, sizeof line, f)) {
    unsigned long a = 0, b = 0, kib = 0;
    char dash = 0;
    if (std::sscanf(line, "%lx%c%lx", &a, &dash, &b) == 3 && dash == '-') {
      share = b > a ? static_cast<double>(mappings().overlap(a, b)) / static_cast<double>(b - a) : 0.0;
    } else if (share > 0 && std::sscanf(line, "Rss: %lu kB", &kib) == 1) {
      rss += share * static_cast<double>(kib);
    } else if (share > 0 && std::sscanf(line, "AnonHugePages: %lu kB", &kib) == 1) {
      huge += share * static_cast<double>(kib);
    }
  }
  std::fclose(f);
  return rss > 0 ? std::min(1.0, huge / rss) : 0.0;
#else
  return -1;
#endif
}

namespace {

// A "Key:   N kB" line of /proc/self/status, in bytes; -1 when absent.
std::int64_t status_kib_field(const char* key) {
  std::FILE* f = std::fopen("/proc/self/status", "r");
  if (!f) return -1;
  const std::size_t key_len = std::string_view(key).size();
  std::int64_t bytes = -1;
  char line[256];
  while (std::fgets(line, sizeof line, f)) {
    unsigned long kib = 0;
    if (std::string_view(line).substr(0, key_len) == key && line[key_len] == ':' &&
        std::sscanf(line + key_len + 1, " %lu kB", &kib) == 1) {
      bytes = static_cast<std::int64_t>(kib) * 1024;
      break;
    }
  }
  std::fclose(f);
  return bytes;
}

}  // namespace

std::int64_t resident_bytes() { return status_kib_field("VmRSS"); }
std::int64_t peak_resident_bytes() { return status_kib_field("VmHWM"); }

bool reset_peak_resident() {
  std::FILE* f = std::fopen("/proc/self/clear_refs", "w");
  if (!f) return false;
  const bool written = std::fputs("5", f) >= 0;
  return std::fclose(f) == 0 && written;
}

WeightMemory::WeightMemory(std::size_t bytes) : data_(alloc_weight_memory(bytes)), bytes_(bytes) {
  if (!data_) throw std::bad_alloc();
}

WeightMemory& WeightMemory::operator=(WeightMemory&& o) noexcept {
  if (this != &o) {
    free_weight_memory(data_, bytes_);
    data_ = std::exchange(o.data_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
  }
  return *this;
}

}  // namespace qmv
