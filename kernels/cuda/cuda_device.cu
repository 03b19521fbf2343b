#include "cuda_device.h"

#include <cuda_runtime.h>

#include <algorithm>

namespace qmv::cuda {
namespace {

__global__ void fill_nan(float* out, std::size_t n) {
  const float nan = __int_as_float(0x7fc00000);
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x)
    out[i] = nan;
}

}  // namespace

DeviceInfo query_device(int index) {
  DeviceInfo info;
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess || count == 0) {
    info.why_absent = err == cudaSuccess ? "no CUDA device"
                                         : std::string("no CUDA device (") + cudaGetErrorString(err) + ")";
    cudaGetLastError();  // clear the sticky error so later calls are not confused by it
    return info;
  }
  if (index >= count) {
    info.why_absent = "no CUDA device with index " + std::to_string(index);
    return info;
  }
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, index) != cudaSuccess) {
    info.why_absent = "cudaGetDeviceProperties failed";
    return info;
  }
  info.present = true;
  info.name = prop.name;
  info.sm = prop.major * 10 + prop.minor;
  info.sm_count = prop.multiProcessorCount;
  info.memory_bytes = prop.totalGlobalMem;
  info.memory_bus_bits = prop.memoryBusWidth;
  cudaDeviceGetAttribute(&info.memory_clock_khz, cudaDevAttrMemoryClockRate, index);
  cudaDriverGetVersion(&info.driver_version);
  return info;
}

std::string poison_device_floats(float* device_ptr, std::size_t n) {
  if (n == 0) return {};
  if (!device_ptr) return "poison_device_floats: null device pointer";
  const int threads = 256;
  const int blocks = static_cast<int>(std::min<std::size_t>((n + threads - 1) / threads, 4096));
  fill_nan<<<blocks, threads>>>(device_ptr, n);
  const cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? std::string() : std::string("fill_nan: ") + cudaGetErrorString(err);
}

}  // namespace qmv::cuda
