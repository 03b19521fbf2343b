// The CPU forward pass of a llama-family model, one token at a time, over a KV cache.
//
// Every matvec runs the kernel the resolved plan chose for its op, weight type and
// shape, through the same `invoke` the harness checks and times. An activation vector
// is quantized once into each format its readers want (f32, Q8_K, Q8_1), so q, k and v
// share one quantization, and so do gate and up.
//
// With outlier routing in the plan, a matvec whose kernel reads int8 activations runs
// its f32 sibling instead when the activation vector has max |x| > k * rms(x)
// (kernels/outliers.h). Each vector is tested once, by its first routed reader, and
// the verdict serves every matvec that reads it (q, k, v; gate and up).
//
// The order of ops is model/step.h's decode_step, which the GPU runs too; this file
// says what each op does on the CPU.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <map>
#include <set>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/weight_memory.h"
#include "model/config.h"
#include "model/kernel_trials.h"
#include "model/ops.h"
#include "model/plan.h"
#include "model/step.h"

namespace qmv {

// Where decode time goes, per op of model/ops.h (the order the breakdown prints).
struct StepTimes {
  std::array<double, static_cast<int>(Op::kCount)> seconds{};
  std::array<std::int64_t, static_cast<int>(Op::kCount)> calls{};
  // Per matvec part: the matvecs the CPU forward ran (a call group, set_call_groups, is
  // one call of its group's op and a matvec of each of its parts), and, with outlier
  // routing, those that could be routed (an int8 kernel with an f32 sibling) and those
  // that were.
  std::array<std::int64_t, static_cast<int>(Op::kCount)> matvecs{};
  std::array<std::int64_t, static_cast<int>(Op::kCount)> routable{};
  std::array<std::int64_t, static_cast<int>(Op::kCount)> routed{};
  void clear() { *this = {}; }
  // One call of `op` that took `s` seconds.
  void add(Op op, double s) {
    seconds[static_cast<int>(op)] += s;
    ++calls[static_cast<int>(op)];
  }
  double total() const;
};

// Kernels with a weight transform (KernelSpec::prepare): their copy of each matrix
// they read, made the first time a kernel meets the matrix and kept while the forward
// lives. Keyed by the transform and w alone: kernels that share a prepare() share its
// copy (reads_same_weights), and a fused kernel's w2 is the one matrix that goes with
// its w.
class PreparedWeightCache {
 public:
  // The copy `kernel` made of w (and w2); made now if there is none. Throws
  // std::runtime_error naming the kernel when it cannot be made.
  const void* get(const KernelSpec& kernel, Shape shape, const void* w, std::size_t w_bytes,
                  const void* w2 = nullptr, std::size_t w2_bytes = 0);
  int matrices() const;  // the matrices the copies hold (a fused copy holds two)
  std::uint64_t bytes() const;

 private:
  using Transform = Status (*)(const MatVecArgs&, PreparedWeights*);
  struct Copy {
    PreparedMatrix weights;
    int matrices = 1;  // a fused kernel's copy holds two
  };
  std::map<std::pair<Transform, const void*>, Copy> copies_;
};

struct ContextFull : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Where a CpuForward's weights live while it runs.
enum class WeightResidence {
  // Read where the tensors point (a mapped file's page cache, or a copy the caller
  // made); only the repacked copies of kernels with a weight transform are made.
  InPlace,
  // Exactly one copy of each tensor the step reads, in weight memory
  // (kernels/weight_memory.h, 2 MiB pages where granted): a matrix whose every reader
  // (the planned kernel, and its outlier sibling) has a weight transform is held only
  // in its kernels' layouts, made straight from the file; every other tensor (plain
  // matvecs, norms, biases, the token embedding, which the lookup reads plain) is
  // copied in its own layout. Each tensor's pages of a mapped file are given back as
  // soon as its copy is made, so the process never holds much more than its copies.
  Resident,
};

class CpuForward {
 public:
  // `plan` is resolve_plan's output for these weights; `context` bounds the KV cache
  // (0: the model's context length). Throws PlanError when a matvec of the model has
  // no entry in the plan.
  CpuForward(const ModelConfig& config, const ModelWeights& weights, const std::vector<PlannedMatvec>& plan,
             int threads, int context = 0);
  // The same over a model's opened file, with its weights where `residence` says. A
  // mapped file's pages of every tensor the forward no longer reads there (copied, or
  // repacked) are given back. Throws std::bad_alloc when the copies do not fit.
  CpuForward(const LoadedModel& model, const std::vector<PlannedMatvec>& plan, int threads, int context = 0,
             WeightResidence residence = WeightResidence::Resident);

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
  std::uint64_t weight_bytes() const { return bound_.weight_bytes; }
  // Weight bytes the matvecs of one op read per step (0 for other ops).
  std::uint64_t part_weight_bytes(Op p) const { return part_bytes_[static_cast<int>(p)]; }

