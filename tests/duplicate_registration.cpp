// Linked with every real kernel plus this file, which registers a name that already
// exists: the registry must report it as a start-up error, as qmvlab's main() does.
#include <gtest/gtest.h>

#include "kernels/kernel.h"
#include "kernels/registry.h"

namespace {

qmv::KernelSpec impostor() {
  qmv::KernelSpec s;
  s.name = "q4_K.cpu.scalar";
  s.supports = qmv::supports_superblock_cols;
  s.run = [](const qmv::MatVecArgs&) { return qmv::Status::Ok(); };
  return s;
}

}  // namespace

QMV_REGISTER_KERNEL(impostor());

TEST(Registry, DuplicateNameIsAStartupError) {
  const auto& errors = qmv::registry_startup_errors();
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_NE(errors[0].find("registered twice: q4_K.cpu.scalar"), std::string::npos) << errors[0];
}
