// Q4_K weights x Q8_K activations, AVX2, the integer dot product in the ggml style,
// one row at a time: the math is kquant.h's q4k_dot_rows (shared with
// q4_K.cpu.avx2_x4_q8k). Per 32 weights, vpmaddubsw (unsigned nibbles x signed int8
// -> int16 pair sums) then vpmaddwd against the sub-block scale; the 6-bit scales and
// mins are unpacked once per super-block in vector registers, the min term is the mins
// times the Q8_K bsums by one vpmaddwd, and one float accumulator per row ends in one
// horizontal sum. The weight stream is prefetched kPrefetchBlocks super-blocks ahead
// (rows are consecutive, so near a row's end that is the start of the next row).
#include "kquant.h"

namespace {

// In super-blocks (144 bytes), for the reason given in q4_K_f32.cpp; 8 to 32
// blocks ahead are close, and 16 is among the best.
constexpr int kPrefetchBlocks = 16;

constexpr auto dot1 = qmv::kq_avx2::q4k_dot_rows<1, kPrefetchBlocks * sizeof(qmv::BlockQ4K), _MM_HINT_T0>;

}  // namespace

QMV_REGISTER_KERNEL(qmv::cpu_matvec_kernel(
    "q4_K.cpu.avx2_q8k", qmv::WeightType::Q4_K, qmv::ActFormat::Q8_K,
    qmv::kq_avx2::run_one_row<qmv::BlockQ4K, dot1>,
    "Q4_K x Q8_K, AVX2 ggml-style: maddubs nibbles x int8, madd with sub-block scales, "
    "mins via bsums, one float accumulator and one horizontal sum per row",
    qmv::CpuFeature::AVX2 | qmv::CpuFeature::FMA | qmv::CpuFeature::F16C));
