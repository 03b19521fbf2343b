// The GPU decode step as a program: which kernel drives each matvec of the model
// (bound from the resolved plan, checked before anything is allocated), where every
// weight and buffer lives, and the step itself, written once as a template over an
// executor. GpuForward's executor launches kernels; the CPU tests run the very same
// step with an executor that replays the kernels' arithmetic on the host, and compare
// it with CpuForward. Plain C++: no CUDA needed to include it.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/kernel.h"
#include "model/config.h"
#include "model/forward.h"
#include "model/forward_math_cuda.h"
#include "model/forward_ops_cuda.h"
#include "model/plan.h"

namespace qmv::cuda {

// ---------------------------------------------------------------------------------
// The plan bound to the model's tensors.

struct BoundMatvec {
  const KernelSpec* kernel = nullptr;  // null: this slot is unused (fused or unfused FFN)
  Shape shape;
  const gguf::Tensor* w = nullptr;
  const gguf::Tensor* w2 = nullptr;  // fused gate+up: the up matrix
  StepPart part = StepPart::AttnQ;
  // Outlier routing: the f32-activation CUDA kernel that runs instead of `kernel` on a
  // vector that trips the test at outlier_k (a plain sibling of a fused op runs once
  // per matrix); null when this matvec is not routed.
  const KernelSpec* outlier_kernel = nullptr;
  double outlier_k = 0;
};

struct BoundLayer {
  const gguf::Tensor *attn_norm = nullptr, *ffn_norm = nullptr;
  const gguf::Tensor *bq = nullptr, *bk = nullptr, *bv = nullptr, *q_norm = nullptr, *k_norm = nullptr;
  BoundMatvec q, k, v, o, gate, up, up_gate, down;
  bool fused = false;
};

struct BoundModel {
  std::vector<BoundLayer> layers;
  BoundMatvec lm_head;
  const gguf::Tensor* token_embd = nullptr;
  const gguf::Tensor* output_norm = nullptr;
  WeightType embd_type = WeightType::F32;
  // Every tensor the step reads, each once (tied embeddings: token_embd is lm_head).
  std::vector<const gguf::Tensor*> tensors;
  std::uint64_t tensor_bytes = 0;  // their sum: what the upload puts on the device
  // Per step, as CpuForward counts them: every matvec's weights, the norms and biases,
  // one embedding row.
  std::uint64_t weight_bytes = 0;
  std::array<std::uint64_t, static_cast<int>(StepPart::kCount)> part_bytes{};
  bool needs_q8_1 = false;  // some kernel reads Q8_1 activations
  bool routes_outliers = false;  // some matvec has an outlier sibling
};

// Outlier tests one step can make: one per activation vector at most (four per layer:
// the attention input, the attention output, the FFN input, the SwiGLU output; and
// lm_head's input). Each has a verdict slot in the scratch.
inline int outlier_slots(const ModelConfig& c) { return 4 * c.n_layers + 1; }

// The outlier tests of one step, in order (a test's index is its verdict slot), with
// the routed matvecs that read each test's vector; once the verdicts are known, the
// counts they add up to. Both executors keep one, so the GPU's report is tested here.
class OutlierLedger {
 public:
  void clear() { readers_.clear(); }
  // A new test; its slot. Throws std::logic_error past `slots`.
  int open(int slots) {
    if (static_cast<int>(readers_.size()) >= slots)
      throw std::logic_error("outlier test " + std::to_string(readers_.size() + 1) + " of a step, but " +
                             std::to_string(slots) + " verdict slots");
    readers_.emplace_back();
    return static_cast<int>(readers_.size()) - 1;
  }
  void read(int slot, StepPart part) { readers_.at(slot).push_back(part); }
  int tests() const { return static_cast<int>(readers_.size()); }
  // Per reading part: routable += 1, routed += the verdict; calls[OutlierTest] += tests.
  void count(const int* verdicts, StepTimes& into) const {
    for (std::size_t slot = 0; slot < readers_.size(); ++slot)
      for (StepPart part : readers_[slot]) {
        ++into.routable[static_cast<int>(part)];
        if (verdicts[slot]) ++into.routed[static_cast<int>(part)];
      }
    into.calls[static_cast<int>(StepPart::OutlierTest)] += static_cast<std::int64_t>(readers_.size());
  }

