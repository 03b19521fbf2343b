// The ops of one decode step and their names: the one table that plans (OP.TYPE=KERNEL
// rules), shape presets (the model op a shape is tagged with), the per-op time
// breakdown and the CSV columns all read. Then the step's weight matrices: the one
// table of which tensor each matvec reads and its shape, which the weight binding,
// plans, the step's program, synthetic models and shape presets iterate.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <ostream>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/kernel.h"
#include "model/config.h"

namespace qmv {

// In the order a layer runs them (the fused gate+up just before the pair it replaces),
// which is also the order plans and breakdowns list them in.
enum class Op {
  Embed,
  Norm,         // RMSNorm, with the residual add before it
  ActQuant,     // an activation vector quantized for int8 kernels
  OutlierTest,  // outlier routing's max|x| > k rms test
  AttnQkv,      // the GPU's q and k (and v, where it can) as one matvec on their stacked matrices
  AttnQ,
  AttnK,
  AttnV,
  QkNormRope,  // q/k bias, per-head norm, RoPE, k and v into the cache
  Attention,
  AttnOut,
  FfnUpGate,  // the fused op: gate and up from one read of the activation
  FfnGate,
  FfnUp,
  Swiglu,
  FfnDown,
  LmHead,
  kCount
};

inline constexpr int kOpCount = static_cast<int>(Op::kCount);

struct OpInfo {
  Op op;
  std::string_view name;  // as plans, breakdowns and CSVs write it
  bool matvec;            // a weight matrix times the activation
  bool planned;           // a plan's rules pick its kernel (a stacked op runs its parts' kernel)
};

// One row per op, in enum order.
inline constexpr OpInfo kOps[] = {
    {Op::Embed, "embed", false, false},          {Op::Norm, "rms_norm", false, false},
    {Op::ActQuant, "act_quant", false, false},   {Op::OutlierTest, "outlier_test", false, false},
    {Op::AttnQkv, "attn_qkv", true, false},      {Op::AttnQ, "attn_q", true, true},
    {Op::AttnK, "attn_k", true, true},           {Op::AttnV, "attn_v", true, true},
    {Op::QkNormRope, "rope", false, false},      {Op::Attention, "attention", false, false},
    {Op::AttnOut, "attn_out", true, true},       {Op::FfnUpGate, "ffn_up_gate", true, true},
    {Op::FfnGate, "ffn_gate", true, true},       {Op::FfnUp, "ffn_up", true, true},
    {Op::Swiglu, "swiglu", false, false},        {Op::FfnDown, "ffn_down", true, true},
    {Op::LmHead, "lm_head", true, true},
};
static_assert(std::size(kOps) == kOpCount, "one kOps row per Op");

constexpr std::string_view to_string(Op op) { return kOps[static_cast<int>(op)].name; }
constexpr bool is_matvec(Op op) { return kOps[static_cast<int>(op)].matvec; }
constexpr bool is_planned(Op op) { return kOps[static_cast<int>(op)].planned; }
// The op's name, in messages and test failures.
inline std::ostream& operator<<(std::ostream& out, Op op) { return out << to_string(op); }

// The op a matvec's time and bytes count under when it runs in a call group with the
// others that read its activation vector (model/forward.h, set_call_groups): the stacked
// op the GPU reports, attn_qkv for q, k and v and ffn_up_gate for gate and up; any other
// op is its own.
constexpr Op call_group_op(Op part) {
  if (part == Op::AttnQ || part == Op::AttnK || part == Op::AttnV) return Op::AttnQkv;
  if (part == Op::FfnGate || part == Op::FfnUp) return Op::FfnUpGate;
  return part;
}

// The op named `name` ("attn_q", "rms_norm", ...), if there is one.
std::optional<Op> parse_op(std::string_view name);

// The planned matvec ops, in table order: what a plan's rules may name.
const std::vector<Op>& matvec_ops();

// ---------------------------------------------------------------------------------
// The weight matrices of a decode step.

// The widths a matrix's rows and columns are, from the model's hyperparameters.
enum class Width { Embd, Q, Kv, Ff, Vocab };

struct ModelWidths {
  std::int64_t embd = 0, q = 0, kv = 0, ff = 0, vocab = 0;
  constexpr std::int64_t operator[](Width w) const {
    switch (w) {
      case Width::Embd: return embd;
      case Width::Q: return q;
      case Width::Kv: return kv;
      case Width::Ff: return ff;
      case Width::Vocab: return vocab;
    }
    return 0;
  }
};
ModelWidths model_widths(const ModelConfig& c);

// One weight matrix a matvec of the step multiplies by.
struct WeightMatvec {
  Op op;
  // The GGUF tensor: "blk.N.<tensor>.weight" in layer N; lm_head's is "output.weight"
  // (token_embd.weight where the embeddings are tied).
  std::string_view tensor;
  Width rows, cols;  // output, input
  // One of the pair the fused op (kUpGate) runs as one call on one read of the activation.
  bool fusable;
  const gguf::Tensor* LayerWeights::*weight;  // its tensor in a layer; null for lm_head

  constexpr Shape shape(const ModelWidths& w) const { return {w[rows], w[cols]}; }
  // The GGUF dims, input first.
  std::vector<std::uint64_t> dims(const ModelWidths& w) const {
    return {static_cast<std::uint64_t>(w[cols]), static_cast<std::uint64_t>(w[rows])};
  }
  std::string tensor_name(int layer) const;  // layer < 0: lm_head's
};

// A layer's matvecs in the order it runs them, then lm_head (once, after the last layer).
inline constexpr WeightMatvec kWeightMatvecs[] = {
    {Op::AttnQ, "attn_q", Width::Q, Width::Embd, false, &LayerWeights::wq},
    {Op::AttnK, "attn_k", Width::Kv, Width::Embd, false, &LayerWeights::wk},
    {Op::AttnV, "attn_v", Width::Kv, Width::Embd, false, &LayerWeights::wv},
    {Op::AttnOut, "attn_output", Width::Embd, Width::Q, false, &LayerWeights::wo},
    {Op::FfnGate, "ffn_gate", Width::Ff, Width::Embd, true, &LayerWeights::ffn_gate},
    {Op::FfnUp, "ffn_up", Width::Ff, Width::Embd, true, &LayerWeights::ffn_up},
    {Op::FfnDown, "ffn_down", Width::Embd, Width::Ff, false, &LayerWeights::ffn_down},
    {Op::LmHead, "output", Width::Vocab, Width::Embd, false, nullptr},
};
inline constexpr std::span<const WeightMatvec> kLayerMatvecs{kWeightMatvecs, std::size(kWeightMatvecs) - 1};
inline constexpr const WeightMatvec& kLmHead = kWeightMatvecs[std::size(kWeightMatvecs) - 1];

// The row of a matrix op (not the fused op, which has two matrices).
const WeightMatvec& weight_matvec(Op op);

// The fused op and the pair of matrices it runs: `first` is the matrix its kernel reads
// as w (and writes y from), `second` as w2 (y2).
struct FusedPair {
  Op fused, first, second;
};
inline constexpr FusedPair kUpGate{Op::FfnUpGate, Op::FfnGate, Op::FfnUp};

// The planned ops of one layer, in enum order: its matrices' and the fused op (every
// planned op but lm_head).
inline constexpr auto kLayerMatvecOps = [] {
  std::array<Op, std::size(kLayerMatvecs) + 1> ops{};
  std::size_t n = 0;
  for (const OpInfo& o : kOps)
    if (o.planned && o.op != kLmHead.op) ops[n++] = o.op;
  return ops;
}();

}  // namespace qmv
