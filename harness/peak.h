// The machine's measured memory bandwidth: the roofline every bench row is a share of
// (CPU: a STREAM-like read; GPU: a device-to-device copy).
#pragma once

#include <cstddef>
#include <string>

namespace qmv {

struct PeakResult {
  int threads = 0;
  std::size_t bytes = 0;  // size of the buffer read
  double best_gbps = 0;   // best of the repetitions (the STREAM convention)
  double median_gbps = 0;
  int repetitions = 0;
};

// Reads a buffer several times the last-level cache with `threads` OpenMP threads,
// each summing its own contiguous slice (a STREAM-like read, no writes).
PeakResult measure_read_bandwidth(int threads, int repetitions = 7);

// A buffer size that defeats the caches: 4x the last-level cache, at least 1 GiB,
// at most a quarter of the RAM.
std::size_t cold_buffer_bytes();

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

}  // namespace qmv
