// Weight memory (kernels/weight_memory.h): large buffers on their own 2 MiB-aligned
// mapping, small ones carved out of shared chunks, all of it in whole huge pages
// advised as such, every byte writable and read back, chunks returned when their last
// buffer goes, and the huge-page share it reports bounded and of the range asked about.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "kernels/weight_memory.h"
#include "tests/cli_run.h"
#include "tests/test_seed.h"

namespace qmv {
namespace {

// Fills [p, p + bytes) with random words and checks they read back: a buffer shorter
// than asked, or one freed under us, fails (or faults) here.
void expect_holds_random_words(void* p, std::size_t bytes, std::uint64_t seed) {
  auto* w = static_cast<std::uint64_t*>(p);
  const std::size_t n = bytes / sizeof(std::uint64_t);
  std::mt19937_64 rng(seed);
  for (std::size_t i = 0; i < n; ++i) w[i] = rng();
  rng.seed(seed);
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < n; ++i) wrong += w[i] != rng();
  EXPECT_EQ(wrong, 0u);
}

TEST(WeightMemory, LargeBuffersStartOnAHugePageAndHoldEveryByte) {
  for (std::size_t bytes : {kLargestCarvedBytes + 64, kLargestCarvedBytes + 3 * kHugePageBytes + 4160,
                            std::size_t{40} << 20}) {
    SCOPED_TRACE(bytes);
    void* p = alloc_weight_memory(bytes);
    ASSERT_NE(p, nullptr);
#if defined(__linux__)
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p) % kHugePageBytes, 0u);
#endif
    expect_holds_random_words(p, bytes, qmv::testing::fresh_seed());
    const double share = huge_page_share(p, bytes);
    // Whether the OS grants huge pages is its choice; the share must still be one.
    if (share >= 0) {
      EXPECT_LE(share, 1.0);
    }
    free_weight_memory(p, bytes);
  }
}

// Buffers carved out of the same chunks must not overlap: each is filled while all
// are held, and each must still hold its own words after the others were written.
TEST(WeightMemory, SmallBuffersAreCacheLineAlignedAndApart) {
  std::mt19937_64 rng(qmv::testing::fresh_seed());
  struct Held {
    void* p;
    std::size_t bytes;
    std::uint64_t seed;
  };
  std::vector<Held> held;
  for (std::size_t bytes : {std::size_t{1}, std::size_t{64}, std::size_t{4096} + 8, kHugePageBytes - 64,
                            kHugePageBytes + 4160, kLargestCarvedBytes, std::size_t{300} << 10}) {
    void* p = alloc_weight_memory(bytes);
    ASSERT_NE(p, nullptr) << bytes;
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p) % 64, 0u) << bytes;
    held.push_back({p, bytes, rng()});
  }
  for (const Held& h : held) {
    auto* w = static_cast<std::uint64_t*>(h.p);
    std::mt19937_64 words(h.seed);
    for (std::size_t i = 0; i < h.bytes / sizeof(std::uint64_t); ++i) w[i] = words();
  }
  for (const Held& h : held) {
    SCOPED_TRACE(h.bytes);
    const auto* w = static_cast<const std::uint64_t*>(h.p);
    std::mt19937_64 words(h.seed);
    std::size_t wrong = 0;
    for (std::size_t i = 0; i < h.bytes / sizeof(std::uint64_t); ++i) wrong += w[i] != words();
    EXPECT_EQ(wrong, 0u);
  }
  std::shuffle(held.begin(), held.end(), rng);
  for (const Held& h : held) free_weight_memory(h.p, h.bytes);
}

TEST(WeightMemory, OwnerMovesAndFreesOnce) {
  WeightMemory a(5 * kHugePageBytes);
  void* p = a.data();
  ASSERT_NE(p, nullptr);
  WeightMemory b(std::move(a));
  EXPECT_EQ(a.data(), nullptr);
  EXPECT_EQ(b.data(), p);
  EXPECT_EQ(b.bytes(), 5 * kHugePageBytes);
  WeightMemory c(kHugePageBytes / 2);
  c = std::move(b);  // frees c's own buffer, takes b's
  EXPECT_EQ(c.data(), p);
  expect_holds_random_words(c.data(), c.bytes(), qmv::testing::fresh_seed());
}

// QMV_HUGE_PAGES takes on or off; anything else is refused before a command runs.
TEST(WeightMemory, TheCommandLineRefusesAnUnknownPagesSetting) {
  for (const char* ok : {"on", "off"}) {
    ::setenv(kHugePagesEnv, ok, 1);
    const testing::CliRun r = testing::qmvlab("list --machine");
    EXPECT_EQ(r.code, 0) << ok << ": " << r.output;
  }
  ::setenv(kHugePagesEnv, "of", 1);
  testing::expect_error("list --machine", "QMV_HUGE_PAGES='of': expected on or off");
  ::unsetenv(kHugePagesEnv);
}

