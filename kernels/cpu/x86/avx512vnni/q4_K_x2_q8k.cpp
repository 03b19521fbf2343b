// Q4_K weights x Q8_K activations, AVX512F/BW/VL and VNNI, two rows per step, one from each half
// of the row tile (run_rows_in_parts<2>, q4_K.h): each thread reads
// two weight streams, each walking consecutive rows of its half. A plain read reaches
// the peak with two streams per thread (the winning `read_loop` of
// results/intel-xeon-2c/peak.csv), and four streams of different pages read slower.
// Each 64-byte activation vector serves two rows per load; the activation stays in L1,
// so the extra loads cost little. Two rows against four, cold:
// results/intel-xeon-2c/default.csv.
#include "q4_K.h"

QMV_REGISTER_KERNEL(qmv::cpu_matvec_kernel(
    "q4_K.cpu.avx512vnni_x2_q8k", qmv::WeightType::Q4_K, qmv::ActFormat::Q8_K,
    qmv::q4k_vnni::run_rows_in_parts<2>,
    "Q4_K x Q8_K, AVX512 VNNI: each activation load serves two rows, one from each half "
    "of the row tile; both weight streams prefetched in software; an odd row by the one-row path",
    qmv::q4k_vnni::kFeatures));
