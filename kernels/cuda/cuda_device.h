// What the harness needs to know about the CUDA device, behind a plain C++ header so
// host code compiled by g++ can use it.
#pragma once

#include <cstddef>
#include <string>

namespace qmv::cuda {

struct DeviceInfo {
  bool present = false;
  std::string why_absent;  // set when !present, e.g. "no CUDA device"
  std::string name;
  int sm = 0;  // compute capability x10, e.g. 90
  int sm_count = 0;
  std::size_t memory_bytes = 0;
  int driver_version = 0;  // as cudaDriverGetVersion: 12040 = 12.4
  int memory_clock_khz = 0;
  int memory_bus_bits = 0;
};

DeviceInfo query_device(int index = 0);

// Fills n floats of device memory with NaN (outputs are poisoned before a kernel
// runs, so an element the kernel forgets to write fails the check). Returns an
// empty string or the CUDA error.
std::string poison_device_floats(float* device_ptr, std::size_t n);

}  // namespace qmv::cuda
