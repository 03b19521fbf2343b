// The machine's measured memory read bandwidth: the roofline every CPU bench row is
// a share of.
#pragma once

#include <cstddef>

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

}  // namespace qmv
