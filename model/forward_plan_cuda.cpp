// The host side of the GPU decode that needs no device: binding the plan to the
// model, the memory layout and its size, the refusal when it does not fit, and the
// step program's addresses. Built with or without CUDA, so all of it is tested here.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "model/forward_cuda.h"
#include "model/forward_math_cuda.h"
#include "model/forward_step_cuda.h"

namespace qmv {
namespace cuda {
namespace {

constexpr std::size_t kAlign = 256;

std::size_t align_up(std::size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

WeightType weight_type_of(const gguf::Tensor* t) {
  WeightType w;
  if (!parse_weight_type(t->type->name, w))
    throw PlanError(fmt::format("'{}' is {}, a type no kernel here reads", t->name, t->type->name));
  return w;
}

Shape shape_of(const gguf::Tensor* t) {
  return {static_cast<std::int64_t>(t->dims[1]), static_cast<std::int64_t>(t->dims[0])};
}

BoundMatvec bind_matvec(const std::vector<PlannedMatvec>& plan, const std::string& op, const gguf::Tensor* t, StepPart part) {
  const WeightType w = weight_type_of(t);
  const Shape s = shape_of(t);
  for (const PlannedMatvec& p : plan) {
    if (p.op != op || p.weight != w || p.shape != s) continue;
    const std::string what = fmt::format("GPU plan: {} ({} {}, '{}')", op, to_string(w), to_string(s), t->name);
    if (!p.kernel) throw PlanError(what + ": the plan entry has no kernel");
    if (p.kernel->backend != Backend::CUDA)
      throw PlanError(fmt::format("{} runs {}, a {} kernel; the GPU decode runs CUDA kernels", what, p.kernel->name,
                                  to_string(p.kernel->backend)));
    if ((op == "ffn_up_gate") != (p.kernel->op == OpKind::FusedUpGate))
      throw PlanError(fmt::format("{} runs {}, a {} kernel", what, p.kernel->name, to_string(p.kernel->op)));
    if (!p.kernel->supports(s))
      throw PlanError(fmt::format("{} runs {}, which does not take this shape (needs {})", what, p.kernel->name,
                                  p.kernel->shape_rule));
    if (p.kernel->act != ActFormat::F32 && p.kernel->act != ActFormat::Q8_1)
      throw PlanError(fmt::format("{} runs {}, which reads {} activations; the GPU step prepares f32 and q8_1",
                                  what, p.kernel->name, to_string(p.kernel->act)));
    BoundMatvec m;
    m.kernel = p.kernel;
    m.shape = s;
    m.w = t;
    m.part = part;
    if (const KernelSpec* sib = p.outlier_kernel) {
      const std::string routed = fmt::format("{} routes outlier vectors to {}", what, sib->name);
      if (sib->backend != Backend::CUDA)
        throw PlanError(fmt::format("{}, a {} kernel; the GPU decode runs CUDA kernels", routed, to_string(sib->backend)));
      if (sib->act != ActFormat::F32)
        throw PlanError(fmt::format("{}, which reads {} activations, not f32", routed, to_string(sib->act)));
      if (sib->weight != w || !sib->supports(s))
        throw PlanError(fmt::format("{}, which does not take {} {} (needs {})", routed, to_string(w), to_string(s),
                                    sib->shape_rule));
      if (sib->op == OpKind::FusedUpGate && op != "ffn_up_gate")
        throw PlanError(fmt::format("{}, a {} kernel", routed, to_string(sib->op)));
      m.outlier_kernel = sib;
      m.outlier_k = p.outlier_k;
    }
    return m;
  }
  throw PlanError(fmt::format("GPU plan: no kernel planned for {} ({} {}, '{}')", op, to_string(w), to_string(s),
                              t->name));
}

}  // namespace

BoundModel bind_gpu_plan(const ModelConfig& c, const ModelWeights& weights, const std::vector<PlannedMatvec>& plan) {
  if (c.head_dim > kMaxHeadDim)
    throw ModelError(fmt::format("{}: head_dim {} is above the {} the GPU attention kernels hold", c.name, c.head_dim,
                                 kMaxHeadDim));
  if (c.rope_dim > c.head_dim || c.rope_dim % 2 != 0)
    throw ModelError(fmt::format("{}: rope_dim {} must be even and at most head_dim {}", c.name, c.rope_dim, c.head_dim));
  if (c.n_head_kv <= 0 || c.n_head % c.n_head_kv != 0)
    throw ModelError(fmt::format("{}: {} heads do not share {} KV heads evenly", c.name, c.n_head, c.n_head_kv));

  BoundModel m;
  auto keep = [&m](const gguf::Tensor* t) {
    if (t && std::find(m.tensors.begin(), m.tensors.end(), t) == m.tensors.end()) {
      m.tensors.push_back(t);
      m.tensor_bytes += t->bytes;
    }
  };
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
    l.q = bind_matvec(plan, "attn_q", lw.wq, StepPart::AttnQ);
    l.k = bind_matvec(plan, "attn_k", lw.wk, StepPart::AttnK);
    l.v = bind_matvec(plan, "attn_v", lw.wv, StepPart::AttnV);
    l.o = bind_matvec(plan, "attn_out", lw.wo, StepPart::AttnOut);
    l.down = bind_matvec(plan, "ffn_down", lw.ffn_down, StepPart::FfnDown);
    // The fused op when the plan chose it for this layer's gate type and shape.
    const bool fused_planned =
        lw.ffn_gate->type == lw.ffn_up->type && std::any_of(plan.begin(), plan.end(), [&](const PlannedMatvec& p) {
          return p.op == "ffn_up_gate" && p.weight == weight_type_of(lw.ffn_gate) && p.shape == shape_of(lw.ffn_gate);
        });
    if (fused_planned) {
      l.fused = true;
      l.up_gate = bind_matvec(plan, "ffn_up_gate", lw.ffn_gate, StepPart::FfnUpGate);
      l.up_gate.w2 = lw.ffn_up;
    } else {
      l.gate = bind_matvec(plan, "ffn_gate", lw.ffn_gate, StepPart::FfnGate);
      l.up = bind_matvec(plan, "ffn_up", lw.ffn_up, StepPart::FfnUp);
    }
    for (const gguf::Tensor* t : {lw.wq, lw.wk, lw.wv, lw.wo, lw.ffn_gate, lw.ffn_up, lw.ffn_down, lw.attn_norm,
                                  lw.ffn_norm, lw.bq, lw.bk, lw.bv, lw.q_norm, lw.k_norm}) {
      if (t) m.weight_bytes += t->bytes;
      keep(t);
    }
    m.layers.push_back(l);
  }
  m.lm_head = bind_matvec(plan, "lm_head", weights.output, StepPart::LmHead);
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
    for (const BoundMatvec* b : {&l.q, &l.k, &l.v, &l.o, &l.gate, &l.up, &l.up_gate, &l.down}) count(*b);
  count(m.lm_head);
  return m;
}

std::vector<std::size_t> weight_offsets(const BoundModel& m, std::size_t& total) {
  std::vector<std::size_t> offsets;
  total = 0;
  for (const gguf::Tensor* t : m.tensors) {
    offsets.push_back(total);
    total = align_up(total + t->bytes);
  }
  return offsets;
}

ScratchLayout scratch_layout(const ModelConfig& c, int attn_splits, bool q8_1, bool outlier_routing) {
  ScratchLayout l;
  auto take = [&l](std::size_t bytes) {
    const std::size_t at = l.bytes;
    l.bytes = align_up(at + std::max<std::size_t>(bytes, 1));
    return at;
  };
  const std::size_t f = sizeof(float);
  const int q_width = c.n_head * c.head_dim, kv_width = c.n_head_kv * c.head_dim;
  l.x = take(c.n_embd * f);
  l.xn = take(std::max(c.n_embd, q_width) * f);
  l.q = take(q_width * f);
  l.k = take(kv_width * f);
  l.v = take(kv_width * f);
  l.att = take(q_width * f);
  l.att_out = take(c.n_embd * f);
  l.gate = take(c.n_ff * f);
  l.up = take(c.n_ff * f);
  l.ffn_out = take(c.n_embd * f);
  l.logits = take(static_cast<std::size_t>(c.vocab_size) * f);
  l.rope_cos = take(c.rope_dim / 2 * f);
  l.rope_sin = take(c.rope_dim / 2 * f);
  l.attn_partials = take(static_cast<std::size_t>(c.n_head) * attn_splits * attention_partial_floats(c.head_dim) * f);
  if (q8_1) {
    // The longest vector a matvec reads, in whole Q8_1 blocks.
    const std::int64_t longest = std::max({c.n_embd, q_width, c.n_ff});
    l.act_q8_1_bytes = row_bytes(ActFormat::Q8_1, (longest + kQ8_1Block - 1) / kQ8_1Block * kQ8_1Block);
    l.act_q8_1 = take(l.act_q8_1_bytes);
  }
  if (outlier_routing) {
    l.outlier_slots = outlier_slots(c);
    l.outlier_verdicts = take(l.outlier_slots * sizeof(int));
    l.route_table = take(static_cast<std::size_t>(l.outlier_slots) * kRouteRowWords * sizeof(unsigned long long));
  }
  l.state = take(sizeof(DecodeState));
  return l;
}

std::size_t kv_cache_bytes(const ModelConfig& c, int context) {
  return 2 * static_cast<std::size_t>(c.n_layers) * context * c.n_head_kv * c.head_dim * sizeof(float);
}

int attention_splits(int sm_count, int n_head, int context) {
  int splits = (2 * std::max(sm_count, 1) + n_head - 1) / n_head;
  splits = std::min(splits, 64);
  splits = std::min(splits, std::max(1, context / 16));
  return std::max(splits, 1);
}

StepProgram make_step_program(const ModelConfig& c, const BoundModel& m, int context,
                              const std::function<const void*(const gguf::Tensor*)>& address_of,
                              const ScratchLayout& layout, void* scratch, void* kv_cache) {
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
  auto* base = static_cast<std::uint8_t*>(scratch);
  auto buf = [base](std::size_t offset) { return reinterpret_cast<float*>(base + offset); };

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
    l.q = op(b.q);
    l.k = op(b.k);
    l.v = op(b.v);
    l.o = op(b.o);
    l.gate = op(b.gate);
    l.up = op(b.up);
    l.up_gate = op(b.up_gate);
    l.down = op(b.down);
    l.fused = b.fused;
    l.k_cache = keys + li * layer_cache;
    l.v_cache = values + li * layer_cache;
    p.layers.push_back(l);
  }
  p.lm_head = op(m.lm_head);
  p.x = buf(layout.x);
  p.xn = buf(layout.xn);
  p.q = buf(layout.q);
  p.k = buf(layout.k);
  p.v = buf(layout.v);
  p.att = buf(layout.att);
  p.att_out = buf(layout.att_out);
  p.gate = buf(layout.gate);
  p.up = buf(layout.up);
  p.ffn_out = buf(layout.ffn_out);
  p.logits = buf(layout.logits);
  p.rope_cos = buf(layout.rope_cos);
  p.rope_sin = buf(layout.rope_sin);
  p.attn_partials = buf(layout.attn_partials);
  p.act_q8_1 = layout.act_q8_1_bytes ? base + layout.act_q8_1 : nullptr;
  p.act_q8_1_bytes = layout.act_q8_1_bytes;
  p.outlier_verdicts = layout.outlier_slots ? reinterpret_cast<int*>(base + layout.outlier_verdicts) : nullptr;
  p.route_table = layout.outlier_slots ? reinterpret_cast<unsigned long long*>(base + layout.route_table) : nullptr;
  p.outlier_slots = layout.outlier_slots;
  p.state = base + layout.state;
  return p;
}

HeadStepArgs head_step_args(const ModelConfig& c, const StepProgram& p, const LayerOps& l) {
  HeadStepArgs a;
  a.q = p.q;
  a.k = p.k;
  a.v = p.v;
  a.bq = l.bq;
  a.bk = l.bk;
  a.bv = l.bv;
  a.q_norm = l.q_norm;
  a.k_norm = l.k_norm;
  a.rope_cos = p.rope_cos;
  a.rope_sin = p.rope_sin;
  a.k_cache = l.k_cache;
  a.v_cache = l.v_cache;
  a.state = static_cast<const DecodeState*>(p.state);
  a.n_head = c.n_head;
  a.n_head_kv = c.n_head_kv;
  a.head_dim = c.head_dim;
  a.rope_dim = c.rope_dim;
  a.interleaved = c.rope == RopeStyle::Interleaved;
  a.eps = c.rms_eps;
  return a;
}

AttentionArgs attention_args(const ModelConfig& c, const StepProgram& p, const LayerOps& l, int attn_splits) {
  AttentionArgs a;
  a.q = p.q;
  a.k_cache = l.k_cache;
  a.v_cache = l.v_cache;
  a.partials = p.attn_partials;
  a.out = p.att;
  a.state = static_cast<const DecodeState*>(p.state);
  a.n_head = c.n_head;
  a.n_head_kv = c.n_head_kv;
  a.head_dim = c.head_dim;
  a.n_splits = attn_splits;
  a.scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));  // as the CPU
  return a;
}

}  // namespace cuda

