#include "harness/execute.h"

namespace qmv {

namespace {

MatVecArgs args_for(const HostCall& c) {
  MatVecArgs a;
  a.shape = c.shape;
  a.w = c.w;
  a.w_bytes = c.w_bytes;
  a.x = c.x;
  a.x_bytes = c.x_bytes;
  a.y = c.y;
  a.y_len = c.y ? static_cast<std::size_t>(c.shape.rows) : 0;
  if (c.w2) {
    a.w2 = c.w2;
    a.w2_bytes = c.w2_bytes;
    a.y2 = c.y2;
    a.y2_len = c.y2 ? static_cast<std::size_t>(c.shape.rows) : 0;
  }
  a.threads = c.threads;
  return a;
}

}  // namespace

Status run_on_host_buffers(const KernelSpec& spec, const HostCall& call) {
  if (spec.backend == Backend::CPU) return invoke(spec, args_for(call));
  return Status::Error(spec.name + ": GPU kernels cannot run on host buffers in this build");
}

}  // namespace qmv
