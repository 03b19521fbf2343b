// Q5_K weights x Q8_K activations, AVX2 integer dot in the ggml style, one row at a
// time: the math is kquant.h's q5k_dot_rows (shared with
// q5_K.cpu.avx2_x4_q8k). Per pair of sub-blocks (32 bytes of qs) the low and high
// nibbles get their fifth bits (bits 2g, 2g+1 of the 32 qh bytes) or-ed in at bit 4;
// vpmaddubsw with the activations and vpmaddwd with the sub-block scale give the
// scaled sub-block dot; the mins come off via the Q8_K bsums, and the float scales
// are applied once per super-block.
#include "kquant.h"

namespace {

// Software prefetch distance in bytes ahead of the block being read, and level:
// into L2 (T1), as into L1 it evicts the activations on long rows. Without it the
// kernel stays far below the read bandwidth on cold weights; 1 to 3 KB ahead all help.
// One row is a sequential stream and rows are contiguous, so near a row's end this
// fetches the start of the next row.
constexpr std::int64_t kPrefetchBytes = 3072;

constexpr auto dot1 = qmv::kq_avx2::q5k_dot_rows<1, kPrefetchBytes, _MM_HINT_T1>;

}  // namespace

QMV_REGISTER_KERNEL(qmv::cpu_matvec_kernel(
    "q5_K.cpu.avx2_q8k", qmv::WeightType::Q5_K, qmv::ActFormat::Q8_K,
    qmv::kq_avx2::run_one_row<qmv::BlockQ5K, dot1>,
    "Q5_K x Q8_K, AVX2: 5-bit quants (nibble + 16*qh bit), maddubs + madd by sub-block "
    "scale, mins via bsums, one horizontal sum per row",
    qmv::CpuFeature::AVX2 | qmv::CpuFeature::FMA | qmv::CpuFeature::F16C));
