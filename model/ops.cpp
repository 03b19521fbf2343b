#include "model/ops.h"

#include <fmt/format.h>

#include <stdexcept>

namespace qmv {

static_assert([] {
  for (int i = 0; i < kOpCount; ++i)
    if (static_cast<int>(kOps[i].op) != i) return false;
  return true;
}(), "kOps rows are in enum order");
static_assert([] {
  for (const OpInfo& o : kOps)
    if (o.planned && !o.matvec) return false;
  return true;
}(), "only matvec ops are planned");

static_assert([] {
  for (std::size_t i = 0; i < std::size(kWeightMatvecs); ++i) {
    const WeightMatvec& m = kWeightMatvecs[i];
    if (!is_planned(m.op) || (m.weight == nullptr) != (m.op == Op::LmHead)) return false;
    if (i > 0 && static_cast<int>(kWeightMatvecs[i - 1].op) >= static_cast<int>(m.op)) return false;
    if (m.fusable != (m.op == kUpGate.first || m.op == kUpGate.second)) return false;
  }
  return true;
}(), "kWeightMatvecs: planned matrix ops in enum order, lm_head last, the fusable ones kUpGate's pair");

std::optional<Op> parse_op(std::string_view name) {
  for (const OpInfo& o : kOps)
    if (o.name == name) return o.op;
  return std::nullopt;
}

const std::vector<Op>& matvec_ops() {
  static const std::vector<Op> ops = [] {
    std::vector<Op> v;
    for (const OpInfo& o : kOps)
      if (o.planned) v.push_back(o.op);
    return v;
  }();
  return ops;
}

ModelWidths model_widths(const ModelConfig& c) {
  return {c.n_embd, static_cast<std::int64_t>(c.n_head) * c.head_dim, static_cast<std::int64_t>(c.n_head_kv) * c.head_dim,
          c.n_ff, c.vocab_size};
}

std::string WeightMatvec::tensor_name(int layer) const {
  return layer < 0 ? fmt::format("{}.weight", tensor) : fmt::format("blk.{}.{}.weight", layer, tensor);
}

const WeightMatvec& weight_matvec(Op op) {
  for (const WeightMatvec& m : kWeightMatvecs)
    if (m.op == op) return m;
  throw std::logic_error(fmt::format("{} is not the op of one weight matrix", to_string(op)));
}

}  // namespace qmv
