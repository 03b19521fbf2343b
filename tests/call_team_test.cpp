// Kernels run by a call team (kernels/cpu_tiling.h, set_in_call_team), as the CPU
// forward runs the matvecs that read one activation vector: every thread of the team
// calls each kernel in turn and takes its share of the rows, with no barrier between
// the calls. Each of qmvlab's CPU kernels must then write every output of both calls:
// bit for bit what a two-thread call of its own writes, which shares the rows alike,
// and, for a call too small to split on its own, what its one thread writes up to
// rounding (a row-interleaved kernel may take a group with its parts or alone).
#include <gtest/gtest.h>

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "harness/data.h"
#include "kernels/activation_quantizers.h"
#include "kernels/availability.h"
#include "kernels/cpu_tiling.h"
#include "kernels/registry.h"
#include "tests/skips.h"
#include "tests/test_seed.h"
#include "tests/tiling_guard.h"

namespace qmv {
namespace {

// Every element written (no NaN of the poison left) and equal to `own`: exactly, or to
// within float rounding of sums of a few hundred products. That rounding is of the
// products' size, not the sum's (one output may cancel to near zero), so it is bounded
// by the largest output, of the products' size too.
void expect_outputs(const std::vector<float>& team, const std::vector<float>& own, bool exact,
                    const std::string& what) {
  ASSERT_EQ(team.size(), own.size()) << what;
  float largest = 0;
  for (const float y : own) largest = std::max(largest, std::abs(y));
  for (std::size_t i = 0; i < own.size(); ++i) {
    const bool same = exact ? team[i] == own[i] : std::abs(team[i] - own[i]) <= 1e-5f * (1.0f + largest);
    ASSERT_TRUE(same) << what << ": output " << i << " is " << team[i] << " in the team, " << own[i] << " alone";
  }
}

// One call's inputs and output: its matrices (two for a fused kernel), its prepared
// copy, n activation vectors quantized as the kernel reads them.
struct Call {
  std::vector<std::uint8_t> w, w2, x;
  PreparedMatrix prepared;
  std::vector<float> y, y2;
  MatVecArgs args;
};

void make_call(const KernelSpec& k, Shape s, int n, std::mt19937_64& rng, Call& c) {
  const bool fused = k.op == OpKind::FusedUpGate;
  c.w = random_quantized_matrix(k.weight, s, rng());
  if (fused) c.w2 = random_quantized_matrix(k.weight, s, rng());
  const std::size_t x_bytes = row_bytes(k.act, s.cols);
  c.x.resize(x_bytes * n);
  for (int j = 0; j < n; ++j) {
    const std::vector<float> x = gaussian_vector(s.cols, rng());
    quantize_activation(k.act, x.data(), c.x.data() + x_bytes * j, s.cols);
  }
  c.y.assign(static_cast<std::size_t>(s.rows) * n, 0.0f);
  c.y2.assign(fused ? s.rows : 0, 0.0f);
  c.args = matvec_args(s, c.w.data(), c.w.size(), c.x.data(), c.x.size(), c.y.data(), fused ? c.w2.data() : nullptr,
                       c.w2.size(), fused ? c.y2.data() : nullptr);
  c.args.y_len = c.y.size();
  c.args.n = n;
  c.args.threads = 2;
  ASSERT_TRUE(c.prepared.prepare(k, c.args).ok()) << k.name;
  c.args.prepared = c.prepared.handle();
}

TEST(CallTeam, EveryCpuKernelWritesEveryOutputOfBackToBackCallsItShares) {
  std::mt19937_64 rng(testing::fresh_seed());
  // Tiles of another height than the default, drawn afresh: the shares move with them.
  const std::int64_t heights[] = {8, 24, 64};
  test::TilingGuard tiling({heights[rng() % 3], 128});
  int checked = 0, interleaved = 0;
  std::string not_checked;
  for (const KernelSpec& k : global_registry().all()) {
    if (k.backend != Backend::CPU || k.name.rfind("test.", 0) == 0) continue;
    // Every CPU kernel of ours joins call teams; a peer's never does.
    EXPECT_EQ(k.joins_call_teams, k.peer.empty()) << k.name;
    if (!k.joins_call_teams) continue;
    if (const Availability av = availability(k); !av.available) {
      not_checked += " " + k.name;
      continue;
    }
    // Rows that fill no whole tile or group, and one call too small for two threads
    // alone (it runs on one thread outside a team).
    Shape shape{0, 0};
    for (Shape s : {Shape{203, 512}, Shape{203, 256}, Shape{208, 512}})
      if (k.supports(s)) {
        shape = s;
        break;
      }
    if (shape.rows == 0) continue;
    const Shape small{1 + static_cast<std::int64_t>(rng() % 100), shape.cols};
    const int n = k.op == OpKind::MatVecBatch ? std::min(k.max_n, 3) : 1;
    Call a, b;
    make_call(k, shape, n, rng, a);
    make_call(k, small, n, rng, b);
    ASSERT_TRUE(invoke(k, a.args).ok()) << k.name;
    ASSERT_TRUE(invoke(k, b.args).ok()) << k.name;
    const std::vector<float> a_own = a.y, a2_own = a.y2, b_own = b.y, b2_own = b.y2;
    for (Call* c : {&a, &b}) {
      poison(c->y);
      poison(c->y2);
    }
    int team = 0;
#pragma omp parallel num_threads(2)
    {
      set_in_call_team(true);
      k.run(a.args);
      k.run(b.args);
      set_in_call_team(false);
#pragma omp single
      team = omp_get_num_threads();
    }
    ASSERT_EQ(team, 2);
    expect_outputs(a.y, a_own, true, k.name + " " + to_string(shape));
    expect_outputs(a.y2, a2_own, true, k.name + " " + to_string(shape) + ", second matrix");
    expect_outputs(b.y, b_own, false, k.name + " " + to_string(small));
    expect_outputs(b.y2, b2_own, false, k.name + " " + to_string(small) + ", second matrix");
    ++checked;
    interleaved += k.prepare != nullptr;
  }
  // Both kinds of parallel loop: row tiles and the row-interleaved groups.
  EXPECT_GT(checked - interleaved, 10);
  if (interleaved == 0) GTEST_SKIP() << "no row-interleaved kernel runs here; not checked:" << not_checked;
}

// A kernel out of a team runs as it always has: the flag is the calling thread's own.
TEST(CallTeam, TheFlagIsEachThreadsOwn) {
  EXPECT_FALSE(in_call_team());
  int seen_by_other = -1;
  set_in_call_team(true);
#pragma omp parallel num_threads(2)
  {
    if (omp_get_thread_num() == 1) seen_by_other = in_call_team();
  }
  EXPECT_TRUE(in_call_team());
  set_in_call_team(false);
  EXPECT_EQ(seen_by_other, 0);
}

}  // namespace
}  // namespace qmv
