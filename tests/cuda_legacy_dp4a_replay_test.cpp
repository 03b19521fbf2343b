// The legacy-quant GPU matvecs with Q8_1 activations (<type>.cuda.warp_dp4a_q8_1),
// replayed on the CPU: every lane of every row runs legacy_lane_sum, the function
// the kernel calls, and the row's lane sums are compared with a double-precision dot of
// the dequantized weights and the dequantized Q8_1 vector. The bound is float rounding
// plus the one approximation the kernels make on purpose: the offset terms (-8 d, -16 d,
// m) multiply the Q8_1 block's fp16 sum s instead of dx * sum(xq). Fresh random data
// every run: our quantizer on Gaussian rows, and blocks of random bytes.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "harness/data.h"
#include "kernels/activation_quantizers.h"
#include "kernels/cuda/dequantize_value.h"
#include "kernels/cuda/legacy_dp4a_lanes.h"
#include "kernels/registry.h"
#include "tests/legacy_blocks.h"
#include "tests/test_seed.h"

namespace qmv::cuda {
namespace {

constexpr WeightType kTypes[] = {WeightType::Q4_0, WeightType::Q4_1, WeightType::Q5_0, WeightType::Q5_1,
                                 WeightType::Q8_0};

// |coefficient of s| of one block's offset term.
double offset_weight(WeightType type, const std::uint8_t* block) {
  fp16_bits d, m;
  std::memcpy(&d, block, sizeof d);
  std::memcpy(&m, block + 2, sizeof m);
  switch (type) {
    case WeightType::Q4_0: return 8.0 * std::fabs(half_bits_to_float(d));
    case WeightType::Q5_0: return 16.0 * std::fabs(half_bits_to_float(d));
    case WeightType::Q4_1:
    case WeightType::Q5_1: return std::fabs(half_bits_to_float(m));
    default: return 0.0;
  }
}

template <class Block>
float replay_row(const std::uint8_t* row, const BlockQ8_1* xq, std::int64_t n_blocks) {
  float total = 0.0f;
  for (int lane = 0; lane < 32; ++lane)
    total += legacy_lane_sum(reinterpret_cast<const Block*>(row), xq, n_blocks, lane);
  return total;
}

float replay_row(WeightType type, const std::uint8_t* row, const BlockQ8_1* xq, std::int64_t n_blocks) {
  switch (type) {
    case WeightType::Q4_0: return replay_row<BlockQ4_0>(row, xq, n_blocks);
    case WeightType::Q4_1: return replay_row<BlockQ4_1>(row, xq, n_blocks);
    case WeightType::Q5_0: return replay_row<BlockQ5_0>(row, xq, n_blocks);
    case WeightType::Q5_1: return replay_row<BlockQ5_1>(row, xq, n_blocks);
    default: return replay_row<BlockQ8_0>(row, xq, n_blocks);
  }
}

void check_type(WeightType type, Shape shape, bool raw, std::uint64_t seed) {
  SCOPED_TRACE(std::string(to_string(type)) + " " + to_string(shape) + (raw ? " random bytes" : " quantized") +
               ", seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const std::vector<std::uint8_t> w =
      raw ? test::random_legacy_blocks(type, shape, rng) : random_quantized_matrix(type, shape, seed);
  const std::vector<float> x = gaussian_vector(shape.cols, seed + 1);
  std::vector<BlockQ8_1> xq(static_cast<std::size_t>(shape.cols / kQ8_1Block));
  quantize_row_q8_1(x.data(), xq.data(), shape.cols);
  std::vector<float> seen(static_cast<std::size_t>(shape.cols)), wrow(static_cast<std::size_t>(shape.cols));
  dequantize_row_q8_1(xq.data(), seen.data(), shape.cols);
  const std::int64_t n_blocks = shape.cols / kLegacyBlock;
  const std::size_t rb = row_bytes(type, shape.cols), bb = block_bytes(type);
  for (std::int64_t r = 0; r < shape.rows; ++r) {
    const std::uint8_t* row = w.data() + rb * static_cast<std::size_t>(r);
    dequantize_row(type, row, wrow.data(), shape.cols);
    double ref = 0, magnitude = 0, offset_error = 0;
    for (std::int64_t c = 0; c < shape.cols; ++c) {
      ref += double(wrow[c]) * seen[c];
      magnitude += std::fabs(double(wrow[c]) * seen[c]);
    }
    for (std::int64_t b = 0; b < n_blocks; ++b) {
      double qsum = 0;
      for (int i = 0; i < kQ8_1Block; ++i) qsum += seen[b * kQ8_1Block + i];
      // s is fp16(dx * sum xq): off by at most half an fp16 ulp of it, plus subnormal steps.
      offset_error += offset_weight(type, row + bb * b) * (std::fabs(qsum) * std::ldexp(1.0, -10) + 1e-7);
    }
    const float got = replay_row(type, row, xq.data(), n_blocks);
    ASSERT_TRUE(std::isfinite(got)) << "row " << r;
    ASSERT_NEAR(got, ref, 2e-6 * magnitude + offset_error + 1e-30) << "row " << r;
  }
}

TEST(CudaLegacyDp4aReplay, EveryTypeMatchesTheReferenceOnEveryShape) {
  const std::uint64_t seed = qmv::testing::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::uint64_t k = seed;
  // Columns: one block (most lanes idle), fewer blocks than a step, an odd count, a
  // count that leaves the unrolled loop a tail, the usual 4096.
  for (WeightType type : kTypes)
    for (std::int64_t cols : {32, 96, 800, 1312, 4096})
      for (std::int64_t rows : {1, 3, 13})
        for (bool raw : {false, true}) check_type(type, {rows, cols}, raw, ++k);
}

// The kernels' answer differs from the plain dot only by rounding and the offset term:
// a lane that took another part, or a block twice, must not pass.
TEST(CudaLegacyDp4aReplay, AWrongPartIsCaught) {
  const std::uint64_t seed = qmv::testing::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const Shape shape{1, 256};
  const auto w = random_quantized_matrix(WeightType::Q4_0, shape, seed);
  const auto x = gaussian_vector(shape.cols, seed + 1);
  std::vector<BlockQ8_1> xq(shape.cols / kQ8_1Block);
  quantize_row_q8_1(x.data(), xq.data(), shape.cols);
  const auto* blocks = reinterpret_cast<const BlockQ4_0*>(w.data());
  float right = 0, wrong = 0;
  for (int lane = 0; lane < 32; ++lane) {
    right += legacy_lane_sum(blocks, xq.data(), shape.cols / kLegacyBlock, lane);
    // Part 1 where part 0 belongs: the replay's reference must tell them apart.
    for (std::int64_t b = lane / 4; b < shape.cols / kLegacyBlock; b += 8)
      wrong += legacy_dp4a_part(blocks[b], xq[b], lane % 4 == 0 ? 1 : lane % 4);
  }
  EXPECT_GT(std::fabs(right - wrong), 1e-3 * std::fabs(right) + 1e-6);
}

TEST(CudaLegacyDp4aReplay, FifthBitsLandOnBitFourOfTheirBytes) {
  std::mt19937 rng(qmv::testing::fresh_seed());
  for (int trial = 0; trial < 2000; ++trial) {
    std::uint8_t qh[4];
    for (auto& b : qh) b = static_cast<std::uint8_t>(rng());
    std::uint32_t word;
    std::memcpy(&word, qh, sizeof word);
    for (int first = 0; first <= 28; first += 4) {
      const std::uint32_t spread = spread_fifth_bits(word, first);
      for (int k = 0; k < 4; ++k)
        ASSERT_EQ((spread >> (8 * k)) & 0xFFu, static_cast<std::uint32_t>(legacy_fifth_bit(qh, first + k)) << 4)
            << "first " << first << " value " << k;
    }
  }
}

TEST(CudaLegacyDp4aReplay, EveryTypeIsRegisteredAsAnInt8CudaKernel) {
#ifdef QMV_HAVE_CUDA
  for (WeightType type : kTypes) {
    const std::string name = std::string(to_string(type)) + ".cuda.warp_dp4a_q8_1";
    const KernelSpec* k = global_registry().find(name);
    ASSERT_NE(k, nullptr) << name;
    EXPECT_EQ(k->backend, Backend::CUDA) << name;
    EXPECT_EQ(k->weight, type) << name;
    EXPECT_EQ(k->act, ActFormat::Q8_1) << name;
    EXPECT_EQ(k->min_sm, 61) << name;  // __dp4a
    EXPECT_TRUE(k->supports({3, 96})) << name;
    EXPECT_FALSE(k->supports({3, 100})) << name;
  }
#else
  GTEST_SKIP() << "built without CUDA (QMV_CUDA=OFF): the CUDA kernels are not compiled";
#endif
}

}  // namespace
}  // namespace qmv::cuda
