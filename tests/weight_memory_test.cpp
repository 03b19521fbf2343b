// Weight memory (kernels/weight_memory.h): large buffers on their own 2 MiB-aligned
// mapping, small ones from the heap, every byte writable and read back, and the
// huge-page share it reports bounded and of the range asked about.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <random>
#include <vector>

#include "kernels/weight_memory.h"
#include "tests/cli_run.h"

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
  std::random_device rd;
  for (std::size_t bytes : {kHugePageBytes, 3 * kHugePageBytes + 4160, std::size_t{40} << 20}) {
    SCOPED_TRACE(bytes);
    void* p = alloc_weight_memory(bytes);
    ASSERT_NE(p, nullptr);
#if defined(__linux__)
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p) % kHugePageBytes, 0u);
#endif
    expect_holds_random_words(p, bytes, rd());
    const double share = huge_page_share(p, bytes);
    // Whether the OS grants huge pages is its choice; the share must still be one.
    if (share >= 0) EXPECT_LE(share, 1.0);
    free_weight_memory(p, bytes);
  }
}

TEST(WeightMemory, SmallBuffersAreCacheLineAligned) {
  std::random_device rd;
  std::vector<void*> held;
  for (std::size_t bytes : {std::size_t{1}, std::size_t{64}, std::size_t{4096} + 8, kHugePageBytes - 64}) {
    SCOPED_TRACE(bytes);
    void* p = alloc_weight_memory(bytes);
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p) % 64, 0u);
    expect_holds_random_words(p, bytes, rd());
    free_weight_memory(p, bytes);
  }
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
  expect_holds_random_words(c.data(), c.bytes(), std::random_device{}());
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
// The share is of the range asked about: memory the process never mapped holds none.
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