 private:
  std::vector<std::vector<StepPart>> readers_;
};

// The route table of a captured step (see kRouteRowWords): row `slot` lists the
// conditional handles of the if/else nodes that read test `slot`'s vector, one handle
// per node. Built on the host while the step is captured, then copied to the device.
class RouteTable {
 public:
  void reset(int slots) { words_.assign(static_cast<std::size_t>(slots) * kRouteRowWords, 0); }
  // Adds one node's handle to test `slot`. Throws std::logic_error past the row.
  void add(int slot, unsigned long long handle) {
    if (slot < 0 || static_cast<std::size_t>(slot) >= words_.size() / kRouteRowWords)
      throw std::logic_error("route table: test " + std::to_string(slot) + " has no row");
    unsigned long long* r = words_.data() + static_cast<std::size_t>(slot) * kRouteRowWords;
    if (r[0] >= static_cast<unsigned long long>(kRouteHandlesPerTest))
      throw std::logic_error("route table: more than " + std::to_string(kRouteHandlesPerTest) +
                             " routed matvecs read the vector of test " + std::to_string(slot));
    r[1 + r[0]] = handle;
    ++r[0];
  }
  const unsigned long long* row(int slot) const { return words_.data() + static_cast<std::size_t>(slot) * kRouteRowWords; }
  const std::vector<unsigned long long>& words() const { return words_; }

