// The prefetch distance of the AVX2 row-interleaved K-quant loops' _pf4k kernels: each
// weight stream prefetched 4096 bytes ahead instead of kPrefetchBytes (2048).
//
// Which distance is best depends on where the threads run, not only on the CPU. With
// the two threads on cores that share a last-level cache, 2048 is best; on cores that do
// not (each its own path to memory, read about 1.6x faster), one core must keep about
// twice as many bytes in flight to read at its share of the peak, and 4096 ahead reads
// the Q4_K matrices 1.13-1.14x faster than 2048, at 2% less where the cache is shared
// (results/amd-zen5-2c/prefetch-distance.csv). A host may move the threads between the
// two every few minutes, so both distances are kernels, and `auto` picks at the read
// speed the memory runs at when a decode starts (harness/auto_plan.h).
#pragma once

inline constexpr int kFarPrefetchBytes = 4096;
