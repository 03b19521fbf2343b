#include "model/step.h"

#include <fmt/format.h>

#include <algorithm>

namespace qmv {
namespace {

WeightType weight_type_of(const gguf::Tensor* t) {
  WeightType w;
  if (!parse_weight_type(t->type->name, w))
    throw PlanError(fmt::format("'{}' is {}, a type no kernel here reads", t->name, t->type->name));
  return w;
}

Shape shape_of(const gguf::Tensor* t) {
  return {static_cast<std::int64_t>(t->dims[1]), static_cast<std::int64_t>(t->dims[0])};
}

// The decode a backend's kernels run in, as the errors name it.
struct DecodeName {
  const char* plan;     // prefix of the errors
  const char* decode;   // "the GPU decode"
  const char* kernels;  // "CUDA kernels"
};

DecodeName decode_name(Backend b) {
  return b == Backend::CUDA ? DecodeName{"GPU plan", "the GPU decode", "CUDA kernels"}
                            : DecodeName{"plan", "the CPU decode", "CPU kernels"};
}

BoundMatvec bind_matvec(const std::vector<PlannedMatvec>& plan, Op op, const gguf::Tensor* t, Backend backend) {
  const WeightType w = weight_type_of(t);
  const Shape s = shape_of(t);
  const DecodeName name = decode_name(backend);
  const std::string_view op_name = to_string(op);
  for (const PlannedMatvec& p : plan) {
    if (p.op != op || p.weight != w || p.shape != s) continue;
    const std::string what = fmt::format("{}: {} ({} {}, '{}')", name.plan, op_name, to_string(w), to_string(s), t->name);
    if (!p.kernel) throw PlanError(what + ": the plan entry has no kernel");
    if (p.kernel->backend != backend)
      throw PlanError(fmt::format("{} runs {}, a {} kernel; {} runs {}", what, p.kernel->name,
                                  to_string(p.kernel->backend), name.decode, name.kernels));
    if ((op == kUpGate.fused) != (p.kernel->op == OpKind::FusedUpGate))
      throw PlanError(fmt::format("{} runs {}, a {} kernel", what, p.kernel->name, to_string(p.kernel->op)));
    if (!p.kernel->supports(s))
      throw PlanError(fmt::format("{} runs {}, which does not take this shape (needs {})", what, p.kernel->name,
                                  p.kernel->shape_rule));
    BoundMatvec m;
    m.kernel = p.kernel;
    m.shape = s;
    m.w = t;
    m.part = op;
    if (const KernelSpec* sib = p.outlier_kernel) {
      const std::string routed = fmt::format("{} routes outlier vectors to {}", what, sib->name);
      if (sib->backend != backend)
        throw PlanError(fmt::format("{}, a {} kernel; {} runs {}", routed, to_string(sib->backend), name.decode,
                                    name.kernels));
      if (sib->act != ActFormat::F32)
        throw PlanError(fmt::format("{}, which reads {} activations, not f32", routed, to_string(sib->act)));
      if (sib->weight != w || !sib->supports(s))
        throw PlanError(fmt::format("{}, which does not take {} {} (needs {})", routed, to_string(w), to_string(s),
                                    sib->shape_rule));
      if (sib->op == OpKind::FusedUpGate && op != kUpGate.fused)
        throw PlanError(fmt::format("{}, a {} kernel", routed, to_string(sib->op)));
      m.outlier_kernel = sib;
      m.outlier_k = p.outlier_k;
    }
    return m;
  }
  throw PlanError(fmt::format("{}: no kernel planned for {} ({} {}, '{}')", name.plan, op_name, to_string(w),
                              to_string(s), t->name));
}

}  // namespace

BoundModel bind_plan(const ModelConfig& c, const ModelWeights& weights, const std::vector<PlannedMatvec>& plan,
                     Backend backend) {
  BoundModel m;
  auto keep = [&m](const gguf::Tensor* t) {
    if (t && std::find(m.tensors.begin(), m.tensors.end(), t) == m.tensors.end()) {
      m.tensors.push_back(t);
      m.tensor_bytes += t->bytes;
    }
  };
  auto bind = [&](Op op, const gguf::Tensor* t) { return bind_matvec(plan, op, t, backend); };
  keep(weights.token_embd);
  for (const LayerWeights& lw : weights.layers) {
    BoundLayer l;
    l.attn_norm = lw.attn_norm;
    l.ffn_norm = lw.ffn_norm;
    l.bq = lw.bq;
    l.bk = lw.bk;
    l.bv = lw.bv;
    l.q_norm = lw.q_norm;
    l.k_norm = lw.k_norm;
    for (const WeightMatvec& mv : kLayerMatvecs) {
      if (!mv.fusable) {
        matvec_slot(l, mv.op) = bind(mv.op, lw.*mv.weight);
        continue;
      }
      if (mv.op != kUpGate.first) continue;  // the pair is bound at its first matrix
      // The fused op when the plan chose it for this layer's pair type and shape.
      const gguf::Tensor* first = lw.*weight_matvec(kUpGate.first).weight;
      const gguf::Tensor* second = lw.*weight_matvec(kUpGate.second).weight;
      const bool fused_planned =
          first->type == second->type && std::any_of(plan.begin(), plan.end(), [&](const PlannedMatvec& p) {
            return p.op == kUpGate.fused && p.weight == weight_type_of(first) && p.shape == shape_of(first);
          });
      if (fused_planned) {
        l.fused = true;
        l.up_gate = bind(kUpGate.fused, first);
        l.up_gate.w2 = second;
      } else {
        matvec_slot(l, kUpGate.first) = bind(kUpGate.first, first);
        matvec_slot(l, kUpGate.second) = bind(kUpGate.second, second);
      }
    }
    for (const WeightMatvec& mv : kLayerMatvecs) {
      m.weight_bytes += (lw.*mv.weight)->bytes;
      keep(lw.*mv.weight);
    }
    for (const gguf::Tensor* t : {lw.attn_norm, lw.ffn_norm, lw.bq, lw.bk, lw.bv, lw.q_norm, lw.k_norm}) {
      if (t) m.weight_bytes += t->bytes;
      keep(t);
    }
    m.layers.push_back(l);
  }
  m.lm_head = bind(kLmHead.op, weights.output);
  m.token_embd = weights.token_embd;
  m.output_norm = weights.output_norm;
  keep(weights.output_norm);
  keep(weights.output);
  m.embd_type = weight_type_of(weights.token_embd);
  m.weight_bytes += weights.output->bytes + weights.output_norm->bytes + row_bytes(m.embd_type, c.n_embd);

  auto count = [&m](const BoundMatvec& b) {
    if (!b.kernel) return;
    m.part_bytes[static_cast<int>(b.part)] += b.w->bytes + (b.w2 ? b.w2->bytes : 0);
    m.needs_q8_1 = m.needs_q8_1 || b.kernel->act == ActFormat::Q8_1;
    m.routes_outliers = m.routes_outliers || b.outlier_kernel;
  };
  for (const BoundLayer& l : m.layers)
    for (const Op op : kLayerMatvecOps) count(matvec_slot(l, op));
  count(m.lm_head);
  return m;
}

std::size_t kv_cache_bytes(const ModelConfig& c, int context) {
  return 2 * static_cast<std::size_t>(c.n_layers) * context * c.n_head_kv * c.head_dim * sizeof(float);
}

StepProgram make_step_program(const ModelConfig& c, const BoundModel& m, int context,
                              const std::function<const void*(const gguf::Tensor*)>& address_of, void* kv_cache) {
  auto f32 = [&](const gguf::Tensor* t) { return t ? static_cast<const float*>(address_of(t)) : nullptr; };
  auto op = [&](const BoundMatvec& b) {
    MatvecOp o;
    if (!b.kernel) return o;
    o.kernel = b.kernel;
    o.shape = b.shape;
    o.part = b.part;
    o.outlier_kernel = b.outlier_kernel;
    o.outlier_k = b.outlier_k;
    o.w = address_of(b.w);
    o.w_bytes = b.w->bytes;
    if (b.w2) {
      o.w2 = address_of(b.w2);
      o.w2_bytes = b.w2->bytes;
    }
    return o;
  };

  StepProgram p;
  p.n_embd = c.n_embd;
  p.q_width = c.n_head * c.head_dim;
  p.kv_width = c.n_head_kv * c.head_dim;
  p.n_ff = c.n_ff;
  p.vocab = c.vocab_size;
  p.token_embd = address_of(m.token_embd);
  p.embd_type = m.embd_type;
  p.output_norm = f32(m.output_norm);
  const std::size_t layer_cache = static_cast<std::size_t>(context) * p.kv_width;
  float* keys = static_cast<float*>(kv_cache);
  float* values = keys + static_cast<std::size_t>(c.n_layers) * layer_cache;
  for (std::size_t li = 0; li < m.layers.size(); ++li) {
    const BoundLayer& b = m.layers[li];
    LayerOps l;
    l.attn_norm = f32(b.attn_norm);
    l.ffn_norm = f32(b.ffn_norm);
    l.bq = f32(b.bq);
    l.bk = f32(b.bk);
    l.bv = f32(b.bv);
    l.q_norm = f32(b.q_norm);
    l.k_norm = f32(b.k_norm);
    for (const Op o : kLayerMatvecOps) matvec_slot(l, o) = op(matvec_slot(b, o));
    l.fused = b.fused;
    l.k_cache = keys + li * layer_cache;
    l.v_cache = values + li * layer_cache;
    p.layers.push_back(l);
  }
  p.lm_head = op(m.lm_head);
  return p;
}

}  // namespace qmv
