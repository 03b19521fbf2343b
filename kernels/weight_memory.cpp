#include "weight_memory.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
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

#if defined(__linux__)
int page_advice() { return huge_pages_wanted() ? MADV_HUGEPAGE : MADV_NOHUGEPAGE; }
#endif

bool mapped_on_its_own(std::size_t bytes) {
#if defined(__linux__)
  return bytes >= kHugePageBytes;
#else
  (void)bytes;
  return false;
#endif
}

}  // namespace

std::string huge_pages_setting_error() {
  const char* v = std::getenv(kHugePagesEnv);
  if (!v || std::string_view(v) == "on" || std::string_view(v) == "off") return {};
  return std::string(kHugePagesEnv) + "='" + v + "': expected on or off";
}

void* alloc_weight_memory(std::size_t bytes) {
  if (bytes == 0) bytes = 1;
  if (!mapped_on_its_own(bytes)) return std::aligned_alloc(64, round_up(bytes, 64));
#if defined(__linux__)
  // Map one huge page more than asked, keep the 2 MiB-aligned part and give back the
  // head and the tail, so the mapping starts on a huge-page boundary.
  const std::size_t length = round_up(bytes, 4096);
  const std::size_t span = length + kHugePageBytes;
  void* raw = mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return nullptr;
  const auto start = reinterpret_cast<std::uintptr_t>(raw);
  const std::uintptr_t aligned = round_up(start, kHugePageBytes);
  if (aligned > start) munmap(raw, aligned - start);
  const std::uintptr_t end = start + span, used_end = aligned + length;
  if (end > used_end) munmap(reinterpret_cast<void*>(used_end), end - used_end);
  void* p = reinterpret_cast<void*>(aligned);
  madvise(p, length, page_advice());  // advice: the OS may refuse it
  return p;
#else
  return nullptr;
#endif
}

void free_weight_memory(void* p, std::size_t bytes) {
  if (!p) return;
  if (bytes == 0) bytes = 1;
  if (!mapped_on_its_own(bytes)) {
    std::free(p);
    return;
  }
#if defined(__linux__)
  munmap(p, round_up(bytes, 4096));
#endif
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
