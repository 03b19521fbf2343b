#include "harness/accuracy.h"

#include <fmt/format.h>

#include <Eigen/Dense>
#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <limits>
#include <map>
#include <set>

#include "harness/check.h"
#include "harness/data.h"
#include "harness/execute.h"
#include "harness/machine.h"
#include "harness/reference.h"
#include "kernels/activation_quantizers.h"
#include "kernels/availability.h"
#include "model/plan.h"

namespace qmv {

std::string to_string(OutlierCase c) {
  return c.gaussian() ? "gaussian" : fmt::format("{}ch@{:g}x", c.channels, c.multiplier);
}

std::vector<OutlierCase> AccuracyConfig::cases() const {
  std::vector<OutlierCase> out{{0, 0}};
  for (int c : channels)
    for (float m : multipliers) out.push_back({c, m});
  return out;
}

double median_of(std::vector<double> v) {
  if (v.empty()) return std::numeric_limits<double>::quiet_NaN();
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// One call of `spec` on host buffers: W (and W2 for a fused kernel) times x in the
// kernel's activation format (x_in_format).
Status call_kernel(const KernelSpec& spec, Shape s, const std::vector<std::uint8_t>& w,
                   const std::vector<std::uint8_t>* w2, const std::vector<std::uint8_t>& x_in_format, int threads,
                   std::vector<float>& y, std::vector<float>& y2) {
  y.assign(static_cast<std::size_t>(s.rows), 0.0f);
  poison(y);
  HostCall call;
  call.shape = s;
  call.w = w.data();
  call.w_bytes = w.size();
  call.x = x_in_format.data();
  call.x_bytes = x_in_format.size();
  call.y = y.data();
  if (spec.op == OpKind::FusedUpGate) {
    y2.assign(static_cast<std::size_t>(s.rows), 0.0f);
    poison(y2);
    call.w2 = w2->data();
    call.w2_bytes = w2->size();
    call.y2 = y2.data();
  }
  call.threads = threads;
  return run_on_host_buffers(spec, call);
}

// Per kernel: [case][trial] the NMSE against each matrix's reference (the second is
// measured for fused kernels and for plain kernels standing in for a fused one).
using TrialErrors = std::vector<std::vector<std::array<double, 2>>>;

}  // namespace

AccuracyOutcome run_accuracy(const std::vector<const KernelSpec*>& kernels, const std::vector<Shape>& shapes,
                             const AccuracyConfig& cfg,
                             const std::function<void(const std::vector<AccuracyResult>&)>& on_results,
                             const std::function<void(const AccuracySkip&)>& on_skip,
                             const std::function<void(const std::string&)>& on_progress) {
  AccuracyOutcome out;
  const std::vector<OutlierCase> cases = cfg.cases();
  const int ncases = static_cast<int>(cases.size());
  auto skip = [&](const KernelSpec* k, Shape s, std::string reason) {
    AccuracySkip sk{k, s, std::move(reason)};
    if (on_skip) on_skip(sk);
    out.skipped.push_back(std::move(sk));
  };
  for (WeightType type : kAllWeightTypes) {
    for (Shape shape : shapes) {
      std::vector<const KernelSpec*> selected;
      for (const KernelSpec* k : kernels) {
        if (k->weight != type) continue;
        const Availability av = availability(*k);
        if (!av.available) skip(k, shape, "unavailable: " + av.reason);
        else if (!k->supports(shape)) skip(k, shape, "shape not supported (needs " + k->shape_rule + ")");
        else selected.push_back(k);
      }
      if (selected.empty()) continue;

      // The kernels to run: the selected ones and the int8 kernels' f32 siblings.
      std::map<const KernelSpec*, const KernelSpec*> sibling_of;
      std::map<const KernelSpec*, std::string> note;
      std::vector<const KernelSpec*> to_run = selected;
      std::set<const KernelSpec*> second_matrix;  // kernels measured on both matrices
      for (const KernelSpec* k : selected) {
        if (k->op == OpKind::FusedUpGate) second_matrix.insert(k);
        if (k->act == ActFormat::F32) continue;
        try {
          std::string why;
          const KernelSpec* sib = outlier_sibling(KernelPlan{}, "matvec", *k, shape, cfg.threads, {}, why);
          sibling_of[k] = sib;
          if (std::find(to_run.begin(), to_run.end(), sib) == to_run.end()) to_run.push_back(sib);
          if (k->op == OpKind::FusedUpGate) second_matrix.insert(sib);
        } catch (const PlanError& e) {
          note[k] = e.what();
        }
      }
      const bool two_matrices = !second_matrix.empty();

      std::map<const KernelSpec*, TrialErrors> errors;
      std::map<const KernelSpec*, std::string> failed;
      for (const KernelSpec* k : to_run)
        errors[k].assign(static_cast<std::size_t>(ncases), std::vector<std::array<double, 2>>(cfg.trials));
      std::vector<std::vector<double>> peak(ncases, std::vector<double>(cfg.trials));
      std::vector<std::vector<bool>> tripped(ncases, std::vector<bool>(cfg.trials));

      for (int t = 0; t < cfg.trials; ++t) {
        const auto t0 = Clock::now();
        // Seeds from the run seed, the problem and the trial: every problem differs.
        const std::uint64_t base = (cfg.seed ^ (std::uint64_t(shape.rows) << 40) ^ (std::uint64_t(shape.cols) << 8) ^
                                    std::uint64_t(type)) +
                                   0x9E3779B97F4A7C15ull * std::uint64_t(t + 1);
        std::vector<std::vector<std::uint8_t>> w;
        for (int m = 0; m < (two_matrices ? 2 : 1); ++m)
          w.push_back(random_quantized_matrix(type, shape, base + 7919u * (m + 1)));
        std::vector<std::vector<float>> xs;
        Eigen::MatrixXd x_cols(shape.cols, ncases);
        for (int c = 0; c < ncases; ++c) {
          xs.push_back(activation_with_exact_outliers(shape.cols, base + 1, cases[c].channels, cases[c].multiplier));
          for (std::int64_t j = 0; j < shape.cols; ++j) x_cols(j, c) = xs[c][static_cast<std::size_t>(j)];
          peak[c][t] = peak_to_rms(xs[c].data(), shape.cols);
          tripped[c][t] = has_massive_activation(xs[c].data(), shape.cols, cfg.k);
        }
        std::vector<std::pair<Eigen::MatrixXd, Eigen::MatrixXd>> ref;
        for (const auto& wm : w) ref.push_back(reference_products(type, shape, wm, x_cols));

        std::vector<std::uint8_t> x_in_format;
        std::vector<float> y, y2;
        for (const KernelSpec* k : to_run) {
          if (failed.count(k)) continue;
          x_in_format.resize(row_bytes(k->act, shape.cols));
          for (int c = 0; c < ncases && !failed.count(k); ++c) {
            quantize_activation(k->act, xs[c].data(), x_in_format.data(), shape.cols);
            auto error_of = [&](const std::vector<float>& out, int m) {
              return compare(out.data(), ref[m].first.col(c).data(), shape.rows, ref[m].second.col(c).data(),
                             shape.cols)
                  .nmse;
            };
            std::array<double, 2>& e = errors[k][c][t];
            e = {0, 0};
            Status st = call_kernel(*k, shape, w[0], two_matrices ? &w[1] : nullptr, x_in_format, cfg.threads, y, y2);
            if (st.ok()) {
              e[0] = error_of(y, 0);
              if (k->op == OpKind::FusedUpGate) {
                e[1] = error_of(y2, 1);
              } else if (second_matrix.count(k)) {
                st = call_kernel(*k, shape, w[1], nullptr, x_in_format, cfg.threads, y, y2);
                if (st.ok()) e[1] = error_of(y, 1);
              }
            }
            if (!st.ok()) failed[k] = "kernel returned an error: " + st.error;
          }
        }
        if (on_progress)
          on_progress(fmt::format("{} {}: trial {}/{} done, {} kernel(s) x {} case(s), {:.1f} s", to_string(type),
                                  to_string(shape), t + 1, cfg.trials, to_run.size(), ncases, seconds_since(t0)));
      }

      for (const KernelSpec* k : selected) {
        if (failed.count(k)) {
          skip(k, shape, failed[k]);
          continue;
        }
        const bool fused = k->op == OpKind::FusedUpGate;
        const KernelSpec* sib = sibling_of.count(k) && !failed.count(sibling_of[k]) ? sibling_of[k] : nullptr;
        std::vector<AccuracyResult> rows;
        for (int c = 0; c < ncases; ++c) {
          AccuracyResult r;
          r.spec = k;
          r.shape = shape;
          r.outlier_case = cases[c];
          r.peak_to_rms = peak[c];
          r.tripped = tripped[c];
          r.sibling = sib;
          if (note.count(k)) r.note = note[k];
          if (sibling_of.count(k) && !sib) r.note = failed[sibling_of[k]];
          for (int t = 0; t < cfg.trials; ++t) {
            const auto& own = errors[k][c][t];
            const double nmse = fused ? std::max(own[0], own[1]) : own[0];
            r.nmse.push_back(nmse);
            if (sib) {
              const auto& other = errors[sib][c][t];
              r.routed_nmse.push_back(tripped[c][t] ? (fused ? std::max(other[0], other[1]) : other[0]) : nmse);
            }
          }
          rows.push_back(std::move(r));
        }
        if (on_results) on_results(rows);
        out.results.insert(out.results.end(), rows.begin(), rows.end());
      }
    }
  }
  return out;
}

std::vector<RoutingCost> measure_routing_cost(const std::vector<const KernelSpec*>& int8_kernels,
                                              const std::vector<Shape>& shapes, const CostConfig& cfg,
                                              const std::function<void(const RoutingCost&)>& on_row) {
  std::vector<RoutingCost> rows;
  for (Shape shape : shapes) {
    for (const KernelSpec* k : int8_kernels) {
      if (k->act == ActFormat::F32 || !k->supports(shape) || !availability(*k).available) continue;
      std::string why;
      const KernelSpec* sib = outlier_sibling(KernelPlan{}, "matvec", *k, shape, cfg.threads, {}, why);
      // Cold weights, as decode meets them: rotate copies well past the last-level
      // cache (their values do not matter for timing, so rows repeat).
      const std::vector<std::uint8_t> one = random_quantized_matrix(k->weight, shape, cfg.seed, 64);
      const std::size_t llc = std::max<std::size_t>(machine_info().llc_bytes, 8u << 20);
      const std::size_t copies =
          std::clamp<std::size_t>((4 * llc + one.size() - 1) / one.size(), 2, std::max<std::size_t>(2, (1u << 30) / one.size()));
      const int per_call = k->op == OpKind::FusedUpGate ? 2 : 1;
      std::vector<std::vector<std::uint8_t>> w(copies * per_call, one);
      const std::vector<float> x = gaussian_vector(shape.cols, cfg.seed + 1);
      std::vector<std::uint8_t> q(row_bytes(k->act, shape.cols)), xf(row_bytes(ActFormat::F32, shape.cols));
      quantize_activation(k->act, x.data(), q.data(), shape.cols);
      quantize_activation(ActFormat::F32, x.data(), xf.data(), shape.cols);
      std::vector<float> y, y2;
      auto run = [&](const KernelSpec& spec, const std::vector<std::uint8_t>& x_in_format, std::size_t copy) {
        const auto* w2 = per_call == 2 ? &w[copy * 2 + 1] : nullptr;
        if (spec.op == OpKind::MatVec && per_call == 2) {
          // A fused kernel's plain sibling: once per matrix.
          for (int m = 0; m < 2; ++m) {
            const Status st = call_kernel(spec, shape, w[copy * 2 + m], nullptr, x_in_format, cfg.threads, y, y2);
            if (!st.ok()) throw std::runtime_error(spec.name + ": " + st.error);
          }
          return;
        }
        const Status st = call_kernel(spec, shape, w[copy * per_call], w2, x_in_format, cfg.threads, y, y2);
        if (!st.ok()) throw std::runtime_error(spec.name + ": " + st.error);
      };
      // The test and the quantization take microseconds: time batches, per call.
      const int batch = static_cast<int>(std::clamp<std::int64_t>((1 << 20) / shape.cols, 16, 1024));
      std::vector<double> test_us, quant_us, kernel_us, sibling_us;
      volatile bool sink = false;
      run(*k, q, 0);
      run(*sib, xf, 1);
      for (int rep = 0; rep < cfg.repetitions; ++rep) {
        auto t0 = Clock::now();
        for (int i = 0; i < batch; ++i) sink = has_massive_activation(x.data(), shape.cols, cfg.k);
        test_us.push_back(1e6 * seconds_since(t0) / batch);
        t0 = Clock::now();
        for (int i = 0; i < batch; ++i) quantize_activation(k->act, x.data(), q.data(), shape.cols);
        quant_us.push_back(1e6 * seconds_since(t0) / batch);
        t0 = Clock::now();
        run(*k, q, (2 * rep) % copies);
        kernel_us.push_back(1e6 * seconds_since(t0));
        t0 = Clock::now();
        run(*sib, xf, (2 * rep + 1) % copies);
        sibling_us.push_back(1e6 * seconds_since(t0));
      }
      (void)sink;
      RoutingCost r{k, sib, shape, cfg.repetitions, median_of(test_us), median_of(quant_us), median_of(kernel_us),
                    median_of(sibling_us)};
      if (on_row) on_row(r);
      rows.push_back(r);
    }
  }
  return rows;
}

FalsePositives count_false_positives(std::int64_t n, std::int64_t vectors, double k, std::uint64_t seed) {
  std::int64_t tripped = 0;
  double max_ratio = 0;
#pragma omp parallel for schedule(dynamic, 16) reduction(+ : tripped) reduction(max : max_ratio)
  for (std::int64_t v = 0; v < vectors; ++v) {
    const std::vector<float> x = gaussian_vector(n, seed + 0x9E3779B97F4A7C15ull * std::uint64_t(v + 1));
    if (has_massive_activation(x.data(), n, k)) ++tripped;
    max_ratio = std::max(max_ratio, peak_to_rms(x.data(), n));
  }
  return {n, vectors, tripped, max_ratio};
}

}  // namespace qmv
