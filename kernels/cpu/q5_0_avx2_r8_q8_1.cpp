// Q5_0 weights in the row-interleaved layout x Q8_1 activations, AVX2, one or two
// weight streams per thread (legacy_r8_avx2.h).
#include "legacy_r8_avx2.h"

namespace {

template <int NG>
qmv::KernelRecord record(const char* name, const char* description) {
  qmv::KernelRecord r = qmv::cpu_matvec_kernel(
      name, qmv::WeightType::Q5_0, qmv::ActFormat::Q8_1, qmv::interleave::run<qmv::interleave::BlockQ5_0x8, NG>,
      description, qmv::CpuFeature::AVX2 | qmv::CpuFeature::FMA | qmv::CpuFeature::F16C);
  r.prepare = qmv::interleave::prepare_q5_0x8;
  r.release = qmv::interleave::release_q5_0x8;
  return r;
}

}  // namespace

QMV_REGISTER_KERNEL(record<1>(
    "q5_0.cpu.avx2_r8_q8_1",
    "Q5_0 x Q8_1, AVX2, weights repacked once into eight-row interleaved blocks (fifth bits "
    "rearranged for one shift per register): one float "
    "lane per row, eight rows' scales in one conversion, one weight stream per thread"));
QMV_REGISTER_KERNEL(record<2>(
    "q5_0.cpu.avx2_r8x2_q8_1",
    "Q5_0 x Q8_1, AVX2, eight-row interleaved blocks as avx2_r8_q8_1, two weight streams "
    "per thread (the two halves of its rows) sharing each activation load"));