#if defined(__linux__)
// The mapping of /proc/self/smaps that holds address `a`: its range and VmFlags line
// (empty when no mapping holds it).
struct Mapping {
  std::uintptr_t lo = 0, hi = 0;
  std::string flags;
};
Mapping mapping_holding(const void* a) {
  const auto addr = reinterpret_cast<std::uintptr_t>(a);
  std::FILE* f = std::fopen("/proc/self/smaps", "r");
  if (!f) return {};
  Mapping m, found;
  char line[512];
  while (std::fgets(line, sizeof line, f)) {
    unsigned long lo = 0, hi = 0;
    char dash = 0;
    if (std::sscanf(line, "%lx%c%lx", &lo, &dash, &hi) == 3 && dash == '-') {
      m = {lo, hi, ""};
    } else if (std::string(line).rfind("VmFlags:", 0) == 0 && addr >= m.lo && addr < m.hi) {
      found = m;
      found.flags = line;
    }
  }
  std::fclose(f);
  return found;
}

// Every buffer, small or large, lies in memory advised for huge pages (VmFlags "hg")
// that reaches a 2 MiB boundary past its last byte, so no part of it is left on a
// partial huge page the OS backs with ordinary pages.
TEST(WeightMemory, EveryBufferLiesInWholeHugePagesAdvisedForThem) {
  if (const char* v = std::getenv(kHugePagesEnv); v && std::string(v) == "off")
    GTEST_SKIP() << "QMV_HUGE_PAGES=off asks for ordinary pages";
  std::vector<std::size_t> sizes = {std::size_t{300} << 10, kHugePageBytes + 4160,
                                    kLargestCarvedBytes + kHugePageBytes + 4160};
  std::vector<void*> held;
  for (std::size_t bytes : sizes) {
    SCOPED_TRACE(bytes);
    void* p = alloc_weight_memory(bytes);
    ASSERT_NE(p, nullptr);
    held.push_back(p);
    const auto* first = static_cast<const std::uint8_t*>(p);
    for (const void* a : {static_cast<const void*>(first), static_cast<const void*>(first + bytes - 1)}) {
      const Mapping m = mapping_holding(a);
      ASSERT_NE(m.hi, 0u) << "no mapping holds the buffer";
      EXPECT_NE(m.flags.find(" hg"), std::string::npos) << m.flags;
    }
    const auto last = reinterpret_cast<std::uintptr_t>(first + bytes - 1);
    EXPECT_GE(mapping_holding(first + bytes - 1).hi, (last / kHugePageBytes + 1) * kHugePageBytes);
  }
  for (std::size_t i = 0; i < sizes.size(); ++i) free_weight_memory(held[i], sizes[i]);
}

// A chunk stays mapped while any buffer carved from it is held, and is given back to
// the OS with the last one.
TEST(WeightMemory, AChunkIsReturnedWithItsLastBuffer) {
  const std::size_t before = weight_memory_chunks();
  // Five buffers of a quarter chunk each cannot share one chunk: at least one is new.
  std::vector<void*> held;
  for (int i = 0; i < 5; ++i) {
    held.push_back(alloc_weight_memory(kLargestCarvedBytes));
    ASSERT_NE(held.back(), nullptr);
  }
  EXPECT_GT(weight_memory_chunks(), before);
  for (int i = 0; i < 4; ++i) free_weight_memory(held[i], kLargestCarvedBytes);
  EXPECT_GT(weight_memory_chunks(), before) << "the last buffer's chunk went while it was held";
  const Mapping m = mapping_holding(held[4]);
  EXPECT_NE(m.hi, 0u);
  expect_holds_random_words(held[4], kLargestCarvedBytes, 4);
  free_weight_memory(held[4], kLargestCarvedBytes);
  EXPECT_EQ(weight_memory_chunks(), before) << "a chunk outlived its last buffer";
  EXPECT_EQ(mapping_holding(held[4]).hi, 0u) << "the last buffer's chunk is still mapped";
}

