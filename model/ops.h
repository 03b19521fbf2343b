// The ops of one decode step and their names: the one table that plans (OP.TYPE=KERNEL
// rules), shape presets (the model op a shape is tagged with), the per-op time
// breakdown and the CSV columns all read.
#pragma once

#include <optional>
#include <ostream>
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

// The op named `name` ("attn_q", "rms_norm", ...), if there is one.
std::optional<Op> parse_op(std::string_view name);

// The planned matvec ops, in table order: what a plan's rules may name.
const std::vector<Op>& matvec_ops();

}  // namespace qmv
