// Q6_K weights x Q8_K activations, AVX2, integer dot in the ggml style, one row at a
// time: the math is kquant.h's q6k_dot_rows (shared with
// q6_K.cpu.avx2_x4_q8k). Per half super-block four vectors of unsigned 6-bit quants
// are rebuilt (nibble | two qh bits << 4), vpmaddubsw with the activations, vpmaddwd
// with the int8 sub-block scales; the -32 centring comes off once per super-block via
// the Q8_K bsums; one float accumulator, one horizontal sum per row.
#include "kquant.h"

namespace {

// Software prefetch distance and level. Rows are contiguous and computed in order, so
// the stream runs on into the next row. Without it each new 4 KiB page, where the
// hardware streamer stops, stalls on a demand miss.
constexpr std::int64_t kPrefetchBytes = 8 * sizeof(qmv::BlockQ6K);
constexpr auto kPrefetchHint = _MM_HINT_T0;

constexpr auto dot1 = qmv::kq_avx2::q6k_dot_rows<1, kPrefetchBytes, kPrefetchHint>;

}  // namespace

QMV_REGISTER_KERNEL(qmv::cpu_matvec_kernel(
    "q6_K.cpu.avx2_q8k", qmv::WeightType::Q6_K, qmv::ActFormat::Q8_K,
    qmv::kq_avx2::run_one_row<qmv::BlockQ6K, dot1>,
    "Q6_K x Q8_K, AVX2: 6-bit quants rebuilt as u8, maddubs + madd(int8 scales), "
    "-32 centring via bsums once per block, float accumulator, one hsum per row, prefetch",
    qmv::CpuFeature::AVX2 | qmv::CpuFeature::FMA | qmv::CpuFeature::F16C));