 private:
  std::vector<unsigned long long> words_;
};

// Binds every matvec of the model to its planned kernel, as CpuForward does (the
// fused gate+up op where the plan chose it). Throws PlanError naming the op when a
// matvec has no entry, when a kernel is not a CUDA kernel, or when it wants an
// activation format the GPU step does not prepare (it prepares f32 and Q8_1); throws
// ModelError when the model's heads do not fit the GPU kernels (head_dim <= 256).
BoundModel bind_gpu_plan(const ModelConfig& c, const ModelWeights& w, const std::vector<PlannedMatvec>& plan);

// Where each of m.tensors goes in one allocation (256-byte aligned offsets, in the
// order of m.tensors); `total` gets the allocation's size.
std::vector<std::size_t> weight_offsets(const BoundModel& m, std::size_t& total);

// ---------------------------------------------------------------------------------
// Where things live (device or host addresses, as the executor needs).

struct MatvecOp {
  const KernelSpec* kernel = nullptr;
  Shape shape;
  StepPart part = StepPart::AttnQ;
  const void* w = nullptr;
  std::size_t w_bytes = 0;
  const void* w2 = nullptr;
  std::size_t w2_bytes = 0;
  const KernelSpec* outlier_kernel = nullptr;  // as BoundMatvec
  double outlier_k = 0;
};

struct LayerOps {
  const float *attn_norm = nullptr, *ffn_norm = nullptr;
  const float *bq = nullptr, *bk = nullptr, *bv = nullptr, *q_norm = nullptr, *k_norm = nullptr;
  MatvecOp q, k, v, o, gate, up, up_gate, down;
  bool fused = false;
  float* k_cache = nullptr;  // this layer's [context][kv width]
  float* v_cache = nullptr;
};

// The scratch buffers of one step, as offsets into one allocation (256-byte aligned).
struct ScratchLayout {
  std::size_t x = 0, xn = 0, q = 0, k = 0, v = 0, att = 0, att_out = 0, gate = 0, up = 0, ffn_out = 0, logits = 0,
              rope_cos = 0, rope_sin = 0, attn_partials = 0, act_q8_1 = 0, outlier_verdicts = 0, route_table = 0,
              state = 0;
  std::size_t act_q8_1_bytes = 0;  // 0 when no kernel reads Q8_1
  int outlier_slots = 0;           // ints at outlier_verdicts, rows at route_table; 0 without outlier routing
  std::size_t bytes = 0;           // the whole allocation
};
ScratchLayout scratch_layout(const ModelConfig& c, int attn_splits, bool q8_1, bool outlier_routing = false);

// The KV cache: keys then values, each [layer][context][kv width] floats.
std::size_t kv_cache_bytes(const ModelConfig& c, int context);

// How many splits attention's positions are cut into: enough CTAs (heads x splits)
// to cover every SM twice, at most 64, and no split shorter than 16 positions of the
// full context.
int attention_splits(int sm_count, int n_head, int context);

struct StepProgram {
  int n_embd = 0, q_width = 0, kv_width = 0, n_ff = 0, vocab = 0;
  const void* token_embd = nullptr;
  WeightType embd_type = WeightType::F32;
  const float* output_norm = nullptr;
  std::vector<LayerOps> layers;
  MatvecOp lm_head;
  // Buffers.
  float *x = nullptr, *xn = nullptr, *q = nullptr, *k = nullptr, *v = nullptr, *att = nullptr, *att_out = nullptr,
        *gate = nullptr, *up = nullptr, *ffn_out = nullptr, *logits = nullptr, *rope_cos = nullptr,
        *rope_sin = nullptr, *attn_partials = nullptr;
  void* act_q8_1 = nullptr;
  std::size_t act_q8_1_bytes = 0;
  int* outlier_verdicts = nullptr;  // one slot per outlier test of the step, in order
  unsigned long long* route_table = nullptr;  // outlier_slots rows of kRouteRowWords (RouteTable)
  int outlier_slots = 0;
  void* state = nullptr;  // DecodeState
};

// The program over a copy of the weights at address_of(tensor), scratch at `scratch`
// (laid out as `layout`) and the KV cache at `kv_cache` (kv_cache_bytes long).
StepProgram make_step_program(const ModelConfig& c, const BoundModel& m, int context,
                              const std::function<const void*(const gguf::Tensor*)>& address_of,
                              const ScratchLayout& layout, void* scratch, void* kv_cache);

// The arguments of a layer's per-head step and attention over `p`'s buffers (both
// executors launch or replay them with these).
HeadStepArgs head_step_args(const ModelConfig& c, const StepProgram& p, const LayerOps& l);
AttentionArgs attention_args(const ModelConfig& c, const StepProgram& p, const LayerOps& l, int attn_splits);

// ---------------------------------------------------------------------------------
// The decode step, top to bottom, as CpuForward::step: embedding lookup; per layer
// RMSNorm -> q,k,v -> bias, q/k norm, RoPE, store k,v -> attention over the cache ->
// output projection -> residual + RMSNorm -> gate, up -> SwiGLU -> down; then the
// last residual, the final norm, lm_head and the sampler. Each residual add is fused
// into the norm that follows it. `prepare` names the activation vector the next
// matvecs read; the executor quantizes it (once) for the kernels that want Q8_1 and,
// for a routed matvec, tests it (once) for outliers and runs the kernel the verdict
// picks.
template <class Exec>
void decode_step(Exec& e, const StepProgram& p) {
  e.embed();  // x = token_embd[token]; the RoPE table of the position
  const float* residual = nullptr;  // the FFN output the next norm adds to x
  for (const LayerOps& l : p.layers) {
    // Attention block.
    e.rms_norm(p.x, residual, l.attn_norm, p.xn, p.n_embd);
    e.prepare(p.xn, p.n_embd);
    e.matvec(l.q, p.q);
    e.matvec(l.k, p.k);
    e.matvec(l.v, p.v);
    e.head_step(l);  // q, k: bias, per-head norm, RoPE; k, v into the cache
    e.attention(l);
    e.prepare(p.att, p.q_width);
    e.matvec(l.o, p.att_out);
    e.rms_norm(p.x, p.att_out, l.ffn_norm, p.xn, p.n_embd);
    // Feed-forward block: down(silu(gate x) * up x).
    e.prepare(p.xn, p.n_embd);
    if (l.fused) {
      e.matvec(l.up_gate, p.gate, p.up);
    } else {
      e.matvec(l.gate, p.gate);
      e.matvec(l.up, p.up);
    }
    e.swiglu(p.gate, p.up, p.n_ff);
    e.prepare(p.gate, p.n_ff);
    e.matvec(l.down, p.ffn_out);
    residual = p.ffn_out;
  }
  e.rms_norm(p.x, residual, p.output_norm, p.xn, p.n_embd);
  e.prepare(p.xn, p.n_embd);
  e.matvec(p.lm_head, p.logits);
  e.sample(p.logits, p.vocab);
}

}  // namespace qmv::cuda