  // Call groups: with two threads or more, the matvecs that read one activation vector
  // (a layer's q, k and v; gate and up where they are two matvecs) run in one parallel
  // region, each thread taking its share of every matrix in turn with no barrier
  // between them (kernels/cpu_tiling.h, set_in_call_team), where all their kernels
  // (and outlier siblings) join call teams (KernelSpec::joins_call_teams). A group's
  // time is one op's, the stacked op the GPU reports (attn_qkv, ffn_up_gate), and so
  // are its weight bytes. On by default; off, each matvec opens a region of its own.
  void set_call_groups(bool on);
  bool call_groups() const { return call_groups_; }

  // Trials in the run (model/kernel_trials.h): where the plan holds trial kernels, the
  // steps try them beside auto's pick and keep the fastest. Off by default: a step's
  // kernels are then always the plan's.
  void set_kernel_trials(bool on) { trials_on_ = on; }
  const KernelTrials& kernel_trials() const { return trials_; }

  // The weight transforms of the plan's kernels (e.g. row-interleaved copies), made
  // when the forward is built, before any step: how many matrices, the memory the
  // copies hold beside the model's own weights, and the time it took.
  struct WeightRepack {
    int matrices = 0;
    std::uint64_t bytes = 0;
    double seconds = 0;
  };
  const WeightRepack& weight_repack() const { return repack_; }
  // The prepared copies held now: weight_repack()'s, and any a kernel made later on
  // meeting a matrix it had none of (none does: trials share the pick's copies).
  int prepared_matrices() const { return prepared_weights_.matrices(); }
  std::uint64_t prepared_bytes() const { return prepared_weights_.bytes(); }

  // Where the weights the step reads are, and what holding them costs.
  struct WeightResidency {
    WeightResidence residence = WeightResidence::InPlace;
    int tensors = 0;                // every tensor the step reads, each once
    std::uint64_t weight_bytes = 0;  // their bytes as the file holds them
    // Matrices read only in their kernels' layouts (every reader has a weight
    // transform): how many and their bytes in the file. Nothing else holds them.
    int repacked_only = 0;
    std::uint64_t repacked_only_file_bytes = 0;
    // Resident: tensors copied in their own layout, and their bytes.
    int plain_tensors = 0;
    std::uint64_t plain_bytes = 0;
    // InPlace: the bytes read where the tensors point.
    std::uint64_t in_place_bytes = 0;
    std::uint64_t repacked_bytes = 0;  // weight_repack().bytes
    std::uint64_t released_bytes = 0;  // a mapped file's pages given back once copied
    double seconds = 0;                // copies and repacks
    // Resident: the share of all weight memory in 2 MiB pages once made
    // (weight_memory_huge_page_share); negative where unknown or in place.
    double huge_page_share = -1;
    // The forward's own copies of weights: repacked and plain.
    std::uint64_t copied_bytes() const { return repacked_bytes + plain_bytes; }
  };
  const WeightResidency& weight_residency() const { return residency_; }
  std::uint64_t kv_cache_bytes() const { return kv_cache_.size() * sizeof(float); }
  // Reads one byte of every page of the tensors the step reads in place, so that the
  // first step's time is not the time of paging them in; returns their bytes (0 when
  // resident).
  std::uint64_t page_in() const;

