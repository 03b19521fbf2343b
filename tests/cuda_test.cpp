#include <gtest/gtest.h>

#ifdef QMV_HAVE_CUDA
#include <cuda_runtime.h>

#include <cmath>
#include <vector>

#include "kernels/cuda/cuda_device.h"
#endif

namespace {

#ifdef QMV_HAVE_CUDA
TEST(Cuda, PoisonFillsDeviceMemoryWithNan) {
  const qmv::cuda::DeviceInfo dev = qmv::cuda::query_device();
  if (!dev.present) GTEST_SKIP() << dev.why_absent;  // starts with "no CUDA device"
  std::printf("CUDA device: %s sm_%d, %d SMs\n", dev.name.c_str(), dev.sm, dev.sm_count);
  const std::size_t n = 100003;
  float* d = nullptr;
  ASSERT_EQ(cudaMalloc(&d, n * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMemset(d, 0, n * sizeof(float)), cudaSuccess);
  EXPECT_EQ(qmv::cuda::poison_device_floats(d, n), "");
  std::vector<float> h(n);
  ASSERT_EQ(cudaMemcpy(h.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
  cudaFree(d);
  for (std::size_t i = 0; i < n; ++i) ASSERT_TRUE(std::isnan(h[i])) << i;
  EXPECT_NE(qmv::cuda::poison_device_floats(nullptr, 5), "");
}
#else
TEST(Cuda, PoisonFillsDeviceMemoryWithNan) { GTEST_SKIP() << "no CUDA device: built with QMV_CUDA=OFF"; }
#endif

}  // namespace
