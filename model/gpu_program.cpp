// The host side of the GPU decode that needs no device: the GPU's checks of the bound
// plan, the memory layout and its size, the refusal when it does not fit, and the
// step program's addresses. Built with or without CUDA, so all of it is tested here.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <optional>
#include <unordered_map>
#include <unordered_set>

#include "model/forward_cuda.h"
#include "model/gpu_math.h"
#include "model/gpu_program.h"

namespace qmv {
namespace cuda {
namespace {

constexpr std::size_t kAlign = 256;

std::size_t align_up(std::size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

}  // namespace

BoundModel bind_gpu_plan(const ModelConfig& c, const ModelWeights& weights, const std::vector<PlannedMatvec>& plan) {
  if (c.head_dim > kMaxHeadDim)
    throw ModelError(fmt::format("{}: head_dim {} is above the {} the GPU attention kernels hold", c.name, c.head_dim,
                                 kMaxHeadDim));
  if (c.rope_dim > c.head_dim || c.rope_dim % 2 != 0)
    throw ModelError(fmt::format("{}: rope_dim {} must be even and at most head_dim {}", c.name, c.rope_dim, c.head_dim));
  if (c.n_head_kv <= 0 || c.n_head % c.n_head_kv != 0)
    throw ModelError(fmt::format("{}: {} heads do not share {} KV heads evenly", c.name, c.n_head, c.n_head_kv));
  BoundModel m = bind_plan(c, weights, plan, Backend::CUDA);
  auto check_act = [](const BoundMatvec& b) {
    if (!b.kernel || b.kernel->act == ActFormat::F32 || b.kernel->act == ActFormat::Q8_1) return;
    throw PlanError(fmt::format("GPU plan: {} ({} {}, '{}') runs {}, which reads {} activations; the GPU step "
                                "has f32 and quantizes to q8_1",
                                to_string(b.part), to_string(b.kernel->weight), to_string(b.shape), b.w->name,
                                b.kernel->name, to_string(b.kernel->act)));
  };
  for (const BoundLayer& l : m.layers)
    for (const Op op : kLayerMatvecOps) check_act(matvec_slot(l, op));
  check_act(m.lm_head);
  return m;
}

std::vector<std::size_t> weight_offsets(const BoundModel& m, std::size_t& total) {
  // A layer's ffn_up goes right after its ffn_gate, and its attn_k after attn_q and
  // attn_v after attn_k, where that keeps each aligned, so they can run as one matrix
  // (stack_gate_up, stack_qkv).
  const std::unordered_set<const gguf::Tensor*> listed(m.tensors.begin(), m.tensors.end());
  std::unordered_map<const gguf::Tensor*, std::vector<const gguf::Tensor*>> followers;
  std::unordered_set<const gguf::Tensor*> placed;  // as a follower
  auto chain = [&](std::initializer_list<const gguf::Tensor*> run) {
    const gguf::Tensor* head = *run.begin();
    if (!head || !listed.count(head) || placed.count(head) || followers.count(head)) return;
    std::vector<const gguf::Tensor*> after;
    const gguf::Tensor* last = head;
    for (auto t = run.begin() + 1; t != run.end(); ++t) {
      const bool fits = *t && listed.count(*t) && last->bytes % kAlign == 0 && !placed.count(*t) &&
                        !followers.count(*t) && std::find(after.begin(), after.end(), *t) == after.end() &&
                        *t != head;
      if (!fits) break;
      after.push_back(*t);
      last = *t;
    }
    if (after.empty()) return;
    placed.insert(after.begin(), after.end());
    followers[head] = std::move(after);
  };
  for (const BoundLayer& l : m.layers) {
    chain({l.q.w, l.k.w, l.v.w});
    if (!l.fused) chain({l.gate.w, l.up.w});
  }
  std::unordered_map<const gguf::Tensor*, std::size_t> at;
  total = 0;
  for (const gguf::Tensor* t : m.tensors) {
    if (placed.count(t)) continue;
    at[t] = total;
    total = align_up(total + t->bytes);
    if (const auto f = followers.find(t); f != followers.end())
      for (const gguf::Tensor* next : f->second) {
        at[next] = total;
        total = align_up(total + next->bytes);
      }
  }
  std::vector<std::size_t> offsets;
  for (const gguf::Tensor* t : m.tensors) offsets.push_back(at.at(t));
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
  // q, k and v back to back where that keeps each aligned: a stacked matvec writes
  // them at once (stack_qkv).
  l.q = take(q_width * f);
  l.k = take(kv_width * f);
  l.v = take(kv_width * f);
  l.att = take(q_width * f);
  l.att_out = take(c.n_embd * f);
  // gate and up back to back where that keeps up aligned: a stacked gate+up matvec
  // writes both at once (stack_gate_up).
  if (c.n_ff * f % kAlign == 0) {
    l.gate = take(2 * c.n_ff * f);
    l.up = l.gate + c.n_ff * f;
  } else {
    l.gate = take(c.n_ff * f);
    l.up = take(c.n_ff * f);
  }
  l.ffn_out = take(c.n_embd * f);
  l.logits = take(static_cast<std::size_t>(c.vocab_size) * f);
  l.rope_cos = take(c.rope_dim / 2 * f);
  l.rope_sin = take(c.rope_dim / 2 * f);
  l.attn_partials = take(static_cast<std::size_t>(c.n_head) * attn_splits * attention_partial_floats(c.head_dim) * f);
  l.attn_counters = take(static_cast<std::size_t>(c.n_head) * sizeof(unsigned));
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

int attention_splits(int sm_count, int n_head, int context) {
  int splits = (2 * std::max(sm_count, 1) + n_head - 1) / n_head;
  splits = std::min(splits, 64);
  splits = std::min(splits, std::max(1, context / 16));
  return std::max(splits, 1);
}

StepProgram make_step_program(const ModelConfig& c, const BoundModel& m, int context,
                              const std::function<const void*(const gguf::Tensor*)>& address_of,
                              const ScratchLayout& layout, void* scratch, void* kv_cache, Stacking stacking) {
  StepProgram p = qmv::make_step_program(c, m, context, address_of, kv_cache);
  auto* base = static_cast<std::uint8_t*>(scratch);
  auto buf = [base](std::size_t offset) { return reinterpret_cast<float*>(base + offset); };
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
  p.attn_counters = reinterpret_cast<unsigned*>(base + layout.attn_counters);
  p.act_q8_1 = layout.act_q8_1_bytes ? base + layout.act_q8_1 : nullptr;
  p.act_q8_1_bytes = layout.act_q8_1_bytes;
  p.outlier_verdicts = layout.outlier_slots ? reinterpret_cast<int*>(base + layout.outlier_verdicts) : nullptr;
  p.route_table = layout.outlier_slots ? reinterpret_cast<unsigned long long*>(base + layout.route_table) : nullptr;
  p.outlier_slots = layout.outlier_slots;
  p.state = base + layout.state;
  if (stacking.gate_up) stack_gate_up(p);
  if (stacking.qkv) stack_qkv(p);
  return p;
}

namespace {

// `a` and `b` as one call of a's kernel on a's rows then b's: the same plain kernel,
// outlier routing and columns, b's weights right after a's and b's output right after
// a's. The stacked op, or nothing where they cannot be.
std::optional<MatvecOp> stacked(const MatvecOp& a, float* a_out, const MatvecOp& b, float* b_out, Op part) {
  const bool same_call = a.kernel && a.kernel == b.kernel && a.kernel->op == OpKind::MatVec && !a.w2 && !b.w2 &&
                         a.outlier_kernel == b.outlier_kernel && a.outlier_k == b.outlier_k &&
                         a.shape.cols == b.shape.cols;
  if (!same_call) return std::nullopt;
  const bool adjacent = static_cast<const std::uint8_t*>(a.w) + a.w_bytes == b.w && a_out + a.shape.rows == b_out &&
                        a.w_bytes == static_cast<std::size_t>(a.shape.rows) * row_bytes(a.kernel->weight, a.shape.cols);
  if (!adjacent) return std::nullopt;
  const Shape both{a.shape.rows + b.shape.rows, a.shape.cols};
  if (!a.kernel->supports(both) || (a.outlier_kernel && !a.outlier_kernel->supports(both))) return std::nullopt;
  MatvecOp s = a;
  s.shape = both;
  s.part = part;
  s.w_bytes = a.w_bytes + b.w_bytes;
  return s;
}

}  // namespace

int stack_qkv(StepProgram& p) {
  int stacked_layers = 0;
  for (LayerOps& l : p.layers) {
    if (l.qkv_stacked) continue;
    const std::optional<MatvecOp> qk = stacked(l.q, p.q, l.k, p.k, Op::AttnQkv);
    if (!qk) continue;
    l.qkv = *qk;
    l.qkv_stacked = 2;
    // q's output and weights run on into k's: the pair is one "a" for v.
    if (const std::optional<MatvecOp> qkv = stacked(*qk, p.q, l.v, p.v, Op::AttnQkv)) {
      l.qkv = *qkv;
      l.qkv_stacked = 3;
    }
    ++stacked_layers;
  }
  return stacked_layers;
}

int stack_gate_up(StepProgram& p) {
  int stacked_layers = 0;
  for (LayerOps& l : p.layers) {
    if (l.fused) continue;
    const std::optional<MatvecOp> s = stacked(l.gate, p.gate, l.up, p.up, Op::FfnUpGate);
    if (!s) continue;
    l.up_gate = *s;
    l.fused = true;
    ++stacked_layers;
  }
  return stacked_layers;
}

void move_stacked_bytes(const StepProgram& p, BoundModel& m) {
  auto move = [&m](Op from, Op to, std::uint64_t bytes) {
    m.part_bytes[static_cast<int>(from)] -= bytes;
    m.part_bytes[static_cast<int>(to)] += bytes;
  };
  for (std::size_t i = 0; i < p.layers.size(); ++i) {
    const LayerOps& l = p.layers[i];
    const BoundLayer& b = m.layers.at(i);
    if (l.fused && !b.fused) {
      move(Op::FfnGate, Op::FfnUpGate, b.gate.w->bytes);
      move(Op::FfnUp, Op::FfnUpGate, b.up.w->bytes);
    }
    if (l.qkv_stacked >= 2) {
      move(Op::AttnQ, Op::AttnQkv, b.q.w->bytes);
      move(Op::AttnK, Op::AttnQkv, b.k.w->bytes);
    }
    if (l.qkv_stacked == 3) move(Op::AttnV, Op::AttnQkv, b.v.w->bytes);
  }
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

FusedAttentionArgs fused_attention_args(const ModelConfig& c, const StepProgram& p, const LayerOps& l, int attn_splits,
                                        BlockQ8_1* out_q8_1) {
  FusedAttentionArgs f;
  f.head = head_step_args(c, p, l);
  f.attn = attention_args(c, p, l, attn_splits);
  f.out_q8_1 = out_q8_1;
  f.split_counters = p.attn_counters;
  return f;
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
  const BoundModel m = cuda::bind_gpu_plan(c, w, plan);
  DeviceMemoryNeed need;
  std::size_t weights = 0;
  cuda::weight_offsets(m, weights);
  need.weights = weights;
  need.kv_cache = kv_cache_bytes(c, context);
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
