#include "harness/peak.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include "harness/machine.h"
#include "kernels/cpu_features.h"
#include "kernels/kernel.h"
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

namespace {

// Eight independent accumulators so the sum is never latency-bound; compiled for the
// widest vector unit the CPU has (and the ISA mask allows), so the loads, not the adds,
// bound it.
// A software prefetch runs ahead of the loads: the hardware prefetchers stop at 4 KiB
// page boundaries, and the best kernels prefetch, so a peak without it would be one
// they beat.
constexpr std::size_t kPrefetchWords = 1024;  // 8 KiB ahead: 4 KiB and 16 KiB measured lower

// One loop, compiled three times; the widest the CPU and the ISA mask allow runs.
template <int Isa>
[[gnu::always_inline]] inline std::uint64_t sum_words_loop(const std::uint64_t* p, std::size_t n) {
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

__attribute__((target("avx512f"))) std::uint64_t sum_words_avx512(const std::uint64_t* p, std::size_t n) {
  return sum_words_loop<512>(p, n);
}
__attribute__((target("avx2"))) std::uint64_t sum_words_avx2(const std::uint64_t* p, std::size_t n) {
  return sum_words_loop<256>(p, n);
}
std::uint64_t sum_words_plain(const std::uint64_t* p, std::size_t n) { return sum_words_loop<0>(p, n); }

using SumWords = std::uint64_t (*)(const std::uint64_t*, std::size_t);
SumWords sum_words_for_this_cpu() {
  if (!missing_cpu_features(static_cast<std::uint32_t>(CpuFeature::AVX512F))) return sum_words_avx512;
  if (!missing_cpu_features(static_cast<std::uint32_t>(CpuFeature::AVX2))) return sum_words_avx2;
  return sum_words_plain;
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
  const SumWords sum_words = sum_words_for_this_cpu();
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

const GpuPeakResult& gpu_peak() {
  static const GpuPeakResult peak = measure_gpu_peaks(7);
  return peak;
}

}  // namespace qmv
