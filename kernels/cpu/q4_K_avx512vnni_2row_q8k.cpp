// Q4_K weights x Q8_K activations, AVX-512 VNNI, two rows at a time: q4_K.cpu.
// avx512vnni_4row_q8k with the row tile cut into halves instead of quarters, so each
// thread reads two weight streams, each walking consecutive rows of its half. A plain
// read reaches the peak with two streams per thread (the winning `read_loop` of
// results/intel-xeon-2c/peak.csv), and four streams of different pages read slower;
// sharing each 64-byte activation vector between two rows instead of four costs little,
// as the activation stays in L1. Four rows against two, cold:
// results/intel-xeon-2c/default.csv.
#include "q4_K_avx512vnni_common.h"

QMV_REGISTER_KERNEL(qmv::cpu_matvec_kernel(
    "q4_K.cpu.avx512vnni_2row_q8k", qmv::WeightType::Q4_K, qmv::ActFormat::Q8_K,
    qmv::q4k_vnni::run_rows_in_parts<2>,
    "Q4_K x Q8_K, AVX-512 VNNI, two rows (one per tile half) share each activation load, "
    "software prefetch of the two weight streams; an odd row by the one-row path",
    qmv::q4k_vnni::kFeatures));