 private:
  // The activation vector the next matvecs read (set_activation), quantized lazily
  // into each format a reader asks for.
  struct ActivationVector {
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
  int threads_;
  std::vector<std::uint8_t> staging_;  // quantize_to_shared's, the main thread's own
  bool avx2_exp_;        // SwiGLU takes exp 8 lanes at a time (the CPU and the ISA mask allow AVX2)
  bool avx2_attention_;  // attend_group_avx2 (AVX2 and FMA allowed, heads a multiple of 8)
  // attend_group_avx2's partial results: [range][head][head dim], and [range][head].
  static constexpr int kMaxAttentionRanges = 8;
  static constexpr int kMinAttentionRange = 32;  // positions
  std::vector<float> partial_out_, partial_max_, partial_sum_;
  int context_;
  int pos_ = 0;
  int token_ = 0;
  BoundModel bound_;
  // Keys then values, each [layer][kv head][position][head dim]: one head's positions
  // lie back to back, so attention reads each head's keys and values as one stream.
  std::vector<float> kv_cache_;
  std::size_t head_cache_offset(int kv_head) const {
    return static_cast<std::size_t>(kv_head) * context_ * c_.head_dim;
  }
  // Activations of one step (the program points into them).
  std::vector<float> x_, xn_, q_, k_, v_, att_, att_out_, gate_, up_, ffn_out_, logits_, scores_;
  std::vector<float> rope_cos_, rope_sin_;
  StepProgram program_;
  ActivationVector current_;
  StepTimes times_;
  // Kernels with a weight transform: their copy of each matrix they read, made at
  // construction (prepare_all_weights), outside every op's time.
  PreparedWeightCache prepared_weights_;
  WeightRepack repack_;
  // Resident: the copies of the tensors that are read in their own layout.
  WeightMemory plain_copies_;
  WeightResidency residency_;
  // The tensor behind each weight address of the program.
  std::map<const void*, const gguf::Tensor*> tensor_at_;
  std::vector<const gguf::Tensor*> in_place_;  // the tensors read where they point
  CpuForward(const ModelConfig& config, const ModelWeights& weights, const std::vector<PlannedMatvec>& plan,
             int threads, int context, const gguf::File* file, WeightResidence residence);
  void place_weights(const gguf::File* file, WeightResidence residence);
  // Makes every repacked copy, largest first, and gives back the file pages of the
  // matrices in `repacked_only` once theirs is made.
  void prepare_all_weights(const gguf::File* file, const std::set<const gguf::Tensor*>& repacked_only);

  // The ops of decode_step on the CPU (model/step.h calls them in order).
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

  const void* activation(ActFormat f, std::size_t& bytes);
  // Whether the current vector trips the outlier test at k (tested once per k).
  bool has_outliers(double k);
  template <class Fn>
  void timed(Op op, Fn&& fn);
  // Call groups: the kernel calls of the matvecs that read the current activation
  // vector, held until an op that is not one of them comes (run_pending_calls).
  struct PendingCall {
    const KernelSpec* kernel;
    const KernelSpec* sibling;  // the matvec's outlier sibling, or its kernel
    MatVecArgs args;
    Op part;
  };
  std::vector<PendingCall> pending_, running_;
  bool call_groups_ = true;
  KernelTrials trials_;
  bool trials_on_ = false;
  // In a step while trials run: each matvec call's time, by the op of its matvec.
  bool logging_calls_ = false;
  StepCallSeconds call_seconds_;
  void log_call(Op part, double seconds) {
    if (logging_calls_) call_seconds_[static_cast<int>(part)].push_back(seconds);
  }
  std::array<std::uint64_t, kOpCount> part_bytes_{};  // part_weight_bytes, as call groups count them
  // Whether `calls` matvec calls run as one call group (call_groups()), given whether
  // all their kernels and outlier siblings join call teams.
  bool runs_as_group(std::size_t calls, bool all_join_call_teams) const;
  void run_pending_calls();
  void count_part_bytes();
};

}  // namespace qmv
