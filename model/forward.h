// The CPU forward pass of a llama-family model, one token at a time, over a KV cache.
//
// Every matvec runs the kernel the resolved plan chose for its op, weight type and
// shape, through the same `invoke` the harness checks and times. An activation vector
// is prepared once in each format its readers want (f32, Q8_K, Q8_1), so q, k and v
// share one quantization, and so do gate and up.
//
// With outlier routing in the plan, a matvec whose kernel reads int8 activations runs
// its f32 sibling instead when the activation vector has max |x| > k * rms(x)
// (kernels/outliers.h). Each vector is tested once, by its first routed reader, and
// the verdict serves every matvec that reads it (q, k, v; gate and up).
//
// Reads top to bottom like a single-file runner: embedding lookup, then per layer
// RMSNorm -> q,k,v (+bias, +per-head q/k norm) -> RoPE -> causal GQA attention over
// the cache -> output projection -> residual, RMSNorm -> SwiGLU FFN -> residual; then
// the final norm and lm_head.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/plan.h"

namespace qmv {

// Where decode time goes, in the order the breakdown prints.
enum class StepPart {
  Embed, Norm, ActQuant, OutlierTest, AttnQ, AttnK, AttnV, QkNormRope, Attention, AttnOut, FfnGate, FfnUp,
  FfnUpGate, Swiglu, FfnDown, LmHead, kCount
};
std::string_view to_string(StepPart p);
// True for the parts that are matvecs (the plan's ops).
bool is_matvec(StepPart p);

struct StepTimes {
  std::array<double, static_cast<int>(StepPart::kCount)> seconds{};
  std::array<std::int64_t, static_cast<int>(StepPart::kCount)> calls{};
  // Per matvec part, with outlier routing: the calls that could be routed (an int8
  // kernel with an f32 sibling) and those that were.
  std::array<std::int64_t, static_cast<int>(StepPart::kCount)> routable{};
  std::array<std::int64_t, static_cast<int>(StepPart::kCount)> routed{};
  void clear() { *this = {}; }
  double total() const;
};

struct ContextFull : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class CpuForward {
 public:
  // `plan` is resolve_plan's output for these weights; `context` bounds the KV cache
  // (0: the model's context length). Throws PlanError when a matvec of the model has
  // no entry in the plan.
  CpuForward(const ModelConfig& config, const ModelWeights& weights, const std::vector<PlannedMatvec>& plan,
             int threads, int context = 0);

  // Runs `token` at the next position and returns the logits (valid until the next
  // call). Throws ContextFull when the cache is full, std::out_of_range for a token
  // outside the vocabulary.
  std::span<const float> step(int token);
  int position() const { return pos_; }
  int context() const { return context_; }
  void reset() { pos_ = 0; }

  const StepTimes& times() const { return times_; }
  void clear_times() { times_.clear(); }

  // Bytes one decode step must read from memory at position `pos`: every weight a
  // matvec reads, one embedding row, and the KV cache up to pos (the roofline).
  std::uint64_t bytes_per_token(int pos) const;
  std::uint64_t weight_bytes() const { return weight_bytes_; }
  // Weight bytes the matvecs of one part read per step (0 for other parts).
  std::uint64_t part_weight_bytes(StepPart p) const { return part_bytes_[static_cast<int>(p)]; }

 private:
  struct Matvec {
    const KernelSpec* kernel = nullptr;
    Shape shape;
    const void* w = nullptr;
    std::size_t w_bytes = 0;
    const void* w2 = nullptr;  // fused: the second matrix (up, when w is gate)
    std::size_t w2_bytes = 0;
    StepPart part = StepPart::AttnQ;
    // Outlier routing: the f32 sibling (a plain kernel runs once per matrix of a fused
    // op) and its threshold; nullptr when the matvec is not routed.
    const KernelSpec* outlier_kernel = nullptr;
    double outlier_k = 0;
  };
  struct Layer {
    const float *attn_norm, *ffn_norm, *bq, *bk, *bv, *q_norm, *k_norm;
    Matvec q, k, v, o, gate, up, up_gate, down;
    bool fused = false;
  };
  // One activation vector, prepared lazily in each format a reader asks for.
  struct Prepared {
    const float* x = nullptr;
    std::int64_t n = 0;
    std::array<std::vector<std::uint8_t>, 3> quantized;  // by ActFormat; F32 unused
    std::array<bool, 3> ready{};
    // The outlier test's verdict, once made, and the k it was made at.
    bool outlier_tested = false;
    double outlier_k = 0;
    bool outlier = false;
  };

  ModelConfig c_;
  const ModelWeights& weights_;
  int threads_;
  int context_;
  int pos_ = 0;
  std::vector<Layer> layers_;
  Matvec lm_head_;
  WeightType embd_type_;
  std::size_t embd_row_bytes_ = 0;
  const float* output_norm_ = nullptr;
  std::uint64_t weight_bytes_ = 0;
  std::array<std::uint64_t, static_cast<int>(StepPart::kCount)> part_bytes_{};

  // Activations of one step.
  std::vector<float> x_, xn_, q_, k_, v_, att_, att_out_, gate_, up_, ffn_out_, logits_, scores_;
  std::vector<float> rope_cos_, rope_sin_, inv_freq_;
  std::vector<float> k_cache_, v_cache_;  // [layer][position][kv width]
  Prepared prepared_;
  StepTimes times_;

  Matvec bind(const std::vector<PlannedMatvec>& plan, const std::string& op, const gguf::Tensor* t,
              StepPart part) const;
  void prepare(const float* x, std::int64_t n);
  const void* activation(ActFormat f, std::size_t& bytes);
  void matvec(const Matvec& m, float* y, float* y2 = nullptr);
  // Whether the prepared vector trips the outlier test at k (tested once per k).
  bool has_outliers(double k);
  void invoke_kernel(const KernelSpec& kernel, const Matvec& m, const void* w, std::size_t w_bytes, const void* w2,
                     std::size_t w2_bytes, float* y, float* y2);
  void attention(int layer);
  void rope(float* v, int n_heads) const;
};

}  // namespace qmv
