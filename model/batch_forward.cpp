#include "model/batch_forward.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>
#include <tuple>

#include "kernels/activation_quantizers.h"
#include "kernels/availability.h"
#include "kernels/cpu_features.h"
#include "kernels/registry.h"
#include "model/attention.h"
#include "model/vector_ops.h"

namespace qmv {

namespace {

using Clock = std::chrono::steady_clock;

bool takes_batch(const KernelSpec& k, int batch) { return k.op == OpKind::MatVecBatch && k.max_n >= batch; }

// The batch kernel for a matvec whose one-vector kernel is `one` (batch_plan's order).
const KernelSpec* batch_kernel_for(const KernelSpec& one, Shape shape, int batch) {
  if (takes_batch(one, batch)) return &one;
  const KernelSpec* best = nullptr;
  auto rank = [&](const KernelSpec& k) {
    return std::make_tuple(k.act == one.act, std::popcount(k.cpu_features));
  };
  for (const KernelSpec& k : global_registry().all()) {
    if (k.backend != Backend::CPU || k.weight != one.weight || !takes_batch(k, batch) || !k.peer.empty() ||
        !k.supports(shape) || !availability(k).available)
      continue;
    // Ties go to the first by name: the registry's order is the order files registered in.
    if (!best || rank(k) > rank(*best) || (rank(k) == rank(*best) && k.name < best->name)) best = &k;
  }
  return best;
}

// The GB/s of a one-vector kernel measured at `gbps` on one vector per call, as of one
// batch call: the weights once and `batch` vectors over `batch` calls' time.
double per_batch_call(const KernelSpec& one, Shape s, int batch, double gbps) {
  return gbps * static_cast<double>(bytes_moved(one, s, batch)) / (batch * static_cast<double>(bytes_moved(one, s, 1)));
}

// A way to run a matvec's `batch` vectors, with its measured time for all of them.
struct BatchCandidate {
  const KernelSpec* kernel = nullptr;
  double time_us = 0;  // for the `batch` vectors
  double gbps = 0;     // one batch call's bytes over time_us
  std::string source;
};

// The speeds' fastest figure for `kernel` at the matvec's shape, threads and count of
// vectors per call, or null.
const KernelSpeed* measured(const std::vector<KernelSpeed>& speeds, const KernelSpec& kernel, const PlannedMatvec& p,
                            int threads, int n) {
  const KernelSpeed* best = nullptr;
  for (const KernelSpeed& s : speeds)
    if (s.n == n && s.kernel == kernel.name && s.rows == p.shape.rows && s.cols == p.shape.cols &&
        s.threads == threads && s.time_median_us > 0 && (!best || s.time_median_us < best->time_median_us))
      best = &s;
  return best;
}

// The measured ways to run the matvec's `batch` vectors, fastest first: every batch
// kernel that takes them with a figure at n = `batch`, and the one-vector kernel `one`
// called `batch` times with its figure at n = 1.
std::vector<BatchCandidate> measured_candidates(const PlannedMatvec& p, const KernelSpec& one, int batch, int threads,
                                                const std::vector<KernelSpeed>& speeds) {
  std::vector<BatchCandidate> out;
  for (const KernelSpec& k : global_registry().all()) {
    // auto plans with qmvlab's own kernels, as resolve_plan does.
    if (k.backend != Backend::CPU || k.weight != p.weight || !takes_batch(k, batch) || !k.peer.empty() ||
        !k.supports(p.shape) || !availability(k).available)
      continue;
    if (const KernelSpeed* s = measured(speeds, k, p, threads, batch))
      out.push_back({&k, s->time_median_us, s->gbps_median, s->source});
  }
  if (out.empty()) return out;  // nothing to weigh the one-vector kernel against
  if (one.op == OpKind::MatVec)
    if (const KernelSpeed* s = measured(speeds, one, p, threads, 1)) {
      out.push_back({&one, batch * s->time_median_us, per_batch_call(one, p.shape, batch, s->gbps_median), s->source});
    }
  std::stable_sort(out.begin(), out.end(),
                   [](const BatchCandidate& a, const BatchCandidate& b) { return a.time_us < b.time_us; });
  return out;
}

}  // namespace

std::vector<PlannedMatvec> batch_plan(const std::vector<PlannedMatvec>& plan, int batch, int threads,
                                      const std::vector<KernelSpeed>& speeds) {
  // As resolve_plan says of an unmeasured matvec where others were measured.
  const std::string static_source = std::any_of(speeds.begin(), speeds.end(),
                                                [&](const KernelSpeed& s) { return s.n == batch; })
                                        ? "static order (not measured)"
                                        : "static order";
  std::vector<PlannedMatvec> out = plan;
  for (PlannedMatvec& p : out) {
    if (p.op == Op::FfnUpGate)
      throw PlanError("a batch decode runs gate and up apart: its plan has no fused ffn_up_gate entry");
    p.batch = batch;
    if (!p.kernel) continue;
    const bool by_auto = p.why != "plan";
    if (by_auto)
      if (const auto ranked = measured_candidates(p, *p.kernel, batch, threads, speeds); !ranked.empty()) {
        const BatchCandidate& best = ranked[0];
        p.why = best.kernel->op == OpKind::MatVecBatch
                    ? fmt::format("auto, batch of {}: fastest measured", batch)
                    : fmt::format("auto, batch of {}: the one-vector kernel {} times, faster than every batch kernel "
                                  "measured",
                                  batch, batch);
        p.kernel = best.kernel;
        p.gbps = best.gbps;
        p.source = best.source;
        p.runner_up = ranked.size() > 1 ? ranked[1].kernel : nullptr;
        p.runner_up_gbps = ranked.size() > 1 ? ranked[1].gbps : 0;
        continue;
      }
    if (const KernelSpec* k = batch_kernel_for(*p.kernel, p.shape, batch)) {
      if (k != p.kernel) {
        p.why = fmt::format("batch of {}: static order (for {})", batch, p.kernel->name);
        p.kernel = k;
        p.gbps = 0;
        p.source = by_auto ? static_source : "static order";
        p.runner_up = nullptr;
        p.runner_up_gbps = 0;
      }
    } else {
      p.why = fmt::format("no batch kernel for {} {} here: called once per sequence", to_string(p.weight),
                          to_string(p.shape));
      // The one-vector figures as of one batch call, as a batch kernel's are.
      p.gbps = per_batch_call(*p.kernel, p.shape, batch, p.gbps);
      if (p.runner_up && p.runner_up->op == OpKind::MatVec)
        p.runner_up_gbps = per_batch_call(*p.runner_up, p.shape, batch, p.runner_up_gbps);
    }
  }
  return out;
}

BatchCpuForward::BatchCpuForward(const LoadedModel& model, const std::vector<PlannedMatvec>& plan, int batch,
                                 int threads, int context)
    : c_(model.config),
      batch_(std::max(1, batch)),
      threads_(std::max(1, threads)),
      avx2_exp_(missing_cpu_features(static_cast<std::uint32_t>(CpuFeature::AVX2)) == 0) {
  context_ = context > 0 ? std::min(context, c_.context_length) : c_.context_length;
  bound_ = bind_plan(c_, model.weights, plan, Backend::CPU);
  for (const BoundLayer& l : bound_.layers) {
    if (l.fused) throw PlanError("a batch decode runs gate and up apart: the plan fuses them");
    for (const Op op : kLayerMatvecOps)
      if (matvec_slot(l, op).outlier_kernel) throw PlanError("a batch decode does not route outliers");
  }
  const auto b = static_cast<std::size_t>(batch_);
  const int q_width = c_.n_head * c_.head_dim, kv_width = c_.n_head_kv * c_.head_dim;
  pos_.assign(b, 0);
  tokens_.assign(b, 0);
  cache_floats_ = qmv::kv_cache_bytes(c_, context_) / sizeof(float);
  kv_cache_.resize(b * cache_floats_);
  x_.resize(b * c_.n_embd);
  xn_.resize(b * c_.n_embd);
  q_.resize(b * q_width);
  k_.resize(b * kv_width);
  v_.resize(b * kv_width);
  att_.resize(b * q_width);
  att_out_.resize(b * c_.n_embd);
  gate_.resize(b * c_.n_ff);
  up_.resize(b * c_.n_ff);
  ffn_out_.resize(b * c_.n_embd);
  logits_.resize(b * c_.vocab_size);
  scores_.resize(b * c_.n_head * static_cast<std::size_t>(context_));
  rope_cos_.resize(b * (c_.rope_dim / 2));
  rope_sin_.resize(b * (c_.rope_dim / 2));
  program_ = make_step_program(
      c_, bound_, context_, [](const gguf::Tensor* t) -> const void* { return t->data; }, kv_cache_.data());
  program_.x = x_.data();
  program_.xn = xn_.data();
  program_.q = q_.data();
  program_.k = k_.data();
  program_.v = v_.data();
  program_.att = att_.data();
  program_.att_out = att_out_.data();
  program_.gate = gate_.data();
  program_.up = up_.data();
  program_.ffn_out = ffn_out_.data();
  program_.logits = logits_.data();
  program_.rope_cos = rope_cos_.data();
  program_.rope_sin = rope_sin_.data();
  // Every weight transform now, outside the steps' time.
  const auto t0 = Clock::now();
  auto prepare_op = [&](const MatvecOp& m) {
    if (m.kernel && m.kernel->prepare && m.w) prepared_weights_.get(*m.kernel, m.shape, m.w, m.w_bytes);
  };
  for (const LayerOps& l : program_.layers)
    for (const Op op : kLayerMatvecOps) prepare_op(matvec_slot(l, op));
  prepare_op(program_.lm_head);
  repack_.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  repack_.matrices = prepared_weights_.matrices();
  repack_.bytes = prepared_weights_.bytes();
}

std::uint64_t BatchCpuForward::bytes_per_step() const {
  const std::uint64_t kv_width = static_cast<std::uint64_t>(c_.n_head_kv) * c_.head_dim;
  std::uint64_t bytes = bound_.weight_bytes;
  for (int p : pos_) bytes += 2ull * c_.n_layers * static_cast<std::uint64_t>(p + 1) * kv_width * sizeof(float);
  return bytes;
}

template <class Fn>
void BatchCpuForward::timed(Op op, Fn&& fn) {
  const auto t0 = Clock::now();
  fn();
  times_.add(op, std::chrono::duration<double>(Clock::now() - t0).count());
}

void BatchCpuForward::set_activation(const float* x, std::int64_t n) {
  activation_x_ = x;
  activation_n_ = n;
  quantized_ready_ = {};
}

const void* BatchCpuForward::activation(ActFormat f, std::size_t& bytes_per_vector) {
  bytes_per_vector = row_bytes(f, activation_n_);
  if (f == ActFormat::F32) return activation_x_;
  const int i = static_cast<int>(f);
  auto& buf = quantized_[i];
  if (!quantized_ready_[i]) {
    const auto t0 = Clock::now();
    buf.resize(batch_ * bytes_per_vector);
    for (int b = 0; b < batch_; ++b)
      quantize_to_shared(f, activation_x_ + b * activation_n_, activation_n_, buf.data() + b * bytes_per_vector,
                         staging_);
    quantized_ready_[i] = true;
    times_.add(Op::ActQuant, std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return buf.data();
}

void BatchCpuForward::matvec(const MatvecOp& m, float* y, float*) {
  const KernelSpec& kernel = *m.kernel;
  std::size_t x_one = 0;
  const auto* x = static_cast<const std::uint8_t*>(activation(kernel.act, x_one));  // quantized before the clock
  const void* prepared = kernel.prepare ? prepared_weights_.get(kernel, m.shape, m.w, m.w_bytes) : nullptr;
  const auto rows = static_cast<std::size_t>(m.shape.rows);
  const auto t0 = Clock::now();
  auto call = [&](const std::uint8_t* xs, float* out, int n) {
    MatVecArgs a = matvec_args(m.shape, m.w, m.w_bytes, xs, n * x_one, out);
    a.n = n;
    a.y_len = n * rows;
    a.threads = threads_;
    a.prepared = prepared;
    const Status st = invoke(kernel, a);
    if (!st.ok()) throw std::runtime_error(fmt::format("{} ({}): {}", to_string(m.part), kernel.name, st.error));
  };
  if (takes_batch(kernel, batch_)) {
    call(x, y, batch_);
  } else {
    for (int b = 0; b < batch_; ++b) call(x + b * x_one, y + b * rows, 1);  // no batch kernel: once per sequence
  }
  times_.add(m.part, std::chrono::duration<double>(Clock::now() - t0).count());
}

void BatchCpuForward::embed() {
  timed(Op::Embed, [&] {
    const int half = c_.rope_dim / 2;
    for (int b = 0; b < batch_; ++b) {
      const auto* row = static_cast<const std::uint8_t*>(program_.token_embd) +
                        static_cast<std::size_t>(tokens_[b]) * row_bytes(program_.embd_type, c_.n_embd);
      dequantize_row(program_.embd_type, row, program_.x + static_cast<std::size_t>(b) * c_.n_embd, c_.n_embd);
      rope_table(c_, pos_[b], rope_cos_.data() + static_cast<std::size_t>(b) * half,
                 rope_sin_.data() + static_cast<std::size_t>(b) * half);
    }
  });
}

void BatchCpuForward::rms_norm(float* x, const float* residual, const float* weight, float* y, int n) {
  timed(Op::Norm, [&] {
    for (int b = 0; b < batch_; ++b) {
      float* xb = x + static_cast<std::size_t>(b) * n;
      if (residual)
        for (int i = 0; i < n; ++i) xb[i] += residual[static_cast<std::size_t>(b) * n + i];
      qmv::rms_norm(xb, weight, y + static_cast<std::size_t>(b) * n, n, c_.rms_eps);
    }
  });
}

void BatchCpuForward::head_step(const LayerOps& l) {
  timed(Op::QkNormRope, [&] {
    const int hd = c_.head_dim, q_width = c_.n_head * hd, kv_width = c_.n_head_kv * hd;
    for (int s = 0; s < batch_; ++s) {
      float* q = program_.q + static_cast<std::size_t>(s) * q_width;
      float* k = program_.k + static_cast<std::size_t>(s) * kv_width;
      float* v = program_.v + static_cast<std::size_t>(s) * kv_width;
      if (l.bq) {
        for (int i = 0; i < q_width; ++i) q[i] += l.bq[i];
        for (int i = 0; i < kv_width; ++i) k[i] += l.bk[i];
        for (int i = 0; i < kv_width; ++i) v[i] += l.bv[i];
      }
      if (l.q_norm) {
        for (int h = 0; h < c_.n_head; ++h) qmv::rms_norm(&q[h * hd], l.q_norm, &q[h * hd], hd, c_.rms_eps);
        for (int h = 0; h < c_.n_head_kv; ++h) qmv::rms_norm(&k[h * hd], l.k_norm, &k[h * hd], hd, c_.rms_eps);
      }
      const std::size_t table = static_cast<std::size_t>(c_.rope_dim / 2) * s;  // sequence s's RoPE table
      apply_rope(c_, q, c_.n_head, rope_cos_.data() + table, rope_sin_.data() + table);
      apply_rope(c_, k, c_.n_head_kv, rope_cos_.data() + table, rope_sin_.data() + table);
      // Sequence s's cache lies cache_floats_ * s floats past the first one's.
      const std::size_t cache = cache_floats_ * static_cast<std::size_t>(s);
      for (int h = 0; h < c_.n_head_kv; ++h) {
        const std::size_t at = cache + static_cast<std::size_t>(h) * context_ * hd + static_cast<std::size_t>(pos_[s]) * hd;
        std::memcpy(l.k_cache + at, k + h * hd, hd * sizeof(float));
        std::memcpy(l.v_cache + at, v + h * hd, hd * sizeof(float));
      }
    }
  });
}

void BatchCpuForward::attention(const LayerOps& l) {
  timed(Op::Attention, [&] {
    const int hd = c_.head_dim, group = c_.n_head / c_.n_head_kv, heads = c_.n_head;
    const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
#pragma omp parallel for num_threads(threads_) schedule(dynamic)
    for (int item = 0; item < batch_ * heads; ++item) {
      const int s = item / heads, h = item % heads;
      const std::size_t cache = cache_floats_ * static_cast<std::size_t>(s) +
                                static_cast<std::size_t>(h / group) * context_ * hd;
      HeadAttention a;
      a.q = program_.q + static_cast<std::size_t>(s) * heads * hd + static_cast<std::size_t>(h) * hd;
      a.keys = l.k_cache + cache;
      a.values = l.v_cache + cache;
      a.stride = static_cast<std::size_t>(hd);
      a.positions = pos_[s] + 1;
      a.head_dim = hd;
      a.scale = scale;
      a.scores = scores_.data() + static_cast<std::size_t>(item) * context_;
      a.out = program_.att + static_cast<std::size_t>(s) * heads * hd + static_cast<std::size_t>(h) * hd;
      attend_head(a);
    }
  });
}

void BatchCpuForward::swiglu(float* gate, const float* up, int n) {
  timed(Op::Swiglu, [&] {
    for (int b = 0; b < batch_; ++b)
      qmv::swiglu(gate + static_cast<std::size_t>(b) * n, up + static_cast<std::size_t>(b) * n, n, avx2_exp_);
  });
}

std::span<const float> BatchCpuForward::step(std::span<const int> tokens) {
  if (static_cast<int>(tokens.size()) != batch_)
    throw std::invalid_argument(fmt::format("a batch step takes {} tokens, one per sequence, not {}", batch_,
                                            tokens.size()));
  for (int b = 0; b < batch_; ++b) {
    const int token = tokens[static_cast<std::size_t>(b)];
    if (token < 0 || token >= c_.vocab_size)
      throw std::out_of_range(
          fmt::format("token id {} is outside the vocabulary (0..{})", token, c_.vocab_size - 1));
    if (pos_[b] >= context_)
      throw ContextFull(fmt::format("context full: sequence {} at position {} needs a context longer than {} tokens",
                                    b, pos_[b], context_));
    tokens_[b] = token;
  }
  decode_step(*this, program_);
  for (int& p : pos_) ++p;
  return logits_;
}

}  // namespace qmv
