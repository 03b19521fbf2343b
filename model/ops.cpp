#include "model/ops.h"

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

}  // namespace qmv
