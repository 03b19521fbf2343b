// Sets the process's CPU row tiling for a test's scope and restores it afterwards.
#pragma once

#include "kernels/cpu_tiling.h"

namespace qmv::test {

class TilingGuard {
 public:
  explicit TilingGuard(CpuTiling t) : saved_(cpu_tiling()) { set_cpu_tiling(t); }
  ~TilingGuard() { set_cpu_tiling(saved_); }
  TilingGuard(const TilingGuard&) = delete;
  TilingGuard& operator=(const TilingGuard&) = delete;

 private:
  CpuTiling saved_;
};

}  // namespace qmv::test
