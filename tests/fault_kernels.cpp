// Kernels that fault on purpose, registered only in qmvlab_faults (qmvlab's own command
// line with these added): the isolated check must turn each fault into that kernel's
// failure and still check the others, and the plain check must be seen to die of it.
#include <csignal>
#include <cstdlib>
#include <thread>

#include "kernels/kernel.h"
#include "kernels/registry.h"

namespace {

qmv::Status crash(const qmv::MatVecArgs&) {
  std::raise(SIGSEGV);
  return qmv::Status::Error("survived SIGSEGV");
}

qmv::Status hang(const qmv::MatVecArgs&) {
  for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
}

qmv::Status quit(const qmv::MatVecArgs&) { std::_Exit(3); }

qmv::KernelRecord faulty(const char* name, qmv::Status (*run)(const qmv::MatVecArgs&), const char* what) {
  return qmv::cpu_matvec_kernel(name, qmv::WeightType::Q4_K, qmv::ActFormat::F32, run, what);
}

}  // namespace

QMV_REGISTER_KERNEL(faulty("test.q4_K.crash", crash, "test-only: raises SIGSEGV"));
QMV_REGISTER_KERNEL(faulty("test.q4_K.hang", hang, "test-only: never returns"));
QMV_REGISTER_KERNEL(faulty("test.q4_K.exit", quit, "test-only: ends its process with status 3"));
