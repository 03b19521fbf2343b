#include "model/forward.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/cpu_features.h"
#include "kernels/cpu_tiling.h"
#include "kernels/outliers.h"
#include "model/attention.h"
#include "model/vector_ops.h"

namespace qmv {

double StepTimes::total() const {
  double s = 0;
  for (double x : seconds) s += x;
  return s;
}

namespace {

using Clock = std::chrono::steady_clock;

}  // namespace

CpuForward::CpuForward(const ModelConfig& config, const ModelWeights& weights,
                       const std::vector<PlannedMatvec>& plan, int threads, int context)
    : CpuForward(config, weights, plan, threads, context, nullptr, WeightResidence::InPlace) {}

CpuForward::CpuForward(const LoadedModel& model, const std::vector<PlannedMatvec>& plan, int threads, int context,
                       WeightResidence residence)
    : CpuForward(model.config, model.weights, plan, threads, context, &model.file, residence) {}

CpuForward::CpuForward(const ModelConfig& config, const ModelWeights& weights,
                       const std::vector<PlannedMatvec>& plan, int threads, int context, const gguf::File* file,
                       WeightResidence residence)
    : c_(config),
      threads_(std::max(1, threads)),
      avx2_exp_(missing_cpu_features(static_cast<std::uint32_t>(CpuFeature::AVX2)) == 0),
      avx2_attention_(missing_cpu_features(static_cast<std::uint32_t>(CpuFeature::AVX2) |
                                           static_cast<std::uint32_t>(CpuFeature::FMA)) == 0 &&
                      config.head_dim % 8 == 0) {
  context_ = context > 0 ? std::min(context, c_.context_length) : c_.context_length;
  bound_ = bind_plan(c_, weights, plan, Backend::CPU);
  const int q_width = c_.n_head * c_.head_dim, kv_width = c_.n_head_kv * c_.head_dim;
  kv_cache_.resize(qmv::kv_cache_bytes(c_, context_) / sizeof(float));
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
  partial_out_.resize(static_cast<std::size_t>(kMaxAttentionRanges) * c_.n_head * c_.head_dim);
  partial_max_.resize(static_cast<std::size_t>(kMaxAttentionRanges) * c_.n_head);
  partial_sum_.resize(partial_max_.size());
  rope_cos_.resize(c_.rope_dim / 2);
  rope_sin_.resize(c_.rope_dim / 2);
  place_weights(file, residence);
  trials_ = KernelTrials(plan, program_);
}

void CpuForward::place_weights(const gguf::File* file, WeightResidence residence) {
  const auto t0 = Clock::now();
  // The copies live as long as the forward: back to back, no huge page left part empty.
  const PackedWeightMemory packed;
  residency_.residence = residence;
  // Who reads each matrix: one that some reader (a kernel without a weight transform,
  // a plain sibling of a fused op, the embedding lookup) takes in its own layout must
  // be held in it; the others only ever in their kernels' layouts.
  std::set<const gguf::Tensor*> matrices, read_plain{bound_.token_embd};
  auto readers = [&](const BoundMatvec& b) {
    if (!b.kernel) return;
    for (const KernelSpec* k : {b.kernel, b.outlier_kernel})
      if (k)
        for (const gguf::Tensor* t : {b.w, b.w2})
          if (t) {
            matrices.insert(t);
            if (!k->prepare) read_plain.insert(t);
          }
  };
  for (const BoundLayer& l : bound_.layers)
    for (const Op op : kLayerMatvecOps) readers(matvec_slot(l, op));
  readers(bound_.lm_head);

  std::set<const gguf::Tensor*> repacked_only;
  std::vector<const gguf::Tensor*> plain;
  for (const gguf::Tensor* t : bound_.tensors) {
    ++residency_.tensors;
    residency_.weight_bytes += t->bytes;
    if (matrices.count(t) && !read_plain.count(t)) {
      repacked_only.insert(t);
      ++residency_.repacked_only;
      residency_.repacked_only_file_bytes += t->bytes;
    } else if (residence == WeightResidence::Resident) {
      plain.push_back(t);
    } else {
      in_place_.push_back(t);
      residency_.in_place_bytes += t->bytes;
    }
  }

  // Resident: the tensors read in their own layout copied into one buffer of weight
  // memory, largest first, each one's file pages given back as soon as it is copied,
  // so the process holds the file's pages of one tensor at a time beside the copies.
  std::map<const gguf::Tensor*, const void*> copy_of;
  if (!plain.empty()) {
    std::stable_sort(plain.begin(), plain.end(),
                     [](const gguf::Tensor* a, const gguf::Tensor* b) { return a->bytes > b->bytes; });
    constexpr std::uint64_t kAlign = 64;
    std::uint64_t total = 0;
    for (const gguf::Tensor* t : plain) total += (t->bytes + kAlign - 1) / kAlign * kAlign;
    plain_copies_ = WeightMemory(total);
    auto* at = static_cast<std::uint8_t*>(plain_copies_.data());
    for (const gguf::Tensor* t : plain) {
      std::memcpy(at, t->data, t->bytes);
      if (file) file->release_pages(t->data, t->bytes);
      copy_of[t] = at;
      ++residency_.plain_tensors;
      residency_.plain_bytes += t->bytes;
      at += (t->bytes + kAlign - 1) / kAlign * kAlign;
    }
  }

  // A repacked-only matrix keeps its file address in the program: MatVecArgs::w stays
  // a valid view of its plain blocks (its kernels read only the prepared copy, and a
  // read would fault the file's pages in again), and keys its prepared copy.
  program_ = make_step_program(
      c_, bound_, context_,
      [&](const gguf::Tensor* t) -> const void* {
        const auto it = copy_of.find(t);
        const void* at = it != copy_of.end() ? it->second : t->data;
        tensor_at_[at] = t;
        return at;
      },
      kv_cache_.data());
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
  prepare_all_weights(file, repacked_only);
  count_part_bytes();
  // A read that faults one page of the file in maps its neighbours too where the page
  // cache holds them (the kernel's fault-around, up to 64 KiB): pages given back above
  // come again with the next tensor's first read. Once every copy is made, each tensor
  // the step does not read in place gives its pages back for good.
  if (file)
    for (const gguf::Tensor* t : bound_.tensors)
      if (residence == WeightResidence::Resident || repacked_only.count(t))
        residency_.released_bytes += file->release_pages(t->data, t->bytes);

  residency_.repacked_bytes = repack_.bytes;
  residency_.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  if (residence == WeightResidence::Resident) residency_.huge_page_share = weight_memory_huge_page_share();
}

void CpuForward::prepare_all_weights(const gguf::File* file, const std::set<const gguf::Tensor*>& repacked_only) {
  const auto t0 = Clock::now();
  struct Job {
    const KernelSpec* kernel;
    Shape shape;
    const void *w, *w2;
    std::size_t w_bytes, w2_bytes;
  };
  std::vector<Job> jobs;
  auto prepare_op = [&](const MatvecOp& m) {
    for (const KernelSpec* k : {m.kernel, m.outlier_kernel})
      if (k && k->prepare && m.w)
        for_each_invocation(*k, m, nullptr, nullptr,
                            [&](const void* w, std::size_t w_bytes, const void* w2, std::size_t w2_bytes, auto&&...) {
                              jobs.push_back({k, m.shape, w, w2, w_bytes, w2_bytes});
                            });
  };
  for (const LayerOps& l : program_.layers)
    for (const Op op : kLayerMatvecOps) prepare_op(matvec_slot(l, op));
  prepare_op(program_.lm_head);
  // Largest first: while a matrix is repacked the process holds its file pages beside
  // the copies made so far, and the later, smaller ones add least to that peak.
  std::stable_sort(jobs.begin(), jobs.end(), [](const Job& a, const Job& b) {
    return a.w_bytes + a.w2_bytes > b.w_bytes + b.w2_bytes;
  });
  for (const Job& j : jobs) {
    prepared_weights_.get(*j.kernel, j.shape, j.w, j.w_bytes, j.w2, j.w2_bytes);
    if (!file) continue;
    for (const void* w : {j.w, j.w2}) {
      const auto it = w ? tensor_at_.find(w) : tensor_at_.end();
      if (it != tensor_at_.end() && repacked_only.count(it->second))
        file->release_pages(it->second->data, it->second->bytes);
    }
  }
  repack_.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  repack_.matrices = prepared_weights_.matrices();
  repack_.bytes = prepared_weights_.bytes();
}

std::uint64_t CpuForward::page_in() const {
  std::uint64_t bytes = 0;
  volatile std::uint8_t sink = 0;
  for (const gguf::Tensor* t : in_place_) {
    for (std::uint64_t i = 0; i < t->bytes; i += 4096) sink = sink + t->data[i];
    bytes += t->bytes;
  }
  return bytes;
}

std::uint64_t CpuForward::bytes_per_token(int pos) const {
  const std::uint64_t kv_width = static_cast<std::uint64_t>(c_.n_head_kv) * c_.head_dim;
  return bound_.weight_bytes + 2ull * c_.n_layers * static_cast<std::uint64_t>(pos + 1) * kv_width * sizeof(float);
}

void CpuForward::set_activation(const float* x, std::int64_t n) {
  run_pending_calls();
  current_.x = x;
  current_.n = n;
  current_.ready = {};
  current_.outlier_tested = false;
}

bool CpuForward::has_outliers(double k) {
  if (!current_.outlier_tested || current_.outlier_k != k) {
    const auto t0 = Clock::now();
    current_.outlier = has_massive_activation(current_.x, current_.n, k);
    current_.outlier_tested = true;
    current_.outlier_k = k;
    times_.add(Op::OutlierTest, std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return current_.outlier;
}

const void* CpuForward::activation(ActFormat f, std::size_t& bytes) {
  bytes = row_bytes(f, current_.n);
  if (f == ActFormat::F32) return current_.x;
  const int i = static_cast<int>(f);
  auto& buf = current_.quantized[i];
  if (!current_.ready[i]) {
    const auto t0 = Clock::now();
    buf.resize(bytes);
    quantize_to_shared(f, current_.x, current_.n, buf.data(), staging_);
    current_.ready[i] = true;
    times_.add(Op::ActQuant, std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return buf.data();
}

void CpuForward::matvec(const MatvecOp& m, float* y, float* y2) {
  const int part = static_cast<int>(m.part);
  const KernelSpec* kernel = m.kernel;
  ++times_.matvecs[part];
  if (m.outlier_kernel) {
    ++times_.routable[part];
    if (has_outliers(m.outlier_k)) {
      ++times_.routed[part];
      kernel = m.outlier_kernel;
    }
  }
  std::size_t x_bytes = 0;
  activation(kernel->act, x_bytes);  // quantized (and timed) on its own, before the matvec's clock
  if (kernel->prepare)
    for_each_invocation(*kernel, m, y, y2,
                        [&](const void* w, std::size_t w_bytes, const void* w2, std::size_t w2_bytes, auto&&...) {
                          prepared_weights_.get(*kernel, m.shape, w, w_bytes, w2, w2_bytes);
                        });
  for_each_invocation(*kernel, m, y, y2,
                      [&](const void* w, std::size_t w_bytes, const void* w2, std::size_t w2_bytes, float* out,
                          float* out2) {
                        std::size_t x_bytes = 0;
                        const void* x = activation(kernel->act, x_bytes);
                        MatVecArgs a = matvec_args(m.shape, w, w_bytes, x, x_bytes, out, w2, w2_bytes, out2);
                        a.threads = threads_;
                        if (kernel->prepare) a.prepared = prepared_weights_.get(*kernel, m.shape, w, w_bytes, w2, w2_bytes);
                        pending_.push_back({kernel, m.outlier_kernel ? m.outlier_kernel : m.kernel, a, m.part});
                      });
}

namespace {

bool shares_rows_in_a_team(const KernelSpec* k) { return !k || k->joins_call_teams; }

}  // namespace

bool CpuForward::runs_as_group(std::size_t calls, bool all_join_call_teams) const {
  return call_groups_ && threads_ > 1 && calls > 1 && all_join_call_teams;
}

void CpuForward::set_call_groups(bool on) {
  call_groups_ = on;
  count_part_bytes();
}

void CpuForward::count_part_bytes() {
  part_bytes_ = bound_.part_bytes;
  for (const BoundLayer& l : bound_.layers) {
    // The groups decode_step makes: q, k and v read one vector, and so do gate and up
    // where they are two matvecs (fused, gate and up have no kernel of their own).
    using Group = std::vector<const BoundMatvec*>;
    for (const Group& group : {Group{&l.q, &l.k, &l.v}, Group{&l.gate, &l.up}}) {
      Group run;
      bool all_join = true;
      for (const BoundMatvec* b : group)
        if (b->kernel) {
          run.push_back(b);
          all_join = all_join && shares_rows_in_a_team(b->kernel) && shares_rows_in_a_team(b->outlier_kernel);
        }
      if (!runs_as_group(run.size(), all_join)) continue;
      for (const BoundMatvec* b : run) {
        const std::uint64_t bytes = b->w->bytes + (b->w2 ? b->w2->bytes : 0);
        part_bytes_[static_cast<int>(b->part)] -= bytes;
        part_bytes_[static_cast<int>(call_group_op(b->part))] += bytes;
      }
    }
  }
}

void CpuForward::run_pending_calls() {
  if (pending_.empty()) return;
  // The calls move to running_ and pending_ takes its buffer: a step allocates nothing.
  running_.clear();
  running_.swap(pending_);
  const std::vector<PendingCall>& calls = running_;
  auto fail = [](const PendingCall& c, const Status& st) {
    throw std::runtime_error(fmt::format("{} ({}): {}", to_string(c.part), c.kernel->name, st.error));
  };
  const bool all_join = std::all_of(calls.begin(), calls.end(), [](const PendingCall& c) {
    return shares_rows_in_a_team(c.kernel) && shares_rows_in_a_team(c.sibling);
  });
  if (!runs_as_group(calls.size(), all_join)) {
    for (const PendingCall& c : calls) {
      const auto t0 = Clock::now();
      if (const Status st = invoke(*c.kernel, c.args); !st.ok()) fail(c, st);
      const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
      times_.add(c.part, seconds);
      log_call(c.part, seconds);
    }
    return;
  }
  for (const PendingCall& c : calls)
    if (const Status st = check_args(*c.kernel, c.args); !st.ok()) fail(c, st);
  // What check_args passes, a kernel refuses on its own grounds alike on every thread:
  // the main thread's first refusal is reported once the team is done.
  std::size_t refused_at = calls.size();
  Status refusal;
  const auto t0 = Clock::now();
#pragma omp parallel num_threads(threads_)
  {
    set_in_call_team(true);
    for (std::size_t i = 0; i < calls.size(); ++i)
      if (Status st = calls[i].kernel->run(calls[i].args);
          !st.ok() && omp_get_thread_num() == 0 && refused_at == calls.size()) {
        refused_at = i;
        refusal = std::move(st);
      }
    set_in_call_team(false);
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  times_.add(call_group_op(calls.front().part), seconds);
  for (const PendingCall& c : calls) log_call(c.part, seconds);
  if (refused_at < calls.size()) fail(calls[refused_at], refusal);
}

const void* PreparedWeightCache::get(const KernelSpec& kernel, Shape shape, const void* w, std::size_t w_bytes,
                                     const void* w2, std::size_t w2_bytes) {
  auto [it, made] = copies_.try_emplace({kernel.prepare, w});
  if (made) {
    it->second.matrices = kernel.op == OpKind::FusedUpGate ? 2 : 1;
    const Status st =
        it->second.weights.prepare(kernel, matvec_args(shape, w, w_bytes, nullptr, 0, nullptr, w2, w2_bytes));
    if (!st.ok()) {
      copies_.erase(it);
      throw std::runtime_error(fmt::format("{}: preparing its weights: {}", kernel.name, st.error));
    }
  }
  return it->second.weights.handle();
}

int PreparedWeightCache::matrices() const {
  int n = 0;
  for (const auto& [key, copy] : copies_) n += copy.matrices;
  return n;
}

std::uint64_t PreparedWeightCache::bytes() const {
  std::uint64_t n = 0;
  for (const auto& [key, copy] : copies_) n += copy.weights.bytes();
  return n;
}

template <class Fn>
void CpuForward::timed(Op op, Fn&& fn) {
  const auto t0 = Clock::now();
  fn();
  times_.add(op, std::chrono::duration<double>(Clock::now() - t0).count());
}

void CpuForward::embed() {
  run_pending_calls();
  timed(Op::Embed, [&] {
    const auto* row = static_cast<const std::uint8_t*>(program_.token_embd) +
                      static_cast<std::size_t>(token_) * row_bytes(program_.embd_type, c_.n_embd);
    dequantize_row(program_.embd_type, row, program_.x, c_.n_embd);
    rope_table(c_, pos_, program_.rope_cos, program_.rope_sin);
  });
}

void CpuForward::rms_norm(float* x, const float* residual, const float* weight, float* y, int n) {
  run_pending_calls();
  timed(Op::Norm, [&] {
    if (residual)
      for (int i = 0; i < n; ++i) x[i] += residual[i];
    qmv::rms_norm(x, weight, y, n, c_.rms_eps);
  });
}

void CpuForward::head_step(const LayerOps& l) {
  run_pending_calls();
  timed(Op::QkNormRope, [&] {
    const int hd = c_.head_dim, q_width = c_.n_head * hd, kv_width = c_.n_head_kv * hd;
    float *q = program_.q, *k = program_.k, *v = program_.v;
    if (l.bq) {
      for (int i = 0; i < q_width; ++i) q[i] += l.bq[i];
      for (int i = 0; i < kv_width; ++i) k[i] += l.bk[i];
      for (int i = 0; i < kv_width; ++i) v[i] += l.bv[i];
    }
    if (l.q_norm) {
      for (int h = 0; h < c_.n_head; ++h) qmv::rms_norm(&q[h * hd], l.q_norm, &q[h * hd], hd, c_.rms_eps);
      for (int h = 0; h < c_.n_head_kv; ++h) qmv::rms_norm(&k[h * hd], l.k_norm, &k[h * hd], hd, c_.rms_eps);
    }
    apply_rope(c_, q, c_.n_head, rope_cos_.data(), rope_sin_.data());
    apply_rope(c_, k, c_.n_head_kv, rope_cos_.data(), rope_sin_.data());
    for (int h = 0; h < c_.n_head_kv; ++h) {
      const std::size_t at = head_cache_offset(h) + static_cast<std::size_t>(pos_) * hd;
      std::memcpy(l.k_cache + at, k + h * hd, hd * sizeof(float));
      std::memcpy(l.v_cache + at, v + h * hd, hd * sizeof(float));
    }
  });
}

void CpuForward::attention(const LayerOps& l) {
  run_pending_calls();
  timed(Op::Attention, [&] {
    const int hd = c_.head_dim, group = c_.n_head / c_.n_head_kv;
    const int n_pos = pos_ + 1;
    const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
    // The team is already awake from the matvecs, so splitting pays off from a few
    // thousand multiply-adds per step (a few positions of a small model).
    const bool parallel = threads_ > 1 && static_cast<std::int64_t>(n_pos) * c_.n_head * hd >= (1 << 12);
    if (!avx2_attention_) {
#pragma omp parallel for num_threads(threads_) schedule(static) if (parallel)
      for (int h = 0; h < c_.n_head; ++h) {
        HeadAttention a;
        a.q = program_.q + h * hd;
        a.keys = l.k_cache + head_cache_offset(h / group);
        a.values = l.v_cache + head_cache_offset(h / group);
        a.stride = static_cast<std::size_t>(hd);
        a.positions = n_pos;
        a.head_dim = hd;
        a.scale = scale;
        a.scores = scores_.data() + static_cast<std::size_t>(h) * context_;
        a.out = program_.att + h * hd;
        attend_head(a);
      }
      return;
    }
    // Work items: blocks of up to kGroupHeads query heads on one KV head, times ranges
    // of positions, enough ranges that every thread has about two items.
    const int blocks_per_kv = (group + kGroupHeads - 1) / kGroupHeads, blocks = c_.n_head_kv * blocks_per_kv;
    int ranges = 1;
    if (parallel)
      ranges = std::clamp((2 * threads_ + blocks - 1) / blocks, 1,
                          std::clamp(n_pos / kMinAttentionRange, 1, kMaxAttentionRanges));
    const std::size_t out_stride = static_cast<std::size_t>(c_.n_head) * hd;
#pragma omp parallel for num_threads(threads_) schedule(static) if (parallel)
    for (int item = 0; item < blocks * ranges; ++item) {
      const int block = item / ranges, range = item % ranges, kv_head = block / blocks_per_kv;
      const int first_head = kv_head * group + (block % blocks_per_kv) * kGroupHeads;
      GroupAttention a;
      a.q = program_.q + first_head * hd;
      a.heads = std::min(kGroupHeads, (kv_head + 1) * group - first_head);
      a.keys = l.k_cache + head_cache_offset(kv_head);
      a.values = l.v_cache + head_cache_offset(kv_head);
      a.stride = static_cast<std::size_t>(hd);
      a.first = static_cast<int>(static_cast<std::int64_t>(n_pos) * range / ranges);
      a.end = static_cast<int>(static_cast<std::int64_t>(n_pos) * (range + 1) / ranges);
      a.head_dim = hd;
      a.scale = scale;
      a.scores = scores_.data() + static_cast<std::size_t>(first_head) * context_;
      a.scores_stride = static_cast<std::size_t>(context_);
      const std::size_t stat = static_cast<std::size_t>(range) * c_.n_head + first_head;
      a.out = partial_out_.data() + range * out_stride + static_cast<std::size_t>(first_head) * hd;
      a.max = partial_max_.data() + stat;
      a.sum = partial_sum_.data() + stat;
      attend_group_avx2(a);
      // An item over every position holds its heads' whole sums: the thread that made
      // them normalizes them, rather than the main thread all heads after the team.
      if (ranges == 1)
        for (int h = first_head; h < first_head + a.heads; ++h)
          merge_partials(partial_out_.data() + static_cast<std::size_t>(h) * hd, out_stride, partial_max_.data() + h,
                         partial_sum_.data() + h, c_.n_head, 1, hd, program_.att + h * hd);
    }
    if (ranges > 1)
      for (int h = 0; h < c_.n_head; ++h)
        merge_partials(partial_out_.data() + static_cast<std::size_t>(h) * hd, out_stride, partial_max_.data() + h,
                       partial_sum_.data() + h, c_.n_head, ranges, hd, program_.att + h * hd);
  });
}

void CpuForward::swiglu(float* gate, const float* up, int n) {
  run_pending_calls();
  timed(Op::Swiglu, [&] {
    qmv::swiglu(gate, up, n, avx2_exp_);
  });
}

std::span<const float> CpuForward::step(int token) {
  if (token < 0 || token >= c_.vocab_size)
    throw std::out_of_range(fmt::format("token id {} is outside the vocabulary (0..{})", token, c_.vocab_size - 1));
  if (pos_ >= context_)
    throw ContextFull(fmt::format("context full: position {} needs a context longer than {} tokens", pos_, context_));
  token_ = token;
  logging_calls_ = trials_on_ && trials_.running();
  if (logging_calls_) {
    for (auto& calls : call_seconds_) calls.clear();
    trials_.before_step(program_);
  }
  decode_step(*this, program_);
  run_pending_calls();  // lm_head's
  if (logging_calls_) trials_.after_step(program_, call_seconds_);
  logging_calls_ = false;
  ++pos_;
  return logits_;
}

}  // namespace qmv
