// Q4_1 weights in the row-interleaved layout x Q8_1 activations, AVX2, one or two
// weight streams per thread (legacy_r8_avx2.h).
#include "legacy_r8_avx2.h"

namespace {

template <int NG>
qmv::KernelRecord record(const char* name, const char* description) {
  qmv::KernelRecord r = qmv::cpu_matvec_kernel(
      name, qmv::WeightType::Q4_1, qmv::ActFormat::Q8_1, qmv::interleave::run<qmv::interleave::BlockQ4_1x8, NG>,
      description, qmv::CpuFeature::AVX2 | qmv::CpuFeature::FMA | qmv::CpuFeature::F16C);
  r.prepare = qmv::interleave::prepare_q4_1x8;
  r.release = qmv::interleave::release_q4_1x8;
  return r;
}

}  // namespace

QMV_REGISTER_KERNEL(record<1>(
    "q4_1.cpu.avx2_r8_q8_1",
    "Q4_1 x Q8_1, AVX2, weights repacked once into eight-row interleaved blocks (the m term "
    "one FMA per block for eight rows): one float "
    "lane per row, eight rows' scales in one conversion, one weight stream per thread"));
QMV_REGISTER_KERNEL(record<2>(
    "q4_1.cpu.avx2_r8x2_q8_1",
    "Q4_1 x Q8_1, AVX2, eight-row interleaved blocks as avx2_r8_q8_1, two weight streams "
    "per thread (the two halves of its rows) sharing each activation load"));
