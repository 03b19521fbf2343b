// The GPU Q8_1 quantizer's arithmetic on the CPU: the warp of quantize_q8_1.cu replayed
// lane by lane with the very functions the kernel calls (quantize_q8_1_lanes.h), the
// butterflies done as the shuffles do them, and the bytes compared with the host
// quantizers (the scalar definition and the dispatched one). Needs no GPU.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/activation_quantizers.h"
#include "kernels/cuda/quantize_q8_1_lanes.h"
#include "kernels/formats/formats.h"
#include "tests/q8_1_cases.h"
#include "tests/test_seed.h"

namespace qmv {
namespace {

constexpr int kLanes = 32;

using qmv::testing::fresh_seed;

// __shfl_xor_sync butterflies: at each offset every lane combines its value with lane
// (lane ^ offset)'s value from before the step.
template <class T, class Combine>
std::array<T, kLanes> butterfly(std::array<T, kLanes> v, Combine combine) {
  for (int offset = kLanes / 2; offset > 0; offset >>= 1) {
    const std::array<T, kLanes> before = v;
    for (int lane = 0; lane < kLanes; ++lane) v[lane] = combine(before[lane], before[lane ^ offset]);
  }
  return v;
}

// One warp's block as the kernel computes it: lane i holds x[i].
BlockQ8_1 replay_block(const float* x) {
  using namespace qmv::cuda;
  std::array<float, kLanes> magnitude;
  for (int lane = 0; lane < kLanes; ++lane) magnitude[lane] = q8_1_magnitude(x[lane]);
  const auto amax = butterfly(magnitude, [](float a, float b) { return q8_1_max(a, b); });
  std::array<int, kLanes> q;
  std::array<std::uint16_t, kLanes> d_bits;
  for (int lane = 0; lane < kLanes; ++lane) {
    d_bits[lane] = q8_1_scale_bits(amax[lane]);
    q[lane] = q8_1_quant(x[lane], half_bits_to_float(d_bits[lane]));
  }
  const auto sum = butterfly(q, [](int a, int b) { return a + b; });
  for (int lane = 1; lane < kLanes; ++lane) {
    EXPECT_EQ(d_bits[lane], d_bits[0]) << "lanes disagree on the block scale";
    EXPECT_EQ(sum[lane], sum[0]) << "lanes disagree on the quant sum";
  }
  BlockQ8_1 out;
  for (int lane = 0; lane < kLanes; ++lane) out.qs[lane] = static_cast<std::int8_t>(q[lane]);
  out.d = d_bits[0];  // lane 0 writes the scale and the sum
  out.s = q8_1_sum_bits(half_bits_to_float(d_bits[0]), sum[0]);
  return out;
}

std::string describe(const BlockQ8_1& b) {
  std::string s = "d=" + std::to_string(b.d) + " s=" + std::to_string(b.s) + " qs=";
  for (int i = 0; i < kQ8_1Block; ++i) s += std::to_string(b.qs[i]) + (i + 1 < kQ8_1Block ? "," : "");
  return s;
}

TEST(CudaQuantizeLanes, WarpReplayGivesTheHostQuantizersBytes) {
  std::mt19937_64 rng(fresh_seed("q8_1 lanes"));
  for (std::int64_t blocks : {1, 7, 128, 448, 4096}) {
    const test::Q8_1Cases c = test::q8_1_cases(rng, blocks);
    const std::int64_t n = blocks * kQ8_1Block;
    std::vector<BlockQ8_1> scalar(blocks), dispatched(blocks);
    quantize_row_q8_1_scalar(c.x.data(), scalar.data(), n);
    quantize_row_q8_1(c.x.data(), dispatched.data(), n);
    for (std::int64_t b = 0; b < blocks; ++b) {
      const BlockQ8_1 lanes = replay_block(c.x.data() + b * kQ8_1Block);
      ASSERT_EQ(std::memcmp(&lanes, &scalar[b], sizeof(BlockQ8_1)), 0)
          << "block " << b << " of " << blocks << "\n  lanes  " << describe(lanes) << "\n  scalar "
          << describe(scalar[b]);
      ASSERT_EQ(std::memcmp(&lanes, &dispatched[b], sizeof(BlockQ8_1)), 0) << "block " << b;
    }
    if (blocks >= 448) {
      // The awkward cases were really there (a test on nothing proves nothing).
      EXPECT_GT(c.ties, 100);
      EXPECT_GT(c.zero_blocks, 10);
      EXPECT_GT(c.saturated_blocks, 10);
    }
  }
}

// Rounding ties away from zero, as the host does: x = 2.5 d becomes 3 and -2.5 d
// becomes -3 (ties to even would give 2 and -2).
TEST(CudaQuantizeLanes, TiesRoundAwayFromZero) {
  std::mt19937_64 rng(fresh_seed("q8_1 ties"));
  std::uniform_int_distribution<int> k(0, 125);
  for (int trial = 0; trial < 1000; ++trial) {
    const float d = std::ldexp(1.0f, static_cast<int>(rng() % 20) - 10);
    const int q = k(rng);
    EXPECT_EQ(cuda::q8_1_quant((q + 0.5f) * d, d), q + 1);
    EXPECT_EQ(cuda::q8_1_quant(-(q + 0.5f) * d, d), -(q + 1));
  }
}

TEST(CudaQuantizeLanes, ScaleSaturatesAndZeroScaleGivesZeroQuants) {
  using namespace qmv::cuda;
  EXPECT_EQ(half_bits_to_float(q8_1_scale_bits(std::numeric_limits<float>::infinity())), 65504.0f);
  EXPECT_EQ(half_bits_to_float(q8_1_scale_bits(1e30f)), 65504.0f);
  EXPECT_EQ(q8_1_scale_bits(0.0f), 0);
  EXPECT_EQ(q8_1_quant(1.0f, 0.0f), 0);
  EXPECT_EQ(q8_1_quant(std::numeric_limits<float>::quiet_NaN(), 1.0f), 0);
  EXPECT_EQ(q8_1_quant(std::numeric_limits<float>::infinity(), 1.0f), 127);
  EXPECT_EQ(q8_1_quant(-std::numeric_limits<float>::infinity(), 1.0f), -127);
  EXPECT_EQ(q8_1_magnitude(std::numeric_limits<float>::quiet_NaN()), 0.0f);
  EXPECT_TRUE(std::isinf(half_bits_to_float(q8_1_sum_bits(65504.0f, 4064))));
}

}  // namespace
}  // namespace qmv