// Packed, large buffers lie back to back in one mapping (no huge page left part empty
// between them), hold their bytes apart, and the mapping goes with the last of them;
// unpacked again, a large buffer has a mapping of its own.
TEST(WeightMemory, PackedBuffersLieBackToBackAndGoWithTheLast) {
  const std::size_t before = weight_memory_chunks();
  // Sizes that are no multiple of a huge page: alone, each would end in a part-empty one.
  const std::vector<std::size_t> sizes = {kLargestCarvedBytes + kHugePageBytes / 3, kLargestCarvedBytes + 4160,
                                          std::size_t{300} << 10};
  std::vector<std::uint8_t*> held;
  {
    const PackedWeightMemory packed;
    for (std::size_t bytes : sizes) {
      held.push_back(static_cast<std::uint8_t*>(alloc_weight_memory(bytes)));
      ASSERT_NE(held.back(), nullptr);
    }
  }
  EXPECT_EQ(held[1], held[0] + (sizes[0] + 63) / 64 * 64);
  EXPECT_EQ(held[2], held[1] + (sizes[1] + 63) / 64 * 64);
  EXPECT_EQ(mapping_holding(held[0]).lo, mapping_holding(held[2]).lo);
  EXPECT_EQ(weight_memory_chunks(), before + 1);
  for (std::size_t i = 0; i < sizes.size(); ++i) expect_holds_random_words(held[i], sizes[i], 11 + i);
  free_weight_memory(held[0], sizes[0]);
  free_weight_memory(held[2], sizes[2]);
  EXPECT_EQ(weight_memory_chunks(), before + 1) << "the mapping went while a buffer was held";
  expect_holds_random_words(held[1], sizes[1], 5);
  free_weight_memory(held[1], sizes[1]);
  EXPECT_EQ(weight_memory_chunks(), before);
  EXPECT_EQ(mapping_holding(held[1]).hi, 0u) << "the packed mapping outlived its last buffer";

  void* alone = alloc_weight_memory(sizes[0]);
  ASSERT_NE(alone, nullptr);
  EXPECT_EQ(weight_memory_chunks(), before) << "an unpacked large buffer was carved";
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(alone) % kHugePageBytes, 0u);
  free_weight_memory(alone, sizes[0]);
}

// The share is of the range asked about: memory the process never mapped holds none.
#if defined(__linux__)
// Whether [p, p + bytes) lies inside one of the spans.
bool inside_a_span(const std::vector<std::span<const std::byte>>& spans, const void* p, std::size_t bytes) {
  const auto* b = static_cast<const std::byte*>(p);
  return std::any_of(spans.begin(), spans.end(),
                     [&](const auto& s) { return b >= s.data() && b + bytes <= s.data() + s.size(); });
}

TEST(WeightMemory, TheSpansHoldEveryLiveBufferAndNotTheUncarvedRest) {
  std::mt19937_64 g(testing::fresh_seed());
  const std::size_t small = 4096 + g() % 65536, large = kLargestCarvedBytes + 4096 + g() % (1 << 20);
  WeightMemory a(small), b(large);
  std::size_t packed_bytes = 0;
  std::vector<WeightMemory> packed;
  {
    PackedWeightMemory packing;
    for (int i = 0; i < 3; ++i) packed.emplace_back(packed_bytes = 1 + g() % (3 << 20));
  }
  const auto spans = weight_memory_spans();
  EXPECT_TRUE(inside_a_span(spans, a.data(), a.bytes()));
  EXPECT_TRUE(inside_a_span(spans, b.data(), b.bytes()));
  for (const auto& p : packed) EXPECT_TRUE(inside_a_span(spans, p.data(), p.bytes()));
  // A packed chunk is 256 MiB mapped; its span ends where its last buffer does.
  const auto* last_end = static_cast<const std::byte*>(packed.back().data()) + packed_bytes;
  const bool ends_at_last = std::any_of(spans.begin(), spans.end(), [&](const auto& s) {
    return s.data() + s.size() >= last_end && s.data() + s.size() < last_end + 64;
  });
  EXPECT_TRUE(ends_at_last);
  for (const auto& s : spans) EXPECT_EQ(reinterpret_cast<std::uintptr_t>(s.data()) % 64, 0u);
}
#endif

TEST(WeightMemory, HugePageShareOfUnmappedRangeIsZero) {
  WeightMemory m(4 * kHugePageBytes);
  expect_holds_random_words(m.data(), m.bytes(), 7);
  const double share = huge_page_share(m.data(), m.bytes());
  ASSERT_GE(share, 0.0) << "/proc/self/smaps unreadable";
  EXPECT_LE(share, 1.0);
  // Address 0x1000 lies in no mapping of a Linux process (mmap_min_addr).
  EXPECT_EQ(huge_page_share(reinterpret_cast<const void*>(std::uintptr_t{0x1000}), 4096), 0.0);
}
#endif

}  // namespace
}  // namespace qmv
