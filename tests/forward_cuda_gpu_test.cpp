// The GPU forward pass on a CUDA device, against the CPU forward pass on synthetic
// models of every architecture: logits (f32-activation plans: NMSE bound; Q8_1 plans:
// top-1 agreement and NMSE reported), greedy generations, graph against op-by-op
// launches, the device sampler against its host replay, the device dequantizer
// against dequantize_row. Every test needs a GPU; without one each skips with a line
// that starts "no CUDA device".
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <span>

#include "harness/data.h"
#include "harness/machine.h"
#include "kernels/availability.h"
#include "model/forward.h"
#include "model/sampler.h"
#include "tests/forward_cuda_testing.h"

#ifdef QMV_HAVE_CUDA
#include <cuda_runtime.h>

#include "kernels/cuda/cuda_device.h"
#include "kernels/cuda/dequantize_row.h"
#include "model/forward_cuda.h"
#include "model/gpu_math.h"
#endif

namespace qmv {
namespace {

using testing::fresh_seed;
using testing::nmse;

#ifdef QMV_HAVE_CUDA

#define REQUIRE_GPU()                                                  \
  do {                                                                 \
    static const cuda::DeviceInfo dev = cuda::query_device();          \
    if (!dev.present) GTEST_SKIP() << dev.why_absent;                  \
  } while (0)

// The kernel that runs a plan entry here with activations `act`, by a fixed rule: the
// simple legacy kernel of the type where one exists and act is f32, else the first in
// name order of the CUDA kernels of the type, op kind and activation format that take
// the shape and run here. (EveryCudaKernelDecodes runs each of the others.)
const KernelSpec* cuda_kernel_for(const PlannedMatvec& p, ActFormat act) {
  const OpKind kind = p.op == Op::FfnUpGate ? OpKind::FusedUpGate : OpKind::MatVec;
  if (act == ActFormat::F32 && kind == OpKind::MatVec)
    if (const KernelSpec* k = testing::legacy_cuda_kernel(p.weight)) return k;
  const KernelSpec* first = nullptr;
  for (const KernelSpec& k : global_registry().all())
    if (k.backend == Backend::CUDA && k.weight == p.weight && k.act == act && k.op == kind && k.supports(p.shape) &&
        availability(k).available && (first == nullptr || k.name < first->name))
      first = &k;
  return first;
}

// A GPU plan for the CPU plan's entries, or an empty one (with `missing` saying which
// type has no kernel) when some entry has none.
std::vector<PlannedMatvec> gpu_plan_for(const std::vector<PlannedMatvec>& cpu, ActFormat act, std::string& missing) {
  missing.clear();
  auto plan = testing::gpu_plan(cpu, [&](const PlannedMatvec& p) {
    const KernelSpec* k = cuda_kernel_for(p, act);
    // Q8_1 plans keep f32 kernels where the type has no Q8_1 one (the legacy quants).
    if (!k && act == ActFormat::Q8_1) k = cuda_kernel_for(p, ActFormat::F32);
    if (!k) missing = std::string(to_string(p.weight)) + " (" + std::string(to_string(p.op)) + ")";
    return k;
  });
  return missing.empty() ? plan : std::vector<PlannedMatvec>{};
}

std::vector<int> random_tokens(int n, int vocab, std::mt19937& rng) {
  std::vector<int> t(n);
  for (int& x : t) x = std::uniform_int_distribution<int>(0, vocab - 1)(rng);
  return t;
}

GpuForwardOptions options(int context, bool graph = true, bool op_timing = false, SamplerConfig sampler = {}) {
  GpuForwardOptions o;
  o.context = context;
  o.cuda_graph = graph;
  o.op_timing = op_timing;
  o.sampler = sampler;
  return o;
}

// Whether two decodes' last logits are equal bit for bit.
bool same_logits(GpuForward& a, GpuForward& b) {
  const auto la = a.logits();
  const std::vector<float> va(la.begin(), la.end());
  const auto lb = b.logits();
  return va.size() == lb.size() && std::memcmp(va.data(), lb.data(), va.size() * sizeof(float)) == 0;
}

const char* const kArchs[] = {"llama", "qwen2", "qwen3"};
const char* const kMixes[] = {"q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "f16", "bf16", "f32", "q4_K_m", "q4_K", "q5_K", "q6_K"};
// The mixes whose types have int8-activation (Q8_1) CUDA kernels.
const char* const kQ8_1Mixes[] = {"q4_K_m", "q4_0", "q4_1", "q5_0", "q5_1", "q8_0"};

TEST(GpuForwardDevice, DequantizerIsDequantizeRowBitForBit) {
  REQUIRE_GPU();
  const std::uint64_t seed = fresh_seed();
  for (WeightType t : kAllWeightTypes) {
    const Shape s{5, 4096};
    const auto m = random_quantized_matrix(t, s, seed + static_cast<int>(t));
    void* dm = nullptr;
    int* drow = nullptr;
    float* dy = nullptr;
    ASSERT_EQ(cudaMalloc(&dm, m.size()), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&drow, sizeof(int)), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&dy, s.cols * sizeof(float)), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(dm, m.data(), m.size(), cudaMemcpyHostToDevice), cudaSuccess);
    // Rows 0 and 3, and indices outside the matrix, which read its first and last rows.
    for (int row : {0, 3, -7, 5, 1 << 30}) {
      ASSERT_EQ(cudaMemcpy(drow, &row, sizeof row, cudaMemcpyHostToDevice), cudaSuccess);
      ASSERT_EQ(cuda::poison_device_floats(dy, s.cols), "");
      const Status st = cuda::dequantize_row_at(t, dm, s.rows, drow, dy, s.cols, nullptr);
      ASSERT_TRUE(st.ok()) << st.error;
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << to_string(t) << " row index " << row;
      std::vector<float> got(s.cols), want(s.cols);
      ASSERT_EQ(cudaMemcpy(got.data(), dy, s.cols * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
      const std::int64_t read = row < 0 ? 0 : std::min<std::int64_t>(row, s.rows - 1);
      dequantize_row(t, m.data() + read * row_bytes(t, s.cols), want.data(), s.cols);
      EXPECT_EQ(std::memcmp(got.data(), want.data(), s.cols * sizeof(float)), 0) << to_string(t) << " row " << row;
    }
    cudaFree(dm);
    cudaFree(drow);
    cudaFree(dy);
  }
}

TEST(GpuForwardDevice, F32PlansGiveTheCpuLogits) {
  REQUIRE_GPU();
  std::mt19937 rng(fresh_seed());
  int compared = 0;
  for (const char* arch : kArchs) {
    for (const char* mix : kMixes) {
      const LoadedModel m(testing::synthetic_model(arch, mix));
      const auto cpu_plan = testing::cpu_f32_plan(m.weights);
      std::string missing;
      const auto plan = gpu_plan_for(cpu_plan, ActFormat::F32, missing);
      if (plan.empty()) {
        ADD_FAILURE() << arch << " " << mix << ": no CUDA f32 kernel for " << missing << ", not compared";
        continue;
      }
      const auto tokens = random_tokens(10, m.config.vocab_size, rng);
      CpuForward cpu(m.config, m.weights, cpu_plan, 1, static_cast<int>(tokens.size()));
      GpuForward gpu(m.config, m.weights, plan, options(static_cast<int>(tokens.size())));
      double worst = 0;
      for (int t : tokens) {
        const auto ref = cpu.step(t);
        gpu.step(t);
        const auto got = gpu.logits();
        worst = std::max(worst, nmse({got.begin(), got.end()}, {ref.begin(), ref.end()}));
      }
      std::printf("%s %s: worst NMSE %.3g over %zu positions\n", arch, mix, worst, tokens.size());
      EXPECT_LT(worst, 1e-8) << arch << " " << mix;
      ++compared;
    }
  }
  EXPECT_EQ(compared, static_cast<int>(std::size(kArchs) * std::size(kMixes)));
}

// Int8 activations move every logit a little, so where the CPU's best two tokens are
// close the GPU may pick the other. A pick is wrong only when the CPU scores it lower
// than its own best by more than that noise allows: six times the step's RMS logit
// error. A broken kernel moves the logits far more than its own RMS error lets through.
bool top_within_int8_noise(std::span<const float> ref, std::span<const float> got, int top) {
  double sq = 0;
  for (std::size_t i = 0; i < ref.size(); ++i) sq += (double(got[i]) - ref[i]) * (double(got[i]) - ref[i]);
  const double rms = std::sqrt(sq / static_cast<double>(ref.size()));
  const float best = *std::max_element(ref.begin(), ref.end());
  return top >= 0 && top < static_cast<int>(ref.size()) && ref[top] >= best - 6 * rms;
}

TEST(GpuForwardDevice, Q8_1PlansAgreeOnTheTopTokenWithinInt8Loss) {
  REQUIRE_GPU();
  std::mt19937 rng(fresh_seed());
  int compared = 0;
  for (const char* arch : kArchs) {
    for (const char* mix : kQ8_1Mixes) {
      const LoadedModel m(testing::synthetic_model(arch, mix));
      const auto cpu_plan = testing::cpu_f32_plan(m.weights);
      std::string missing;
      const auto plan = gpu_plan_for(cpu_plan, ActFormat::Q8_1, missing);
      if (plan.empty()) {
        ADD_FAILURE() << arch << " " << mix << ": no CUDA kernel for " << missing << ", not compared";
        continue;
      }
      const auto tokens = random_tokens(12, m.config.vocab_size, rng);
      CpuForward cpu(m.config, m.weights, cpu_plan, 1, static_cast<int>(tokens.size()));
      GpuForward gpu(m.config, m.weights, plan, options(static_cast<int>(tokens.size())));
      double worst = 0;
      int agree = 0, within_noise = 0;
      for (int t : tokens) {
        const auto ref = cpu.step(t);
        const int top = gpu.step(t);
        const auto got = gpu.logits();
        worst = std::max(worst, nmse({got.begin(), got.end()}, {ref.begin(), ref.end()}));
        agree += top == testing::argmax(ref.data(), m.config.vocab_size);
        within_noise += top_within_int8_noise(ref, got, top);
      }
      std::printf("%s %s, Q8_1 plan: top-1 agreement %d/%zu (the rest near ties: %d), worst NMSE %.3g\n", arch, mix,
                  agree, tokens.size(), within_noise - agree, worst);
      EXPECT_LT(worst, 1e-2) << arch << " " << mix;
      EXPECT_EQ(within_noise, static_cast<int>(tokens.size())) << arch << " " << mix << ": a pick beyond int8 noise";
      ++compared;
    }
  }
  EXPECT_EQ(compared, static_cast<int>(std::size(kArchs) * std::size(kQ8_1Mixes)));
}

// Every registered CUDA kernel runs a decode: on a model of its weight type it takes
// every matrix of that type it can (the rest run cuda_kernel_for's f32 kernel), against
// the CPU: f32-activation kernels to float rounding, int8 ones within int8 loss. The
// kernels this device cannot run, or that take no matrix of the model, are named in a skip.
TEST(GpuForwardDevice, EveryCudaKernelDecodes) {
  REQUIRE_GPU();
  std::mt19937 rng(fresh_seed());
  std::vector<const KernelSpec*> kernels;
  // The batch kernels drive no decode matvec (Registry/BatchKernel checks them).
  for (const KernelSpec& k : global_registry().all())
    if (k.backend == Backend::CUDA && k.op != OpKind::MatVecBatch) kernels.push_back(&k);
  std::sort(kernels.begin(), kernels.end(), [](const KernelSpec* a, const KernelSpec* b) { return a->name < b->name; });
  std::string not_decoded;
  int decoded = 0;
  for (const KernelSpec* k : kernels) {
    if (const Availability av = availability(*k); !av.available) {
      not_decoded += (not_decoded.empty() ? "" : ", ") + k->name + " (" + av.reason + ")";
      continue;
    }
    const LoadedModel m(testing::synthetic_model("llama", std::string(to_string(k->weight))));
    const auto cpu_plan = testing::cpu_f32_plan(m.weights);
    int uses = 0;
    std::string missing;
    const auto plan = testing::gpu_plan(cpu_plan, [&](const PlannedMatvec& p) -> const KernelSpec* {
      if (p.weight == k->weight && k->op == OpKind::MatVec && k->supports(p.shape)) {
        ++uses;
        return k;
      }
      const KernelSpec* other = cuda_kernel_for(p, ActFormat::F32);
      if (other == nullptr) missing = std::string(to_string(p.weight)) + " (" + std::string(to_string(p.op)) + ")";
      return other;
    });
    ASSERT_TRUE(missing.empty()) << k->name << ": no CUDA f32 kernel for " << missing;
    if (uses == 0) {
      not_decoded += (not_decoded.empty() ? "" : ", ") + k->name + " (takes no matrix of the toy model)";
      continue;
    }
    const auto tokens = random_tokens(8, m.config.vocab_size, rng);
    CpuForward cpu(m.config, m.weights, cpu_plan, 1, static_cast<int>(tokens.size()));
    GpuForward gpu(m.config, m.weights, plan, options(static_cast<int>(tokens.size())));
    double worst = 0;
    int agree = 0, within_noise = 0;
    for (int t : tokens) {
      const auto ref = cpu.step(t);
      const int top = gpu.step(t);
      const auto got = gpu.logits();
      worst = std::max(worst, nmse({got.begin(), got.end()}, {ref.begin(), ref.end()}));
      agree += top == testing::argmax(ref.data(), m.config.vocab_size);
      within_noise += top_within_int8_noise(ref, got, top);
    }
    std::printf("%s: %d matvecs, top-1 agreement %d/%zu (the rest near ties: %d), worst NMSE %.3g\n",
                k->name.c_str(), uses, agree, tokens.size(), within_noise - agree, worst);
    if (k->act == ActFormat::F32) {
      EXPECT_LT(worst, 1e-8) << k->name;
    } else {
      EXPECT_LT(worst, 1e-2) << k->name;
      EXPECT_EQ(within_noise, static_cast<int>(tokens.size())) << k->name << ": a pick beyond int8 noise";
    }
    ++decoded;
  }
  EXPECT_GT(decoded, 0);
  if (!not_decoded.empty()) GTEST_SKIP() << "not decoded on this device: " << not_decoded;
}

TEST(GpuForwardDevice, GreedyGenerationIsTheCpus) {
  REQUIRE_GPU();
  std::mt19937 rng(fresh_seed());
  for (const char* arch : kArchs) {
    const LoadedModel m(testing::synthetic_model(arch, "q8_0"));
    const auto cpu_plan = testing::cpu_f32_plan(m.weights);
    std::string missing;
    const auto plan = gpu_plan_for(cpu_plan, ActFormat::F32, missing);
    ASSERT_FALSE(plan.empty()) << missing;
    const auto prompt = random_tokens(5, m.config.vocab_size, rng);
    const int n = 24, context = static_cast<int>(prompt.size()) + n;
    CpuForward cpu(m.config, m.weights, cpu_plan, 1, context);
    Sampler greedy(SamplerConfig{});
    GpuForward gpu(m.config, m.weights, plan, options(context));
    std::span<const float> logits;
    int gpu_next = 0;
    for (int t : prompt) {
      logits = cpu.step(t);
      gpu_next = gpu.step(t);
    }
    int cpu_next = greedy.sample(logits);
    int compared = 0;
    for (int i = 0; i < n; ++i) {
      std::vector<float> sorted(logits.begin(), logits.end());
      std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<>());
      if (sorted[0] - sorted[1] <= 1e-4f * std::fabs(sorted[0])) break;  // a near tie may go either way
      ASSERT_EQ(gpu_next, cpu_next) << arch << " token " << i;
      ++compared;
      logits = cpu.step(cpu_next);
      cpu_next = greedy.sample(logits);
      gpu_next = gpu.step(gpu_next);
    }
    // A near tie at the first token would leave nothing compared: the tokens before a
    // tie are the test, so there must be some.
    std::printf("%s: %d greedy tokens identical before the end or a near tie\n", arch, compared);
    EXPECT_GE(compared, 4) << arch << ": a near tie came before enough tokens were compared";
  }
}

TEST(GpuForwardDevice, GraphAndOpByOpStepsAreIdenticalAndTimed) {
  REQUIRE_GPU();
  std::mt19937 rng(fresh_seed());
  const LoadedModel m(testing::synthetic_model("qwen2", "q4_1"));
  std::string missing;
  const auto plan = gpu_plan_for(testing::cpu_f32_plan(m.weights), ActFormat::F32, missing);
  ASSERT_FALSE(plan.empty()) << missing;
  const auto tokens = random_tokens(9, m.config.vocab_size, rng);
  GpuForward graph(m.config, m.weights, plan, options(9, true));
  GpuForward eager(m.config, m.weights, plan, options(9, false));
  GpuForward timed(m.config, m.weights, plan, options(9, true, true));
  EXPECT_TRUE(graph.graph_enabled());
  EXPECT_FALSE(eager.graph_enabled());
  for (int t : tokens) {
    const int a = graph.step(t), b = eager.step(t), c = timed.step(t);
    EXPECT_EQ(a, b);
    EXPECT_EQ(a, c);
    EXPECT_TRUE(same_logits(graph, eager)) << "graph and op by op differ";
  }
  const StepTimes& times = timed.times();
  for (Op p : {Op::Embed, Op::Norm, Op::AttnQkv, Op::QkNormRope, Op::Attention, Op::AttnOut, Op::FfnUpGate,
               Op::Swiglu, Op::FfnDown, Op::LmHead}) {
    EXPECT_GT(times.calls[static_cast<int>(p)], 0) << to_string(p);
    EXPECT_GT(times.seconds[static_cast<int>(p)], 0.0) << to_string(p);
  }
  // Gate and up run stacked, as one ffn_up_gate matvec, and q, k and v (one weight
  // type here) as one attn_qkv matvec; each stacked op's bytes are its parts'.
  for (Op p : {Op::FfnGate, Op::FfnUp, Op::AttnQ, Op::AttnK, Op::AttnV}) {
    EXPECT_EQ(times.calls[static_cast<int>(p)], 0) << to_string(p);
    EXPECT_EQ(timed.part_weight_bytes(p), 0u) << to_string(p);
  }
  std::uint64_t gate_up_bytes = 0, qkv_bytes = 0;
  for (const LayerWeights& l : m.weights.layers) {
    gate_up_bytes += l.ffn_gate->bytes + l.ffn_up->bytes;
    qkv_bytes += l.wq->bytes + l.wk->bytes + l.wv->bytes;
  }
  EXPECT_EQ(timed.part_weight_bytes(Op::FfnUpGate), gate_up_bytes);
  EXPECT_EQ(timed.part_weight_bytes(Op::AttnQkv), qkv_bytes);
  EXPECT_GT(timed.sample_seconds(), 0.0);
  EXPECT_EQ(timed.timed_steps(), static_cast<int>(tokens.size()));
  EXPECT_EQ(graph.times().total(), 0.0) << "no events without op timing";
}

// The fused head step and attention (one kernel per layer, the last split merging the
// head and writing its Q8_1 copy) against the separate kernels: the same tokens and
// logits bit for bit, step after step, from a graph and op by op, with Q8_1 plans (the
// fused Q8_1 copy read by the next matvec) and f32 ones, on every architecture (biases,
// per-head norms, grouped KV heads). Contexts past 16 positions make several splits.
TEST(GpuForwardDevice, FusedAttentionIsTheSeparateKernelsBitForBit) {
  REQUIRE_GPU();
  std::mt19937 rng(fresh_seed());
  int compared = 0;
  for (const char* arch : kArchs) {
    const LoadedModel m(testing::synthetic_model(arch, "q4_K_m"));
    for (ActFormat act : {ActFormat::Q8_1, ActFormat::F32}) {
      std::string missing;
      const auto plan = gpu_plan_for(testing::cpu_f32_plan(m.weights), act, missing);
      ASSERT_FALSE(plan.empty()) << arch << ": " << missing;
      for (bool graph : {true, false}) {
        SCOPED_TRACE(std::string(arch) + (act == ActFormat::Q8_1 ? " q8_1" : " f32") + (graph ? " graph" : " op by op"));
        const int n = 40;
        GpuForwardOptions fused_options = options(n, graph), timed_options = options(n, graph, !graph);
        fused_options.fuse_attention = timed_options.fuse_attention = true;
        GpuForward apart(m.config, m.weights, plan, options(n, graph)), fused(m.config, m.weights, plan, fused_options);
        GpuForward timed(m.config, m.weights, plan, timed_options);
        ASSERT_GT(fused.attention_splits(), 1);
        for (int t : random_tokens(n, m.config.vocab_size, rng)) {
          const int a = apart.step(t), b = fused.step(t), c = timed.step(t);
          ASSERT_EQ(a, b);
          ASSERT_EQ(a, c);
          ASSERT_TRUE(same_logits(apart, fused)) << "fused and separate differ";
        }
        if (!graph) {
          EXPECT_EQ(timed.times().calls[static_cast<int>(Op::QkNormRope)], 0) << "the head step runs inside attention";
          EXPECT_GT(timed.times().calls[static_cast<int>(Op::Attention)], 0);
          EXPECT_EQ(timed.times().calls[static_cast<int>(Op::ActQuant)], 0) << "attention wrote its own Q8_1 copy";
        }
        ++compared;
      }
    }
  }
  EXPECT_EQ(compared, 12);
}

// Switching the attention between the fused kernel and the separate ones in the middle
// of a decode (GpuForward::set_fuse_attention, as decode's trial does), after a reset,
// and back: the same tokens and logits bit for bit as a decode that never switches,
// from graphs (each way captured once) and op by op.
TEST(GpuForwardDevice, SwitchingTheAttentionMidDecodeKeepsItsLogits) {
  REQUIRE_GPU();
  std::mt19937 rng(fresh_seed());
  const LoadedModel m(testing::synthetic_model("llama", "q4_K_m"));
  std::string missing;
  const auto plan = gpu_plan_for(testing::cpu_f32_plan(m.weights), ActFormat::Q8_1, missing);
  ASSERT_FALSE(plan.empty()) << missing;
  for (bool graph : {true, false}) {
    SCOPED_TRACE(graph ? "graph" : "op by op");
    const int n = 24;
    GpuForward plain(m.config, m.weights, plan, options(n, graph));
    GpuForward switching(m.config, m.weights, plan, options(n, graph));
    const std::vector<int> tokens = random_tokens(n, m.config.vocab_size, rng);
    // A first pass that switches every few steps, as a trial does, then a reset.
    for (int i = 0; i < 8; ++i) {
      switching.set_fuse_attention(i / 2 % 2 == 1);
      switching.step(tokens[i]);
    }
    switching.reset();
    for (int i = 0; i < n; ++i) {
      switching.set_fuse_attention(i % 5 < 3);
      ASSERT_EQ(switching.fuse_attention(), i % 5 < 3);
      ASSERT_EQ(plain.step(tokens[i]), switching.step(tokens[i])) << "step " << i;
      ASSERT_TRUE(same_logits(plain, switching)) << "step " << i;
    }
  }
}

// Matvecs launched as programmatic dependents (--overlap-weights: the bulk-copy kernels
// stream their weights while the kernel before them finishes) against plain launches:
// the same kernels, so the same tokens and logits bit for bit, from a graph and op by
// op, with the fused attention and without. A race between a matvec and the kernel it
// overlaps (reading activations, or writing its output, too early) would show here.
// The bulk-copy kernel of each matvec's type where it runs here, else an int8 kernel (an
// f32 one where there is none); `bulk` counts the matvecs on bulk-copy kernels.
std::vector<PlannedMatvec> bulk_copy_plan(const ModelWeights& w, int& bulk) {
  bulk = 0;
  return testing::gpu_plan(testing::cpu_f32_plan(w), [&](const PlannedMatvec& p) {
    const KernelSpec* k = global_registry().find(std::string(to_string(p.weight)) + ".cuda.tma_dp4a_q8_1");
    if (p.op != Op::FfnUpGate && k && k->supports(p.shape) && availability(*k).available) {
      ++bulk;
      return k;
    }
    const KernelSpec* other = cuda_kernel_for(p, ActFormat::Q8_1);
    return other ? other : cuda_kernel_for(p, ActFormat::F32);
  });
}

TEST(GpuForwardDevice, OverlappedMatvecLaunchesAreThePlainOnesBitForBit) {
  REQUIRE_GPU();
  std::mt19937 rng(fresh_seed());
  const LoadedModel m(testing::synthetic_model("llama", "q4_K_m"));
  int bulk = 0;
  const auto plan = bulk_copy_plan(m.weights, bulk);
  std::printf("%d of %zu matvecs on bulk-copy kernels (the others ignore the overlap)\n", bulk, plan.size());
  int compared = 0;
  for (bool fused : {false, true}) {
    for (bool graph : {true, false}) {
      SCOPED_TRACE(std::string(fused ? "fused attention" : "separate attention") + (graph ? ", graph" : ", op by op"));
      GpuForwardOptions plain_options = options(24, graph), overlap_options = options(24, graph);
      plain_options.fuse_attention = overlap_options.fuse_attention = fused;
      overlap_options.overlap_weights = true;
      GpuForward plain(m.config, m.weights, plan, plain_options), overlap(m.config, m.weights, plan, overlap_options);
      for (int t : random_tokens(24, m.config.vocab_size, rng)) {
        ASSERT_EQ(plain.step(t), overlap.step(t));
        ASSERT_TRUE(same_logits(plain, overlap)) << "overlapped launches differ";
      }
      ++compared;
    }
  }
  EXPECT_EQ(compared, 4);
}

// The Q8_1 plan with every int8 matvec routed at k to the f32 kernel the f32 plan runs.
std::vector<PlannedMatvec> routed_plan(const std::vector<PlannedMatvec>& q8_plan, double k) {
  auto plan = q8_plan;
  for (PlannedMatvec& p : plan)
    if (p.kernel->act == ActFormat::Q8_1) {
      p.outlier_kernel = cuda_kernel_for(p, ActFormat::F32);
      p.outlier_k = k;
    }
  return plan;
}

TEST(GpuForwardDevice, OutlierRoutingPicksTheKernelOnTheDeviceInGraphsAndOpByOp) {
  REQUIRE_GPU();
  std::mt19937 rng(fresh_seed());
  const LoadedModel m(testing::synthetic_model("llama", "q4_K_m"));
  const auto cpu_plan = testing::cpu_f32_plan(m.weights);
  std::string missing;
  const auto f32_plan = gpu_plan_for(cpu_plan, ActFormat::F32, missing);
  ASSERT_FALSE(f32_plan.empty()) << missing;
  const auto q8_plan = gpu_plan_for(cpu_plan, ActFormat::Q8_1, missing);
  if (q8_plan.empty()) GTEST_SKIP() << "no CUDA Q8_1 kernel for " << missing;
  const auto tokens = random_tokens(8, m.config.vocab_size, rng);
  const int n = static_cast<int>(tokens.size());
  auto logits_of = [](GpuForward& g) {
    const auto l = g.logits();
    return std::vector<float>(l.begin(), l.end());
  };
  // k = 0 sends every vector to the f32 siblings, a k no vector reaches sends none:
  // the f32 and the Q8_1 plans' logits, bit for bit, from the graph and op by op.
  for (const double k : {0.0, 1e9}) {
    for (const bool graph : {true, false}) {
      GpuForward routed(m.config, m.weights, routed_plan(q8_plan, k), options(n, graph));
      GpuForward same(m.config, m.weights, k == 0 ? f32_plan : q8_plan, options(n, graph));
      for (int t : tokens) {
        EXPECT_EQ(routed.step(t), same.step(t));
        EXPECT_EQ(logits_of(routed), logits_of(same)) << "k " << k << (graph ? " graph" : " op by op");
      }
      const StepTimes& r = routed.routing();
      std::int64_t routable = 0, sent = 0;
      for (int i = 0; i < static_cast<int>(Op::kCount); ++i) {
        routable += r.routable[i];
        sent += r.routed[i];
      }
      EXPECT_GT(routable, 0);
      EXPECT_EQ(sent, k == 0 ? routable : 0) << (graph ? "graph" : "op by op");
    }
  }
  // Thresholds between: the graph's if/else nodes and the host's choice agree, call
  // for call (the counts) and bit for bit (the logits).
  for (const double k : {3.0, 4.0}) {
    GpuForward graph(m.config, m.weights, routed_plan(q8_plan, k), options(n, true));
    GpuForward eager(m.config, m.weights, routed_plan(q8_plan, k), options(n, false));
    for (int t : tokens) {
      EXPECT_EQ(graph.step(t), eager.step(t));
      EXPECT_EQ(logits_of(graph), logits_of(eager)) << "k " << k;
    }
    EXPECT_EQ(graph.routing().routed, eager.routing().routed) << "k " << k;
    EXPECT_EQ(graph.routing().routable, eager.routing().routable) << "k " << k;
    const int tests = static_cast<int>(Op::OutlierTest);
    EXPECT_EQ(graph.routing().calls[tests], eager.routing().calls[tests]);
    std::int64_t routable = 0, sent = 0;
    for (int i = 0; i < static_cast<int>(Op::kCount); ++i) {
      routable += graph.routing().routable[i];
      sent += graph.routing().routed[i];
    }
    std::printf("routing at k %.1f: %lld of %lld int8 calls sent to the f32 siblings, %lld vectors tested\n", k,
                static_cast<long long>(sent), static_cast<long long>(routable),
                static_cast<long long>(graph.routing().calls[tests]));
    // Mixed: some vectors trip and some do not, so both bodies of the if/else nodes ran.
    EXPECT_GT(sent, 0) << "k " << k << ": no vector tripped";
    EXPECT_LT(sent, routable) << "k " << k << ": every vector tripped";
  }
}

// Overlapped launches with outlier routing in a graph: the matvec after an if/else node
// has a conditional node before it, not a kernel, so it launches without the overlap.
// The bulk-copy plan's int8 matvecs routed at thresholds some vectors reach: the same
// tokens and logits as the plain launches, bit for bit.
TEST(GpuForwardDevice, OverlappedLaunchesAfterRoutingNodesAreThePlainOnesBitForBit) {
  REQUIRE_GPU();
  std::mt19937 rng(fresh_seed());
  const LoadedModel m(testing::synthetic_model("llama", "q4_K_m"));
  int bulk = 0;
  const auto plan = bulk_copy_plan(m.weights, bulk);
  if (bulk == 0) GTEST_SKIP() << "no bulk-copy kernel runs here (they need sm_90)";
  const auto tokens = random_tokens(12, m.config.vocab_size, rng);
  const int n = static_cast<int>(tokens.size());
  for (const double k : {3.0, 4.0}) {
    SCOPED_TRACE("k " + std::to_string(k));
    GpuForwardOptions overlap_options = options(n, true);
    overlap_options.overlap_weights = true;
    GpuForward plain(m.config, m.weights, routed_plan(plan, k), options(n, true));
    GpuForward overlap(m.config, m.weights, routed_plan(plan, k), overlap_options);
    for (int t : tokens) {
      ASSERT_EQ(plain.step(t), overlap.step(t));
      ASSERT_TRUE(same_logits(plain, overlap)) << "overlapped launches differ";
    }
    EXPECT_EQ(plain.routing().routed, overlap.routing().routed);
    std::int64_t routable = 0, sent = 0;
    for (int i = 0; i < static_cast<int>(Op::kCount); ++i) {
      routable += overlap.routing().routable[i];
      sent += overlap.routing().routed[i];
    }
    EXPECT_GT(sent, 0) << "no vector tripped: no matvec followed a taken routing branch";
    EXPECT_LT(sent, routable) << "every vector tripped";
  }
}

// The tuned variants, not only the baselines, inside the decode step: op by op, in a
// CUDA graph, and (the int8 ones) as the int8 body of a routing if/else node whose f32
// body is a multi-warp kernel. Each family runs the Q4_K tensors of a Q4_K_M model, and
// its Q6_K sibling where one exists.
struct KernelFamily {
  const char* q4_K;
  const char* q6_K;  // nullptr: the first CUDA kernel of the activation format
  ActFormat act;
};
const KernelFamily kFamilies[] = {
    {"vectorized_f32", nullptr, ActFormat::F32},
    {"wide_f32", nullptr, ActFormat::F32},
    {"coalesced_f32", nullptr, ActFormat::F32},
    {"chunked_f32", nullptr, ActFormat::F32},
    {"warpx2_f32", "warpx2_f32", ActFormat::F32},
    {"warpx3_f32", "warpx3_f32", ActFormat::F32},
    {"warpx4_f32", "warpx4_f32", ActFormat::F32},
    {"dp4a_q8_1", "dp4a_q8_1", ActFormat::Q8_1},
    {"halfwarp_dp4a_q8_1", "halfwarp_dp4a_q8_1", ActFormat::Q8_1},
    {"warpx2_dp4a_q8_1", nullptr, ActFormat::Q8_1},
    {"warpx3_dp4a_q8_1", nullptr, ActFormat::Q8_1},
    {"warpx4_dp4a_q8_1", nullptr, ActFormat::Q8_1},
    {"quarterwarp_dp4a_q8_1", "quarterwarp_dp4a_q8_1", ActFormat::Q8_1},
    {"tma_dp4a_q8_1", "tma_dp4a_q8_1", ActFormat::Q8_1},
};

std::vector<PlannedMatvec> family_plan(const std::vector<PlannedMatvec>& cpu, const KernelFamily& f) {
  return testing::gpu_plan(cpu, [&](const PlannedMatvec& p) -> const KernelSpec* {
    // The family's kernel where it takes the shape (the Q6_K bulk-copy kernel wants a
    // matrix of whole 16-byte units); test runs check that Q4_K matvecs ran the family.
    const auto family = [&](const char* type, const char* variant) -> const KernelSpec* {
      const KernelSpec* k = global_registry().find(std::string(type) + ".cuda." + variant);
      return k && k->supports(p.shape) ? k : nullptr;
    };
    if (p.weight == WeightType::Q4_K)
      if (const KernelSpec* k = family("q4_K", f.q4_K)) return k;
    if (p.weight == WeightType::Q6_K && f.q6_K)
      if (const KernelSpec* k = family("q6_K", f.q6_K)) return k;
    const KernelSpec* k = cuda_kernel_for(p, f.act);
    return k ? k : cuda_kernel_for(p, ActFormat::F32);
  });
}

TEST(GpuForwardDevice, TunedKernelsRunInAStepAGraphAndAConditionalNode) {
  REQUIRE_GPU();
  std::mt19937 rng(fresh_seed());
  const LoadedModel m(testing::synthetic_model("llama", "q4_K_m"));
  const auto cpu_plan = testing::cpu_f32_plan(m.weights);
  const auto tokens = random_tokens(8, m.config.vocab_size, rng);
  const int n = static_cast<int>(tokens.size());
  auto logits_of = [](GpuForward& g) {
    const auto l = g.logits();
    return std::vector<float>(l.begin(), l.end());
  };
  const KernelSpec* f32_sibling = global_registry().find("q4_K.cuda.warpx3_f32");
  ASSERT_NE(f32_sibling, nullptr);
  for (const KernelFamily& f : kFamilies) {
    const KernelSpec* q4 = global_registry().find(std::string("q4_K.cuda.") + f.q4_K);
    ASSERT_NE(q4, nullptr) << f.q4_K;
    if (const Availability a = availability(*q4); !a.available) {
      std::printf("%s: not run here (%s)\n", q4->name.c_str(), a.reason.c_str());
      continue;
    }
    const auto plan = family_plan(cpu_plan, f);
    ASSERT_EQ(plan.size(), cpu_plan.size()) << f.q4_K << ": an entry has no kernel";
    const bool ran_family = std::any_of(plan.begin(), plan.end(), [&](const PlannedMatvec& p) {
      return p.kernel->name == std::string("q4_K.cuda.") + f.q4_K;
    });
    ASSERT_TRUE(ran_family) << f.q4_K << ": the model has no Q4_K matvec";
    CpuForward cpu(m.config, m.weights, cpu_plan, 1, n);
    GpuForward graph(m.config, m.weights, plan, options(n, true));
    GpuForward eager(m.config, m.weights, plan, options(n, false));
    double worst = 0;
    int agree = 0;
    for (int t : tokens) {
      const auto ref = cpu.step(t);
      const int a = graph.step(t), b = eager.step(t);
      EXPECT_EQ(a, b) << f.q4_K;
      const auto la = logits_of(graph);
      EXPECT_TRUE(la == logits_of(eager)) << f.q4_K << ": graph and op by op differ";
      worst = std::max(worst, nmse(la, {ref.begin(), ref.end()}));
      agree += a == testing::argmax(ref.data(), m.config.vocab_size);
    }
    std::printf("%s: worst logits NMSE %.3g against the CPU, top-1 %d/%d\n", f.q4_K, worst, agree, n);
    if (f.act == ActFormat::F32) {
      EXPECT_LT(worst, 1e-8) << f.q4_K;
    } else {
      EXPECT_LT(worst, 1e-2) << f.q4_K;
      EXPECT_GE(agree, n - 2) << f.q4_K;
      // The int8 kernel as the body of a conditional node, its f32 sibling the other.
      auto routed = plan;
      for (PlannedMatvec& p : routed)
        if (p.weight == WeightType::Q4_K) {
          p.outlier_kernel = f32_sibling;
          p.outlier_k = 3.0;
        }
      GpuForward rg(m.config, m.weights, routed, options(n, true));
      GpuForward re(m.config, m.weights, routed, options(n, false));
      for (int t : tokens) {
        EXPECT_EQ(rg.step(t), re.step(t)) << f.q4_K;
        EXPECT_TRUE(logits_of(rg) == logits_of(re)) << f.q4_K << " routed: graph and op by op differ";
      }
      EXPECT_EQ(rg.routing().routed, re.routing().routed) << f.q4_K;
    }
  }
}

TEST(GpuForwardDevice, ResetReplaysAndBoundsAreErrors) {
  REQUIRE_GPU();
  std::mt19937 rng(fresh_seed());
  const LoadedModel m(testing::synthetic_model("llama", "q5_0"));
  std::string missing;
  const auto plan = gpu_plan_for(testing::cpu_f32_plan(m.weights), ActFormat::F32, missing);
  ASSERT_FALSE(plan.empty()) << missing;
  const auto tokens = random_tokens(4, m.config.vocab_size, rng);
  GpuForward gpu(m.config, m.weights, plan, options(4));
  std::vector<std::vector<float>> first;
  for (int t : tokens) {
    gpu.step(t);
    const auto l = gpu.logits();
    first.emplace_back(l.begin(), l.end());
  }
  EXPECT_THROW(gpu.step(tokens[0]), ContextFull);
  gpu.reset();
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    gpu.step(tokens[i]);
    const auto l = gpu.logits();
    EXPECT_EQ(std::vector<float>(l.begin(), l.end()), first[i]) << "position " << i;
  }
  gpu.reset();
  EXPECT_THROW(gpu.step(m.config.vocab_size), std::out_of_range);
  EXPECT_THROW(gpu.step(-1), std::out_of_range);
  EXPECT_EQ(gpu.position(), 0);
}

TEST(GpuForwardDevice, DeviceSamplerIsItsHostReplay) {
  REQUIRE_GPU();
  std::mt19937 rng(fresh_seed());
  const LoadedModel m(testing::synthetic_model("qwen3", "f16"));
  std::string missing;
  const auto plan = gpu_plan_for(testing::cpu_f32_plan(m.weights), ActFormat::F32, missing);
  ASSERT_FALSE(plan.empty()) << missing;
  SamplerConfig sc;
  sc.temperature = 0.8f;
  sc.top_k = 40;
  sc.top_p = 0.9f;
  sc.seed = rng();
  const int steps = 40;
  GpuForward gpu(m.config, m.weights, plan, options(steps, true, false, sc));
  cuda::SampleParams p;
  p.temperature = sc.temperature;
  p.top_k = sc.top_k;
  p.top_p = sc.top_p;
  p.seed = sc.seed;
  auto scratch = std::make_unique<cuda::SampleScratch>();
  cuda::HostTeam team;
  int token = 1, agree = 0;
  for (int pos = 0; pos < steps; ++pos) {
    const int next = gpu.step(token);
    const auto logits = gpu.logits();
    agree += next == cuda::sample_tokens(team, *scratch, logits.data(), m.config.vocab_size, p, pos);
    token = next;
  }
  // expf may differ by an ulp between host and device: a weight on a draw's edge may move.
  EXPECT_GE(agree, steps - 1);
}

TEST(GpuForwardDevice, BytesPerTokenAndMemoryAreReported) {
  REQUIRE_GPU();
  const LoadedModel m(testing::synthetic_model("llama", "q4_0"));
  const auto cpu_plan = testing::cpu_f32_plan(m.weights);
  std::string missing;
  const auto plan = gpu_plan_for(cpu_plan, ActFormat::F32, missing);
  ASSERT_FALSE(plan.empty()) << missing;
  const CpuForward cpu(m.config, m.weights, cpu_plan, 1, 16);
  GpuForward gpu(m.config, m.weights, plan, options(16));
  for (int pos : {0, 9}) EXPECT_EQ(gpu.bytes_per_token(pos), cpu.bytes_per_token(pos));
  EXPECT_GE(gpu.memory().weights, m.weights.token_embd->bytes);
  EXPECT_EQ(gpu.memory().context, 16);
  EXPECT_FALSE(gpu.device_name().empty());
  EXPECT_GE(gpu.attention_splits(), 1);
}

#else

TEST(GpuForwardDevice, NeedsCuda) { GTEST_SKIP() << "no CUDA device: built with QMV_CUDA=OFF"; }

#endif

}  // namespace
}  // namespace qmv