namespace {

std::string bytes_text(std::uint64_t b) {
  if (b >= (1ull << 30)) return fmt::format("{:.2f} GiB", b / double(1ull << 30));
  if (b >= (1ull << 20)) return fmt::format("{:.1f} MiB", b / double(1ull << 20));
  return fmt::format("{:.1f} KiB", b / 1024.0);
}

}  // namespace

DeviceMemoryNeed device_memory_need(const ModelConfig& c, const ModelWeights& w, const std::vector<PlannedMatvec>& plan,
                                    int context, int sm_count) {
  const cuda::BoundModel m = cuda::bind_gpu_plan(c, w, plan);
  DeviceMemoryNeed need;
  std::size_t weights = 0;
  cuda::weight_offsets(m, weights);
  need.weights = weights;
  need.kv_cache = cuda::kv_cache_bytes(c, context);
  need.scratch =
      cuda::scratch_layout(c, cuda::attention_splits(sm_count, c.n_head, context), m.needs_q8_1, m.routes_outliers).bytes;
  need.context = context;
  return need;
}

std::string device_memory_refusal(const DeviceMemoryNeed& need, std::uint64_t free_bytes, const std::string& device) {
  if (need.total() + kDeviceMemoryReserve <= free_bytes) return {};
  return fmt::format(
      "{}: the model needs {} of device memory (weights {} + KV cache {} for {} positions + scratch {}) and {} "
      "kept for CUDA itself, but only {} is free{}",
      device, bytes_text(need.total()), bytes_text(need.weights), bytes_text(need.kv_cache), need.context,
      bytes_text(need.scratch), bytes_text(kDeviceMemoryReserve), bytes_text(free_bytes),
      need.kv_cache > need.weights / 4 ? "; a shorter --context shrinks the KV cache" : "");
}

}  // namespace qmv
