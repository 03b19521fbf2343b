// The ops of one decode step and their names: the one table that plans (OP.TYPE=KERNEL
// rules), shape presets (the model op a shape is tagged with), the per-op time
// breakdown and the CSV columns all read.
#pragma once

#include <optional>
#include <string_view>
#include <vector>

namespace qmv {

// In the order a layer runs them (the fused gate+up just before the pair it replaces),
// which is also the order plans and breakdowns list them in.
enum class Op {
  Embed,
  Norm,         // RMSNorm, with the residual add before it
  ActQuant,     // an activation vector quantized for int8 kernels
  OutlierTest,  // outlier routing's max|x| > k rms test
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
  bool matvec;            // a weight matrix times the activation: the plan picks its kernel
};

// One row per op, in enum order.
inline constexpr OpInfo kOps[] = {
    {Op::Embed, "embed", false},       {Op::Norm, "rms_norm", false},
    {Op::ActQuant, "act_quant", false}, {Op::OutlierTest, "outlier_test", false},
    {Op::AttnQ, "attn_q", true},        {Op::AttnK, "attn_k", true},
    {Op::AttnV, "attn_v", true},        {Op::QkNormRope, "rope", false},
    {Op::Attention, "attention", false}, {Op::AttnOut, "attn_out", true},
    {Op::FfnUpGate, "ffn_up_gate", true}, {Op::FfnGate, "ffn_gate", true},
    {Op::FfnUp, "ffn_up", true},        {Op::Swiglu, "swiglu", false},
    {Op::FfnDown, "ffn_down", true},    {Op::LmHead, "lm_head", true},
};
static_assert(std::size(kOps) == kOpCount, "one kOps row per Op");

constexpr std::string_view to_string(Op op) { return kOps[static_cast<int>(op)].name; }
constexpr bool is_matvec(Op op) { return kOps[static_cast<int>(op)].matvec; }

// The op named `name` ("attn_q", "rms_norm", ...), if there is one.
std::optional<Op> parse_op(std::string_view name);

// The matvec ops, in table order: what a plan's rules may name.
const std::vector<Op>& matvec_ops();

}  // namespace qmv
