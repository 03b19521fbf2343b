// Attention on the CPU (model/attention.h): the portable per-head version and the AVX2
// grouped one (query heads sharing a KV head, positions split into ranges and merged)
// against a double-precision softmax attention on fresh random data, the KV head read
// out of a wider row.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <stdexcept>
#include <utility>
#include <random>
#include <vector>

#include "kernels/cpu_features.h"
#include "kernels/kernel.h"
#include "model/attention.h"
#include "tests/test_seed.h"

namespace qmv {
namespace {

struct Case {
  std::vector<float> q, keys, values;
  std::size_t stride = 0;
  int positions = 0, head_dim = 0, offset = 0;
  float scale = 0;
};

Case random_case(std::mt19937& g, int positions, int head_dim) {
  std::normal_distribution<float> n(0.0f, 1.0f);
  Case c;
  c.positions = positions;
  c.head_dim = head_dim;
  c.offset = head_dim;  // the second of three KV heads
  c.stride = static_cast<std::size_t>(3 * head_dim);
  c.scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  for (int i = 0; i < head_dim; ++i) c.q.push_back(2.0f * n(g));  // scores spread enough to make softmax uneven
  for (std::size_t i = 0; i < c.stride * positions; ++i) {
    c.keys.push_back(n(g));
    c.values.push_back(n(g));
  }
  return c;
}

std::vector<double> reference(const Case& c) {
  std::vector<double> s(c.positions), out(c.head_dim, 0.0);
  double max_s = -INFINITY, sum = 0;
  for (int t = 0; t < c.positions; ++t) {
    double dot = 0;
    for (int i = 0; i < c.head_dim; ++i) dot += double(c.q[i]) * c.keys[t * c.stride + c.offset + i];
    s[t] = dot * c.scale;
    max_s = std::max(max_s, s[t]);
  }
  for (double& v : s) sum += (v = std::exp(v - max_s));
  for (int t = 0; t < c.positions; ++t)
    for (int i = 0; i < c.head_dim; ++i) out[i] += s[t] / sum * c.values[t * c.stride + c.offset + i];
  return out;
}

// Runs `attend` on the case with the output poisoned and fenced: every element must be
// written, none past the head.
template <class Attend>
void expect_matches_reference(const Case& c, Attend attend) {
  SCOPED_TRACE(::testing::Message() << c.positions << " positions, head of " << c.head_dim);
  constexpr float kFence = 12345.0f;
  std::vector<float> out(c.head_dim + 8, std::numeric_limits<float>::quiet_NaN());
  std::fill(out.begin() + c.head_dim, out.end(), kFence);
  std::vector<float> scores(c.positions, std::numeric_limits<float>::quiet_NaN());
  HeadAttention a;
  a.q = c.q.data();
  a.keys = c.keys.data() + c.offset;
  a.values = c.values.data() + c.offset;
  a.stride = c.stride;
  a.positions = c.positions;
  a.head_dim = c.head_dim;
  a.scale = c.scale;
  a.scores = scores.data();
  a.out = out.data();
  attend(a);
  const std::vector<double> want = reference(c);
  double err = 0, norm = 0;
  for (int i = 0; i < c.head_dim; ++i) {
    ASSERT_TRUE(std::isfinite(out[i])) << "element " << i << " not written";
    err += (out[i] - want[i]) * (out[i] - want[i]);
    norm += want[i] * want[i];
  }
  EXPECT_LT(err / norm, 1e-11);
  for (int i = c.head_dim; i < c.head_dim + 8; ++i) EXPECT_EQ(out[i], kFence) << "written past the head";
}

TEST(CpuAttention, PortableVersionMatchesTheDoublePrecisionSoftmax) {
  std::mt19937 g(qmv::testing::fresh_seed());
  for (int positions : {1, 2, 7, 9, 130, 517})
    for (int head_dim : {8, 20, 64, 80, 128}) expect_matches_reference(random_case(g, positions, head_dim), attend_head);
}

// attend_group_avx2 on `heads` query heads sharing one KV head, the positions cut into
// `ranges` ranges, merged: each head against its own double-precision attention.
void expect_group_matches_reference(std::mt19937& g, int heads, int positions, int head_dim, int ranges) {
  SCOPED_TRACE(::testing::Message() << heads << " heads, " << positions << " positions, head of " << head_dim
                                    << ", " << ranges << " ranges");
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<Case> cases;
  std::vector<float> q;
  for (int h = 0; h < heads; ++h) {
    cases.push_back(random_case(g, positions, head_dim));
    if (h > 0) cases[h].keys = cases[0].keys, cases[h].values = cases[0].values;  // one KV head
    q.insert(q.end(), cases[h].q.begin(), cases[h].q.end());
  }
  const Case& kv = cases[0];
  const std::size_t scores_stride = positions + 3;
  std::vector<float> scores(heads * scores_stride, nan), out(ranges * heads * head_dim, nan), max(ranges * heads, nan),
      sum(ranges * heads, nan);
  for (int r = 0; r < ranges; ++r) {
    GroupAttention a;
    a.q = q.data();
    a.heads = heads;
    a.keys = kv.keys.data() + kv.offset;
    a.values = kv.values.data() + kv.offset;
    a.stride = kv.stride;
    a.first = positions * r / ranges;
    a.end = positions * (r + 1) / ranges;
    a.head_dim = head_dim;
    a.scale = kv.scale;
    a.scores = scores.data();
    a.scores_stride = scores_stride;
    // Results laid out [range][head][...], as the forward keeps them.
    a.out = out.data() + static_cast<std::size_t>(r) * heads * head_dim;
    a.max = max.data() + r * heads;
    a.sum = sum.data() + r * heads;
    attend_group_avx2(a);
  }
  for (int h = 0; h < heads; ++h) {
    std::vector<float> result(head_dim + 8, 12345.0f);
    std::fill(result.begin(), result.begin() + head_dim, nan);
    merge_partials(out.data() + h * head_dim, static_cast<std::size_t>(heads) * head_dim, max.data() + h,
                   sum.data() + h, heads, ranges, head_dim, result.data());
    const std::vector<double> want = reference(cases[h]);
    double err = 0, norm = 0;
    for (int i = 0; i < head_dim; ++i) {
      ASSERT_TRUE(std::isfinite(result[i])) << "head " << h << " element " << i << " not written";
      err += (result[i] - want[i]) * (result[i] - want[i]);
      norm += want[i] * want[i];
    }
    EXPECT_LT(err / norm, 1e-11) << "head " << h;
    for (int i = head_dim; i < head_dim + 8; ++i) EXPECT_EQ(result[i], 12345.0f) << "written past the head";
  }
}

TEST(CpuAttention, GroupedAvx2VersionMatchesTheDoublePrecisionSoftmaxOverAnyRanges) {
  if (missing_cpu_features(static_cast<std::uint32_t>(CpuFeature::AVX2) |
                           static_cast<std::uint32_t>(CpuFeature::FMA)) != 0)
    GTEST_SKIP() << "this CPU (or the ISA mask) lacks AVX2/FMA: the forward runs the portable version";
  std::mt19937 g(qmv::testing::fresh_seed());
  for (int heads = 1; heads <= kGroupHeads; ++heads)
    for (int head_dim : {8, 24, 40, 64, 80, 128, 256})
      for (auto [positions, ranges] : {std::pair{1, 1}, {2, 2}, {9, 1}, {9, 4}, {130, 3}, {517, 8}})
        expect_group_matches_reference(g, heads, positions, head_dim, ranges);
}

TEST(CpuAttention, GroupedAvx2VersionRefusesMoreHeadsThanItHolds) {
  GroupAttention a;
  a.heads = kGroupHeads + 1;
  EXPECT_THROW(attend_group_avx2(a), std::invalid_argument);
}

}  // namespace
}  // namespace qmv
