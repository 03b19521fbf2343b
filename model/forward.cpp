#include "model/forward.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/outliers.h"

namespace qmv {

std::string_view to_string(StepPart p) {
  switch (p) {
    case StepPart::Embed: return "embed";
    case StepPart::Norm: return "rms_norm";
    case StepPart::ActQuant: return "act_quant";
    case StepPart::OutlierTest: return "outlier_test";
    case StepPart::AttnQ: return "attn_q";
    case StepPart::AttnK: return "attn_k";
    case StepPart::AttnV: return "attn_v";
    case StepPart::QkNormRope: return "rope";
    case StepPart::Attention: return "attention";
    case StepPart::AttnOut: return "attn_out";
    case StepPart::FfnGate: return "ffn_gate";
    case StepPart::FfnUp: return "ffn_up";
    case StepPart::FfnUpGate: return "ffn_up_gate";
    case StepPart::Swiglu: return "swiglu";
    case StepPart::FfnDown: return "ffn_down";
    case StepPart::LmHead: return "lm_head";
    case StepPart::kCount: break;
  }
  return "?";
}

bool is_matvec(StepPart p) {
  switch (p) {
    case StepPart::AttnQ: case StepPart::AttnK: case StepPart::AttnV: case StepPart::AttnOut:
    case StepPart::FfnGate: case StepPart::FfnUp: case StepPart::FfnUpGate: case StepPart::FfnDown:
    case StepPart::LmHead:
      return true;
    default:
      return false;
  }
}

double StepTimes::total() const {
  double s = 0;
  for (double x : seconds) s += x;
  return s;
}

namespace {

using Clock = std::chrono::steady_clock;

const float* f32_data(const gguf::Tensor* t) { return t ? reinterpret_cast<const float*>(t->data) : nullptr; }

Shape shape_of(const gguf::Tensor* t) {
  return {static_cast<std::int64_t>(t->dims[1]), static_cast<std::int64_t>(t->dims[0])};
}

WeightType weight_type_of(const gguf::Tensor* t) {
  WeightType w;
  if (!parse_weight_type(t->type->name, w))
    throw PlanError(fmt::format("'{}' is {}, a type no kernel here reads", t->name, t->type->name));
  return w;
}

// y = x / rms(x) * weight, accumulated in double: the sum of squares of a few
// thousand values is where float loses digits.
void rms_norm(const float* x, const float* weight, float* y, int n, float eps) {
  double ss = 0;
  for (int i = 0; i < n; ++i) ss += double(x[i]) * x[i];
  const float scale = static_cast<float>(1.0 / std::sqrt(ss / n + eps));
  for (int i = 0; i < n; ++i) y[i] = x[i] * scale * weight[i];
}

float dot(const float* a, const float* b, int n) {
  float s = 0;
#pragma omp simd reduction(+ : s)
  for (int i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

}  // namespace

CpuForward::Matvec CpuForward::bind(const std::vector<PlannedMatvec>& plan, const std::string& op,
                                    const gguf::Tensor* t, StepPart part) const {
  const WeightType w = weight_type_of(t);
  const Shape s = shape_of(t);
  for (const PlannedMatvec& p : plan) {
    if (p.op == op && p.weight == w && p.shape == s) {
      Matvec m;
      m.kernel = p.kernel;
      m.shape = s;
      m.w = t->data;
      m.w_bytes = t->bytes;
      m.part = part;
      m.outlier_kernel = p.outlier_kernel;
      m.outlier_k = p.outlier_k;
      return m;
    }
  }
  throw PlanError(fmt::format("plan: no kernel planned for {} ({} {}, '{}')", op, to_string(w), to_string(s),
                              t->name));
}

CpuForward::CpuForward(const ModelConfig& config, const ModelWeights& weights,
                       const std::vector<PlannedMatvec>& plan, int threads, int context)
    : c_(config), weights_(weights), threads_(std::max(1, threads)) {
  context_ = context > 0 ? std::min(context, c_.context_length) : c_.context_length;
  const int hd = c_.head_dim, q_width = c_.n_head * hd, kv_width = c_.n_head_kv * hd;

  for (const LayerWeights& lw : weights.layers) {
    Layer l{};
    l.attn_norm = f32_data(lw.attn_norm);
    l.ffn_norm = f32_data(lw.ffn_norm);
    l.bq = f32_data(lw.bq);
    l.bk = f32_data(lw.bk);
    l.bv = f32_data(lw.bv);
    l.q_norm = f32_data(lw.q_norm);
    l.k_norm = f32_data(lw.k_norm);
    l.q = bind(plan, "attn_q", lw.wq, StepPart::AttnQ);
    l.k = bind(plan, "attn_k", lw.wk, StepPart::AttnK);
    l.v = bind(plan, "attn_v", lw.wv, StepPart::AttnV);
    l.o = bind(plan, "attn_out", lw.wo, StepPart::AttnOut);
    l.down = bind(plan, "ffn_down", lw.ffn_down, StepPart::FfnDown);
    // The fused op when the plan chose it for this layer's gate type and shape.
    const bool fused_planned =
        lw.ffn_gate->type == lw.ffn_up->type &&
        std::any_of(plan.begin(), plan.end(), [&](const PlannedMatvec& p) {
          return p.op == "ffn_up_gate" && p.weight == weight_type_of(lw.ffn_gate) && p.shape == shape_of(lw.ffn_gate);
        });
    if (fused_planned) {
      l.fused = true;
      l.up_gate = bind(plan, "ffn_up_gate", lw.ffn_gate, StepPart::FfnUpGate);
      l.up_gate.w2 = lw.ffn_up->data;
      l.up_gate.w2_bytes = lw.ffn_up->bytes;
    } else {
      l.gate = bind(plan, "ffn_gate", lw.ffn_gate, StepPart::FfnGate);
      l.up = bind(plan, "ffn_up", lw.ffn_up, StepPart::FfnUp);
    }
    for (const gguf::Tensor* t : {lw.wq, lw.wk, lw.wv, lw.wo, lw.ffn_gate, lw.ffn_up, lw.ffn_down, lw.attn_norm,
                                  lw.ffn_norm, lw.bq, lw.bk, lw.bv, lw.q_norm, lw.k_norm})
      if (t) weight_bytes_ += t->bytes;
    layers_.push_back(l);
  }
  lm_head_ = bind(plan, "lm_head", weights.output, StepPart::LmHead);
  auto count = [this](const Matvec& m) {
    if (m.kernel) part_bytes_[static_cast<int>(m.part)] += m.w_bytes + m.w2_bytes;
  };
  for (const Layer& l : layers_)
    for (const Matvec* m : {&l.q, &l.k, &l.v, &l.o, &l.gate, &l.up, &l.up_gate, &l.down}) count(*m);
  count(lm_head_);
  output_norm_ = f32_data(weights.output_norm);
  embd_type_ = weight_type_of(weights.token_embd);
  embd_row_bytes_ = row_bytes(embd_type_, c_.n_embd);
  weight_bytes_ += weights.output->bytes + weights.output_norm->bytes + embd_row_bytes_;

  x_.resize(c_.n_embd);
  xn_.resize(std::max(c_.n_embd, q_width));
  q_.resize(q_width);
  k_.resize(kv_width);
  v_.resize(kv_width);
  att_.resize(q_width);
  att_out_.resize(c_.n_embd);
  gate_.resize(c_.n_ff);
  up_.resize(c_.n_ff);
  ffn_out_.resize(c_.n_embd);
  logits_.resize(c_.vocab_size);
  scores_.resize(static_cast<std::size_t>(c_.n_head) * context_);
  rope_cos_.resize(c_.rope_dim / 2);
  rope_sin_.resize(c_.rope_dim / 2);
  const std::size_t cache = static_cast<std::size_t>(c_.n_layers) * context_ * kv_width;
  k_cache_.resize(cache);
  v_cache_.resize(cache);
}

std::uint64_t CpuForward::bytes_per_token(int pos) const {
  const std::uint64_t kv_width = static_cast<std::uint64_t>(c_.n_head_kv) * c_.head_dim;
  return weight_bytes_ + 2ull * c_.n_layers * static_cast<std::uint64_t>(pos + 1) * kv_width * sizeof(float);
}

void CpuForward::prepare(const float* x, std::int64_t n) {
  prepared_.x = x;
  prepared_.n = n;
  prepared_.ready = {};
  prepared_.outlier_tested = false;
}

bool CpuForward::has_outliers(double k) {
  if (!prepared_.outlier_tested || prepared_.outlier_k != k) {
    const auto t0 = Clock::now();
    prepared_.outlier = has_massive_activation(prepared_.x, prepared_.n, k);
    prepared_.outlier_tested = true;
    prepared_.outlier_k = k;
    const int part = static_cast<int>(StepPart::OutlierTest);
    times_.seconds[part] += std::chrono::duration<double>(Clock::now() - t0).count();
    ++times_.calls[part];
  }
  return prepared_.outlier;
}

const void* CpuForward::activation(ActFormat f, std::size_t& bytes) {
  bytes = row_bytes(f, prepared_.n);
  if (f == ActFormat::F32) return prepared_.x;
  const int i = static_cast<int>(f);
  auto& buf = prepared_.quantized[i];
  if (!prepared_.ready[i]) {
    const auto t0 = Clock::now();
    buf.resize(bytes);
    quantize_activation(f, prepared_.x, buf.data(), prepared_.n);
    prepared_.ready[i] = true;
    const int part = static_cast<int>(StepPart::ActQuant);
    times_.seconds[part] += std::chrono::duration<double>(Clock::now() - t0).count();
    ++times_.calls[part];
  }
  return buf.data();
}

void CpuForward::invoke_kernel(const KernelSpec& kernel, const Matvec& m, const void* w, std::size_t w_bytes,
                               const void* w2, std::size_t w2_bytes, float* y, float* y2) {
  std::size_t x_bytes = 0;
  const void* x = activation(kernel.act, x_bytes);
  MatVecArgs a = matvec_args(m.shape, w, w_bytes, x, x_bytes, y, w2, w2_bytes, y2);
  a.threads = threads_;
  const Status st = invoke(kernel, a);
  if (!st.ok()) throw std::runtime_error(fmt::format("{} ({}): {}", to_string(m.part), kernel.name, st.error));
}

void CpuForward::matvec(const Matvec& m, float* y, float* y2) {
  const int part = static_cast<int>(m.part);
  const KernelSpec* kernel = m.kernel;
  if (m.outlier_kernel) {
    ++times_.routable[part];
    if (has_outliers(m.outlier_k)) {
      ++times_.routed[part];
      kernel = m.outlier_kernel;
    }
  }
  std::size_t x_bytes = 0;
  activation(kernel->act, x_bytes);  // quantized (and timed) on its own, before the matvec's clock
  const auto t0 = Clock::now();
  if (m.w2 && kernel->op == OpKind::MatVec) {
    // A fused op routed to a plain f32 kernel: one call per matrix.
    invoke_kernel(*kernel, m, m.w, m.w_bytes, nullptr, 0, y, nullptr);
    invoke_kernel(*kernel, m, m.w2, m.w2_bytes, nullptr, 0, y2, nullptr);
  } else {
    invoke_kernel(*kernel, m, m.w, m.w_bytes, m.w2, m.w2_bytes, y, y2);
  }
  times_.seconds[part] += std::chrono::duration<double>(Clock::now() - t0).count();
  ++times_.calls[part];
}

void CpuForward::rope(float* v, int n_heads) const {
  const int hd = c_.head_dim, half = c_.rope_dim / 2;
  for (int h = 0; h < n_heads; ++h) {
    float* head = v + h * hd;
    for (int i = 0; i < half; ++i) {
      // Interleaved rotates neighbours (2i, 2i+1); Halves rotates (i, i + rope_dim/2).
      const int a = c_.rope == RopeStyle::Interleaved ? 2 * i : i;
      const int b = c_.rope == RopeStyle::Interleaved ? 2 * i + 1 : i + half;
      const float x0 = head[a], x1 = head[b];
      head[a] = x0 * rope_cos_[i] - x1 * rope_sin_[i];
      head[b] = x0 * rope_sin_[i] + x1 * rope_cos_[i];
    }
  }
}

void CpuForward::attention(int layer) {
  const int hd = c_.head_dim, kv_width = c_.n_head_kv * hd, group = c_.n_head / c_.n_head_kv;
  const int n_pos = pos_ + 1;
  const float* keys = k_cache_.data() + static_cast<std::size_t>(layer) * context_ * kv_width;
  const float* values = v_cache_.data() + static_cast<std::size_t>(layer) * context_ * kv_width;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  // Heads are independent; a thread team only pays off once the cache is long.
  const bool parallel = threads_ > 1 && static_cast<std::int64_t>(n_pos) * c_.n_head * hd >= (1 << 16);
#pragma omp parallel for num_threads(threads_) schedule(static) if (parallel)
  for (int h = 0; h < c_.n_head; ++h) {
    const float* q = q_.data() + h * hd;
    const int kv_off = (h / group) * hd;
    float* s = scores_.data() + static_cast<std::size_t>(h) * context_;
    float max_s = -INFINITY;
    for (int t = 0; t < n_pos; ++t) {
      s[t] = dot(q, keys + static_cast<std::size_t>(t) * kv_width + kv_off, hd) * scale;
      max_s = std::max(max_s, s[t]);
    }
    float sum = 0;
    for (int t = 0; t < n_pos; ++t) {
      s[t] = std::exp(s[t] - max_s);
      sum += s[t];
    }
    float* out = att_.data() + h * hd;
    std::fill(out, out + hd, 0.0f);
    for (int t = 0; t < n_pos; ++t) {
      const float p = s[t] / sum;
      const float* v = values + static_cast<std::size_t>(t) * kv_width + kv_off;
#pragma omp simd
      for (int i = 0; i < hd; ++i) out[i] += p * v[i];
    }
  }
}

std::span<const float> CpuForward::step(int token) {
  if (token < 0 || token >= c_.vocab_size)
    throw std::out_of_range(fmt::format("token id {} is outside the vocabulary (0..{})", token, c_.vocab_size - 1));
  if (pos_ >= context_)
    throw ContextFull(fmt::format("context full: position {} needs a context longer than {} tokens", pos_, context_));
  const int n = c_.n_embd, hd = c_.head_dim, kv_width = c_.n_head_kv * hd;
  auto timed = [this](StepPart part, auto&& fn) {
    const auto t0 = Clock::now();
    fn();
    const int i = static_cast<int>(part);
    times_.seconds[i] += std::chrono::duration<double>(Clock::now() - t0).count();
    ++times_.calls[i];
  };

  timed(StepPart::Embed, [&] {
    const auto* row = weights_.token_embd->data + static_cast<std::size_t>(token) * embd_row_bytes_;
    dequantize_row(embd_type_, row, x_.data(), n);
    for (int i = 0; i < c_.rope_dim / 2; ++i) {
      // Angles in double: at long positions float loses the low bits of pos * freq.
      const double theta = pos_ * std::pow(double(c_.rope_freq_base), -2.0 * i / c_.rope_dim);
      rope_cos_[i] = static_cast<float>(std::cos(theta));
      rope_sin_[i] = static_cast<float>(std::sin(theta));
    }
  });

  for (int li = 0; li < c_.n_layers; ++li) {
    const Layer& l = layers_[li];
    // Attention block.
    timed(StepPart::Norm, [&] { rms_norm(x_.data(), l.attn_norm, xn_.data(), n, c_.rms_eps); });
    prepare(xn_.data(), n);
    matvec(l.q, q_.data());
    matvec(l.k, k_.data());
    matvec(l.v, v_.data());
    timed(StepPart::QkNormRope, [&] {
      if (l.bq) {
        for (int i = 0; i < c_.n_head * hd; ++i) q_[i] += l.bq[i];
        for (int i = 0; i < kv_width; ++i) k_[i] += l.bk[i];
        for (int i = 0; i < kv_width; ++i) v_[i] += l.bv[i];
      }
      if (l.q_norm) {
        for (int h = 0; h < c_.n_head; ++h) rms_norm(&q_[h * hd], l.q_norm, &q_[h * hd], hd, c_.rms_eps);
        for (int h = 0; h < c_.n_head_kv; ++h) rms_norm(&k_[h * hd], l.k_norm, &k_[h * hd], hd, c_.rms_eps);
      }
      rope(q_.data(), c_.n_head);
      rope(k_.data(), c_.n_head_kv);
      const std::size_t at = (static_cast<std::size_t>(li) * context_ + pos_) * kv_width;
      std::memcpy(&k_cache_[at], k_.data(), kv_width * sizeof(float));
      std::memcpy(&v_cache_[at], v_.data(), kv_width * sizeof(float));
    });
    timed(StepPart::Attention, [&] { attention(li); });
    prepare(att_.data(), c_.n_head * hd);
    matvec(l.o, att_out_.data());
    timed(StepPart::Norm, [&] {
      for (int i = 0; i < n; ++i) x_[i] += att_out_[i];
      rms_norm(x_.data(), l.ffn_norm, xn_.data(), n, c_.rms_eps);
    });
    // Feed-forward block: down(silu(gate x) * up x).
    prepare(xn_.data(), n);
    if (l.fused) {
      matvec(l.up_gate, gate_.data(), up_.data());
    } else {
      matvec(l.gate, gate_.data());
      matvec(l.up, up_.data());
    }
    timed(StepPart::Swiglu, [&] {
      for (int i = 0; i < c_.n_ff; ++i) gate_[i] = gate_[i] / (1.0f + std::exp(-gate_[i])) * up_[i];
    });
    prepare(gate_.data(), c_.n_ff);
    matvec(l.down, ffn_out_.data());
    timed(StepPart::Norm, [&] {
      for (int i = 0; i < n; ++i) x_[i] += ffn_out_[i];
    });
  }

  timed(StepPart::Norm, [&] { rms_norm(x_.data(), output_norm_, xn_.data(), n, c_.rms_eps); });
  prepare(xn_.data(), n);
  matvec(lm_head_, logits_.data());
  ++pos_;
  return logits_;
}

}  // namespace qmv
