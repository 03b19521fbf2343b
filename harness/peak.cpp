#include "harness/peak.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include "harness/machine.h"

namespace qmv {

std::size_t cold_buffer_bytes() {
  const MachineInfo& m = machine_info();
  std::size_t bytes = std::max<std::size_t>(4 * m.llc_bytes, std::size_t(1) << 30);
  if (m.ram_bytes) bytes = std::min(bytes, m.ram_bytes / 4);
  return bytes;
}

namespace {

// Eight independent accumulators so the sum is never latency-bound; compiled for the
// widest vector unit the CPU has (ifunc dispatch), so the loads, not the adds, bound it.
// A software prefetch runs ahead of the loads: the hardware prefetchers stop at 4 KiB
// page boundaries, and the best kernels prefetch, so a peak without it would be one
// they beat.
constexpr std::size_t kPrefetchWords = 1024;  // 8 KiB ahead: 4 KiB and 16 KiB measured lower

__attribute__((target_clones("avx512f", "avx2", "default"))) std::uint64_t
sum_words(const std::uint64_t* p, std::size_t n) {
  std::uint64_t acc[8] = {};
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __builtin_prefetch(p + std::min(i + kPrefetchWords, n - 1));
    for (int k = 0; k < 8; ++k) acc[k] += p[i + k];
  }
  for (; i < n; ++i) acc[0] += p[i];
  std::uint64_t s = 0;
  for (auto a : acc) s += a;
  return s;
}

}  // namespace

PeakResult measure_read_bandwidth(int threads, int repetitions) {
  const std::size_t words = cold_buffer_bytes() / sizeof(std::uint64_t);
  std::unique_ptr<std::uint64_t[]> buf(new std::uint64_t[words]);
  // First touch by the threads that will read it, so pages land on their node.
#pragma omp parallel for num_threads(threads) schedule(static)
  for (std::size_t i = 0; i < words; ++i) buf[i] = i;
  std::vector<double> gbps;
  volatile std::uint64_t sink = 0;
  for (int r = 0; r < repetitions; ++r) {
    std::uint64_t total = 0;
    const auto t0 = std::chrono::steady_clock::now();
#pragma omp parallel num_threads(threads) reduction(+ : total)
    {
      const std::size_t nt = static_cast<std::size_t>(omp_get_num_threads());
      const std::size_t t = static_cast<std::size_t>(omp_get_thread_num());
      const std::size_t begin = words * t / nt, end = words * (t + 1) / nt;
      total += sum_words(buf.get() + begin, end - begin);
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    sink = sink + total;
    gbps.push_back(static_cast<double>(words * sizeof(std::uint64_t)) / s / 1e9);
  }
  std::sort(gbps.begin(), gbps.end());
  return {threads, words * sizeof(std::uint64_t), gbps.back(), gbps[gbps.size() / 2], repetitions};
}

}  // namespace qmv
