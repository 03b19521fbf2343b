// Linked with every real kernel plus this file, which registers a name that already
// exists: the registry must report it as a start-up error, as qmvlab's main() does.
#include <gtest/gtest.h>

#include "kernels/kernel.h"
#include "kernels/registry.h"

namespace {

qmv::Status do_nothing(const qmv::MatVecArgs&) { return qmv::Status::Ok(); }

qmv::KernelRecord impostor() {
  return qmv::cpu_matvec_kernel("q4_K.cpu.scalar_f32", qmv::WeightType::Q4_K, qmv::ActFormat::F32,
                                do_nothing, "a second kernel with an existing name");
}

}  // namespace

QMV_REGISTER_KERNEL(impostor());

TEST(Registry, DuplicateNameIsAStartupError) {
  const auto& errors = qmv::registry_startup_errors();
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_NE(errors[0].find("registered twice: q4_K.cpu.scalar_f32"), std::string::npos) << errors[0];
}
