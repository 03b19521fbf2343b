// Deliberately wrong kernels, registered only in the test binary: the check must
// catch each of them, or it proves nothing. Each runs the real scalar reference and
// then damages its output in one characteristic way. And one deliberately slow but
// correct kernel, which the performance gate must catch.
#include <vector>

#include "kernels/kernel.h"
#include "kernels/registry.h"

namespace {

qmv::Status run_reference(const qmv::MatVecArgs& a) {
  const qmv::KernelSpec* ref = qmv::global_registry().find("q4_K.cpu.scalar_f32");
  return ref ? ref->run(a) : qmv::Status::Error("q4_K.cpu.scalar_f32 not registered");
}

// Row r gets the result of row r+1: the classic indexing slip.
qmv::Status run_off_by_one_row(const qmv::MatVecArgs& a) {
  if (auto st = run_reference(a); !st.ok()) return st;
  const float first = a.y[0];
  for (std::int64_t r = 0; r + 1 < a.shape.rows; ++r) a.y[r] = a.y[r + 1];
  a.y[a.shape.rows - 1] = first;
  return qmv::Status::Ok();
}

// Forgets the last output element (a remainder loop that never runs).
qmv::Status run_unwritten_last(const qmv::MatVecArgs& a) {
  std::vector<float> full(static_cast<std::size_t>(a.shape.rows));
  qmv::MatVecArgs tmp = a;
  tmp.y = full.data();
  if (auto st = run_reference(tmp); !st.ok()) return st;
  for (std::int64_t r = 0; r + 1 < a.shape.rows; ++r) a.y[r] = full[static_cast<std::size_t>(r)];
  return qmv::Status::Ok();
}

// One element off by 1%: a subtle arithmetic slip the tight kernel bounds must see.
qmv::Status run_slightly_wrong(const qmv::MatVecArgs& a) {
  if (auto st = run_reference(a); !st.ok()) return st;
  a.y[a.shape.rows / 2] *= 1.01f;
  return qmv::Status::Ok();
}

qmv::KernelRecord wrong(const char* name, qmv::Status (*run)(const qmv::MatVecArgs&)) {
  return qmv::cpu_matvec_kernel(name, qmv::WeightType::Q4_K, qmv::ActFormat::F32, run,
                                "test-only deliberately wrong kernel");
}

// The AVX2 f32 kernel's result, computed eight times over: right, and 8x slower.
qmv::Status run_slowed(const qmv::MatVecArgs& a) {
  const qmv::KernelSpec* fast = qmv::global_registry().find("q4_K.cpu.avx2_f32");
  if (!fast) return qmv::Status::Error("q4_K.cpu.avx2_f32 not registered");
  for (int i = 0; i < 8; ++i)
    if (auto st = fast->run(a); !st.ok()) return st;
  return qmv::Status::Ok();
}

qmv::Status run_batch_reference(const qmv::MatVecArgs& a) {
  const qmv::KernelSpec* ref = qmv::global_registry().find("q4_K.cpu.scalar_batch_f32");
  return ref ? ref->run(a) : qmv::Status::Error("q4_K.cpu.scalar_batch_f32 not registered");
}

// A batch kernel that ignores its last vector: column n-1 gets column 0's result (a
// loop over vectors that never advances its pointer).
qmv::Status run_batch_wrong_column(const qmv::MatVecArgs& a) {
  if (auto st = run_batch_reference(a); !st.ok()) return st;
  const std::int64_t rows = a.shape.rows;
  for (std::int64_t r = 0; r < rows; ++r) a.y[(a.n - 1) * rows + r] = a.y[r];
  return qmv::Status::Ok();
}

// A batch kernel that never writes its last vector's outputs (a count off by one).
qmv::Status run_batch_unwritten_column(const qmv::MatVecArgs& a) {
  qmv::MatVecArgs fewer = a;
  fewer.n = a.n - 1;
  return fewer.n > 0 ? run_batch_reference(fewer) : qmv::Status::Ok();
}

qmv::KernelRecord wrong_batch(const char* name, qmv::Status (*run)(const qmv::MatVecArgs&)) {
  return qmv::cpu_batch_kernel(name, qmv::WeightType::Q4_K, qmv::ActFormat::F32, run, 4,
                               "test-only deliberately wrong batch kernel");
}

}  // namespace

QMV_REGISTER_KERNEL(wrong_batch("test.q4_K.batch_wrong_column", run_batch_wrong_column));
QMV_REGISTER_KERNEL(wrong_batch("test.q4_K.batch_unwritten_column", run_batch_unwritten_column));
QMV_REGISTER_KERNEL(qmv::cpu_matvec_kernel("test.q4_K.slowed", qmv::WeightType::Q4_K, qmv::ActFormat::F32,
                                           run_slowed, "test-only deliberately slow kernel (q4_K.cpu.avx2_f32 x8)",
                                           qmv::CpuFeature::AVX2 | qmv::CpuFeature::FMA | qmv::CpuFeature::F16C));
QMV_REGISTER_KERNEL(wrong("test.q4_K.off_by_one_row", run_off_by_one_row));
QMV_REGISTER_KERNEL(wrong("test.q4_K.unwritten_last", run_unwritten_last));
QMV_REGISTER_KERNEL(wrong("test.q4_K.slightly_wrong", run_slightly_wrong));
