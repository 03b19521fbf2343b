// Q4_K weights x Q8_K activations, AVX-512 VNNI, four rows at a time: each 64-byte
// activation vector is loaded once per super-block and fed to the vpdpbusd of four
// rows, whose next super-blocks are prefetched in software (kPrefetchBlocks ahead).
// The math per row is that of q4_K.cpu.avx512vnni_q8k (q4_K.h); what
// the row sharing gains over it: results/intel-xeon-2c/default.csv.
//
// Which four rows: a tile of n rows is cut into four contiguous quarters of q = n/4
// rows, and step k takes row k of each quarter. Each of the four weight streams then
// walks consecutive rows (one long sequential stream, and its prefetch simply runs on
// into the stream's next row), and the four streams lie in different pages. Four
// adjacent rows instead put the four streams in the same few pages, which is slower on
// cold weights, the more so the shorter the rows. (A likely reason, not verified: the
// hardware prefetcher follows streams within a 4 KiB page and keeps more requests in
// flight for four far-apart streams.)
// Rows left over (n % 4, and tiles or calls with fewer than four rows) take the
// one-row path. q4_K.cpu.avx512vnni_x2_q8k is the same with two streams.
#include "q4_K.h"

QMV_REGISTER_KERNEL(qmv::cpu_matvec_kernel(
    "q4_K.cpu.avx512vnni_x4_q8k", qmv::WeightType::Q4_K, qmv::ActFormat::Q8_K,
    qmv::q4k_vnni::run_rows_in_parts<4>,
    "Q4_K x Q8_K, AVX-512 VNNI, four rows (one per tile quarter) share each activation "
    "load, software prefetch of the four weight streams; rows % 4 by the one-row path",
    qmv::q4k_vnni::kFeatures));
