// The decode step, written once: the plan bound to the model's tensors, the program
// (where every weight and buffer of one step lives) and `decode_step`, the order of
// ops of the model top to bottom. The CPU executor (CpuForward), the GPU executor
// (GpuForward) and the tests' host replay of the GPU kernels all run this one
// definition; they differ only in what an op does.
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
#include "model/ops.h"
#include "model/plan.h"

namespace qmv {

// ---------------------------------------------------------------------------------
// The plan bound to the model's tensors.

struct BoundMatvec {
  const KernelSpec* kernel = nullptr;  // null: this slot is unused (fused or unfused FFN)
  Shape shape;
  const gguf::Tensor* w = nullptr;
  const gguf::Tensor* w2 = nullptr;  // fused gate+up: the up matrix
  Op part = Op::AttnQ;  // which op of the step, for its time and bytes
  // Outlier routing: the f32-activation kernel that runs instead of `kernel` on a
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
  std::uint64_t tensor_bytes = 0;  // their sum: what a GPU upload puts on the device
  // What one step reads: every matvec's weights, the norms and biases, one embedding
  // row (the roofline's weight bytes).
  std::uint64_t weight_bytes = 0;
  std::array<std::uint64_t, kOpCount> part_bytes{};  // per matvec op
  bool needs_q8_1 = false;                         // some kernel reads Q8_1 activations
  bool routes_outliers = false;                    // some matvec has an outlier sibling
};

// The matvec of planned op `op` in a layer: BoundLayer and LayerOps name their
// matvecs alike. `op` is one of kLayerMatvecOps.
template <class Layer>
auto& matvec_slot(Layer& l, Op op) {
  switch (op) {
    case Op::AttnQ: return l.q;
    case Op::AttnK: return l.k;
    case Op::AttnV: return l.v;
    case Op::AttnOut: return l.o;
    case Op::FfnUpGate: return l.up_gate;
    case Op::FfnGate: return l.gate;
    case Op::FfnUp: return l.up;
    case Op::FfnDown: return l.down;
    default: break;
  }
  throw std::logic_error(std::string(to_string(op)) + " is not a matvec of a layer");
}

// Binds every matvec of the model to its planned kernel (the fused gate+up op where
// the plan chose it for that layer's gate type and shape). Throws PlanError naming the
// op, the weight type, the shape and the tensor when a matvec has no entry, or when
// its kernel (or outlier sibling) is not a `backend` kernel, is of the wrong op kind,
// or does not take the shape.
BoundModel bind_plan(const ModelConfig& c, const ModelWeights& w, const std::vector<PlannedMatvec>& plan,
                     Backend backend);

// ---------------------------------------------------------------------------------
// The program: the bound model at the addresses an executor reads (host or device).

struct MatvecOp {
  const KernelSpec* kernel = nullptr;
  Shape shape;
  Op part = Op::AttnQ;  // which op of the step, for its time and bytes
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
  // On the GPU, q and k (and v) as one matvec where they can be (model/gpu_program.h):
  // how many of them `qkv` runs, 0 (apart), 2 (q and k; v apart) or 3.
  MatvecOp qkv;
  int qkv_stacked = 0;
  float* k_cache = nullptr;  // this layer's [context][kv width]
  float* v_cache = nullptr;
};

struct StepProgram {
  int n_embd = 0, q_width = 0, kv_width = 0, n_ff = 0, vocab = 0;
  const void* token_embd = nullptr;
  WeightType embd_type = WeightType::F32;
  const float* output_norm = nullptr;
  std::vector<LayerOps> layers;
  MatvecOp lm_head;
  // The activations of one step.
  float *x = nullptr, *xn = nullptr, *q = nullptr, *k = nullptr, *v = nullptr, *att = nullptr, *att_out = nullptr,
        *gate = nullptr, *up = nullptr, *ffn_out = nullptr, *logits = nullptr, *rope_cos = nullptr,
        *rope_sin = nullptr;
  // Buffers only the GPU executor uses (see model/gpu_program.h); null on the CPU.
  float* attn_partials = nullptr;
  unsigned* attn_counters = nullptr;  // one per head, zero between steps (the fused attention's)
  void* act_q8_1 = nullptr;
  std::size_t act_q8_1_bytes = 0;
  int* outlier_verdicts = nullptr;            // one slot per outlier test of the step, in order
  unsigned long long* route_table = nullptr;  // outlier_slots rows of kRouteRowWords (RouteTable)
  int outlier_slots = 0;
  void* state = nullptr;  // DecodeState
};

// The KV cache: keys then values, each [layer][context][kv width] floats.
std::size_t kv_cache_bytes(const ModelConfig& c, int context);

// The program over the weights at address_of(tensor) and the KV cache at `kv_cache`
// (kv_cache_bytes long); the executor points the activation buffers.
StepProgram make_step_program(const ModelConfig& c, const BoundModel& m, int context,
                              const std::function<const void*(const gguf::Tensor*)>& address_of, void* kv_cache);

// Calls `call(w, w_bytes, w2, w2_bytes, y, y2)` for each invocation of `kernel` that
// matvec `m` takes: one, or, for a plain kernel standing in for the fused gate+up op
// (a routed f32 sibling), one per matrix. A plain kernel on one matrix writes y alone
// (on the GPU a gate+up op may be one matrix, gate's rows then up's, whose output runs
// on from y into y2: model/gpu_program.h).
template <class Call>
void for_each_invocation(const KernelSpec& kernel, const MatvecOp& m, float* y, float* y2, Call&& call) {
  if (m.w2 && kernel.op == OpKind::MatVec) {
    call(m.w, m.w_bytes, nullptr, std::size_t{0}, y, nullptr);
    call(m.w2, m.w2_bytes, nullptr, std::size_t{0}, y2, nullptr);
  } else if (kernel.op == OpKind::MatVec) {
    call(m.w, m.w_bytes, nullptr, std::size_t{0}, y, nullptr);
  } else {
    call(m.w, m.w_bytes, m.w2, m.w2_bytes, y, y2);
  }
}

// ---------------------------------------------------------------------------------
// The decode step, top to bottom: embedding lookup; per layer RMSNorm -> q,k,v ->
// bias, q/k norm, RoPE, store k,v -> attention over the cache -> output projection ->
// residual + RMSNorm -> gate, up -> SwiGLU -> down; then the last residual, the final
// norm, lm_head and the sampler. Each residual add is part of the norm that follows
// it. `set_activation` names the activation vector the next matvecs read; the executor
// quantizes it (once) for the kernels that want int8 and, for a routed matvec, tests
// it (once) for outliers and runs the kernel the verdict picks.
template <class Exec>
void decode_step(Exec& e, const StepProgram& p) {
  e.embed();  // x = token_embd[token]; the RoPE table of the position
  const float* residual = nullptr;  // the FFN output the next norm adds to x
  for (const LayerOps& l : p.layers) {
    // Attention block.
    e.rms_norm(p.x, residual, l.attn_norm, p.xn, p.n_embd);
    e.set_activation(p.xn, p.n_embd);
    if (l.qkv_stacked > 0) {
      e.matvec(l.qkv, p.q);  // its rows run on from q into k (and v)
    } else {
      e.matvec(l.q, p.q);
      e.matvec(l.k, p.k);
    }
    if (l.qkv_stacked < 3) e.matvec(l.v, p.v);
    e.head_step(l);  // q, k: bias, per-head norm, RoPE; k, v into the cache
    e.attention(l);
    e.set_activation(p.att, p.q_width);
    e.matvec(l.o, p.att_out);
    e.rms_norm(p.x, p.att_out, l.ffn_norm, p.xn, p.n_embd);
    // Feed-forward block: down(silu(gate x) * up x).
    e.set_activation(p.xn, p.n_embd);
    if (l.fused) {
      e.matvec(l.up_gate, p.gate, p.up);
    } else {
      e.matvec(l.gate, p.gate);
      e.matvec(l.up, p.up);
    }
    e.swiglu(p.gate, p.up, p.n_ff);
    e.set_activation(p.gate, p.n_ff);
    e.matvec(l.down, p.ffn_out);
    residual = p.ffn_out;
  }
  e.rms_norm(p.x, residual, p.output_norm, p.xn, p.n_embd);
  e.set_activation(p.xn, p.n_embd);
  e.matvec(p.lm_head, p.logits);
  e.sample(p.logits, p.vocab);
}

}  // namespace qmv
