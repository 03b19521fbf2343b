// The GPU Q8_1 quantizer on a device: its bytes against the host quantizer on fresh
// random vectors with every awkward kind of block (tests/q8_1_cases.h), from one block
// to more blocks than its grid holds at once; bad arguments refused before a launch.
// Skips with "no CUDA device ..." where there is none (the lane arithmetic is checked
// without a GPU by cuda_quantize_lane_test.cpp).
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/formats/formats.h"
#include "tests/q8_1_cases.h"
#include "tests/test_seed.h"
#ifdef QMV_HAVE_CUDA
#include "kernels/cuda/cuda_device.h"
#include "kernels/cuda/quantize_q8_1.h"
#endif

namespace qmv {
namespace {

#ifdef QMV_HAVE_CUDA

TEST(CudaQuantize, BytesEqualTheHostQuantizer) {
  const cuda::DeviceInfo& dev = cuda::current_device();
  if (!dev.present) GTEST_SKIP() << dev.why_absent;
  const std::uint64_t seed = qmv::testing::fresh_seed("q8_1 on the GPU");
  std::mt19937_64 rng(seed);
  cuda::Stream stream;
  ASSERT_TRUE(stream.status().ok()) << stream.status().error;
  // 40000 blocks: more than the 4096 x 8 warps of one launch, so warps loop.
  for (std::int64_t blocks : {1, 7, 448, 5000, 40000}) {
    const test::Q8_1Cases c = test::q8_1_cases(rng, blocks);
    const std::int64_t n = blocks * kQ8_1Block;
    std::vector<BlockQ8_1> host(blocks), gpu(blocks);
    quantize_row_q8_1_scalar(c.x.data(), host.data(), n);
    cuda::DeviceBuffer x, y;
    ASSERT_TRUE(x.resize(c.x.size() * sizeof(float), "x").ok());
    ASSERT_TRUE(y.resize(host.size() * sizeof(BlockQ8_1), "y").ok());
    // Poisoned, so a block the kernel skips cannot match by accident.
    std::vector<std::uint8_t> junk(y.size(), 0xa5);
    ASSERT_TRUE(cuda::copy_to_device(y.get(), junk.data(), junk.size(), stream.get(), "y").ok());
    ASSERT_TRUE(cuda::copy_to_device(x.get(), c.x.data(), x.size(), stream.get(), "x").ok());
    const Status st = cuda::quantize_q8_1(static_cast<const float*>(x.get()), static_cast<BlockQ8_1*>(y.get()), n,
                                          stream.get());
    ASSERT_TRUE(st.ok()) << st.error;
    ASSERT_TRUE(cuda::synchronize(stream.get(), cuda::kQuantizeQ8_1Name).ok());
    ASSERT_TRUE(cuda::copy_to_host(gpu.data(), y.get(), y.size(), stream.get(), "y").ok());
    for (std::int64_t b = 0; b < blocks; ++b)
      ASSERT_EQ(std::memcmp(&gpu[b], &host[b], sizeof(BlockQ8_1)), 0)
          << "block " << b << " of " << blocks << ": d " << gpu[b].d << " vs " << host[b].d << ", s " << gpu[b].s
          << " vs " << host[b].s;
    if (blocks >= 448) {
      EXPECT_GT(c.ties, 100);
    }
  }
}

TEST(CudaQuantize, BadArgumentsAreRefusedBeforeALaunch) {
  const cuda::DeviceInfo& dev = cuda::current_device();
  if (!dev.present) GTEST_SKIP() << dev.why_absent;
  cuda::DeviceBuffer x, y;
  ASSERT_TRUE(x.resize(64 * sizeof(float), "x").ok());
  ASSERT_TRUE(y.resize(2 * sizeof(BlockQ8_1), "y").ok());
  const auto* xf = static_cast<const float*>(x.get());
  auto* yq = static_cast<BlockQ8_1*>(y.get());
  for (std::int64_t n : {0, -32, 33, 63}) {
    const Status st = cuda::quantize_q8_1(xf, yq, n, nullptr);
    EXPECT_NE(st.error.find("not a positive multiple of 32"), std::string::npos) << n << ": " << st.error;
  }
  EXPECT_NE(cuda::quantize_q8_1(nullptr, yq, 64, nullptr).error.find("null"), std::string::npos);
  EXPECT_NE(cuda::quantize_q8_1(xf, nullptr, 64, nullptr).error.find("null"), std::string::npos);
  EXPECT_TRUE(cuda::quantize_q8_1(xf, yq, 64, nullptr).ok());
  EXPECT_TRUE(cuda::synchronize(nullptr, cuda::kQuantizeQ8_1Name).ok());
}

#else

TEST(CudaQuantize, BytesEqualTheHostQuantizer) { GTEST_SKIP() << "no CUDA device: built with QMV_CUDA=OFF"; }

#endif

}  // namespace
}  // namespace qmv
