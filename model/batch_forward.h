// B sequences decoded together on the CPU: each step takes one token of every sequence
// and runs each matvec once for all of them, on a batch kernel (OpKind::MatVecBatch)
// that reads the weights once for the B activation vectors. The embedding, norms,
// RoPE, attention and SwiGLU run per sequence, each over its own KV cache at its own
// position, so sequences may be at different points (one still in its prompt, another
// generating).
//
// The order of ops is model/step.h's decode_step, as in the one-sequence CpuForward;
// every buffer of the step program holds B vectors back to back, and each op here runs
// over all of them.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <span>
#include <utility>
#include <vector>

#include "model/config.h"
#include "model/forward.h"
#include "model/plan.h"
#include "model/step.h"

namespace qmv {

// The plan of a batch decode: each matvec of `plan` (unfused: a batch runs gate and up
// apart) on the kernel that takes its `batch` vectors soonest.
//
// A matvec `auto` decided (its `why` is not "plan") is decided again by `speeds` (the
// harness's tuning store or a bench CSV, KernelSpeed::n telling the counts apart): the
// candidates are the batch kernels measured at its own shape and `threads` with
// `batch` vectors per call, and its one-vector kernel called `batch` times (its time
// at n = 1 times `batch`), so that a batch kernel runs only where it beats that. The
// fastest wins; the runner-up and the figure's source are kept as resolve_plan keeps
// them. A figure's GB/s is of one batch call: the weights once and the `batch` vectors,
// over the time the `batch` vectors take. Without the one-vector kernel's time at the
// shape, the batch kernels measured are weighed among themselves.
//
// A matvec the plan names, or one without a batch figure at its shape (the static
// plan passes no speeds), takes the static order: its own kernel if it is a batch
// kernel that takes `batch` vectors, else a batch kernel of its weight type that does
// and runs here, in this order: one reading the same activation format, the one with
// the most CPU features (the most specialised), the first by name. A matvec with no
// such kernel keeps its one-vector kernel, called once per sequence; `why` says which.
// Throws PlanError for a fused entry.
std::vector<PlannedMatvec> batch_plan(const std::vector<PlannedMatvec>& plan, int batch, int threads = 1,
                                      const std::vector<KernelSpeed>& speeds = {});

class BatchCpuForward {
 public:
  // `plan`: batch_plan's output; the weights are read where the model's tensors are
  // (a batch kernel with a weight transform makes its copy when the forward is built).
  // Throws PlanError for a plan this forward cannot run (a fused op, outlier routing).
  BatchCpuForward(const LoadedModel& model, const std::vector<PlannedMatvec>& plan, int batch, int threads,
                  int context = 0);

  // Runs tokens[b] at sequence b's next position, for every b < batch(); returns the
  // logits, sequence b's at [b * vocab, (b + 1) * vocab) (valid until the next call).
  // Throws ContextFull when a sequence's cache is full, std::out_of_range for a token
  // outside the vocabulary, std::invalid_argument for a wrong number of tokens.
  std::span<const float> step(std::span<const int> tokens);
  int batch() const { return batch_; }
  int position(int sequence) const { return pos_[static_cast<std::size_t>(sequence)]; }
  int context() const { return context_; }

  const StepTimes& times() const { return times_; }
  void clear_times() { times_.clear(); }
  // What one step reads: every weight once, for all the sequences, and each sequence's
  // KV cache up to its position.
  std::uint64_t bytes_per_step() const;
  std::uint64_t weight_bytes() const { return bound_.weight_bytes; }
  std::uint64_t kv_cache_bytes() const { return kv_cache_.size() * sizeof(float); }
  const CpuForward::WeightRepack& weight_repack() const { return repack_; }

 private:
  ModelConfig c_;
  int batch_, threads_;
  bool avx2_exp_;
  int context_;
  std::vector<int> pos_, tokens_;
  BoundModel bound_;
  std::size_t cache_floats_ = 0;  // one sequence's keys and values
  std::vector<float> kv_cache_;   // batch_ sequences' caches back to back
  // Activations: batch_ vectors back to back each; the program points at the first.
  std::vector<float> x_, xn_, q_, k_, v_, att_, att_out_, gate_, up_, ffn_out_, logits_, scores_;
  std::vector<float> rope_cos_, rope_sin_;  // [sequence][rope_dim / 2]
  StepProgram program_;
  // The vectors the next matvecs read, and their quantized copies (batch_ back to back).
  const float* activation_x_ = nullptr;
  std::int64_t activation_n_ = 0;
  std::array<std::vector<std::uint8_t>, 3> quantized_;
  std::array<bool, 3> quantized_ready_{};
  std::vector<std::uint8_t> staging_;  // quantize_to_shared's, the main thread's own
  PreparedWeightCache prepared_weights_;
  CpuForward::WeightRepack repack_;
  StepTimes times_;

  template <class Exec>
  friend void decode_step(Exec& e, const StepProgram& p);
  void embed();
  void rms_norm(float* x, const float* residual, const float* weight, float* y, int n);
  void set_activation(const float* x, std::int64_t n);
  void matvec(const MatvecOp& m, float* y, float* y2 = nullptr);
  void head_step(const LayerOps& l);
  void attention(const LayerOps& l);
  void swiglu(float* gate, const float* up, int n);
  void sample(const float*, int) {}  // the caller samples from step()'s logits

  const void* activation(ActFormat f, std::size_t& bytes_per_vector);
  template <class Fn>
  void timed(Op op, Fn&& fn);
};

}  // namespace qmv
