#include "harness/check.h"

#include <fmt/format.h>

#include <Eigen/Dense>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>

#include "harness/data.h"
#include "harness/execute.h"
#include "harness/machine.h"
#include "harness/reference.h"
#include "kernels/activation_quantizers.h"
#include "kernels/availability.h"

namespace qmv {

ErrorStats compare(const float* y, const double* r, std::int64_t n, const double* abs_products,
                   std::int64_t cols) {
  double err_sq = 0, ref_sq = 0, max_abs = 0, floor_sq = 0, max_rel = 0;
  const double inv_sqrt_cols = 1.0 / std::sqrt(static_cast<double>(cols));
  for (std::int64_t i = 0; i < n; ++i) {
    if (!std::isfinite(y[i])) {
      const double inf = std::numeric_limits<double>::infinity();
      return {inf, inf, inf};
    }
    const double d = double(y[i]) - r[i];
    err_sq += d * d;
    ref_sq += r[i] * r[i];
    max_abs = std::max(max_abs, std::abs(d));
    double row_scale = std::abs(r[i]);
    if (abs_products) {
      floor_sq += abs_products[i] * abs_products[i];
      row_scale = std::max(row_scale, abs_products[i] * inv_sqrt_cols);
    }
    if (d != 0) max_rel = std::max(max_rel, row_scale > 0 ? std::abs(d) / row_scale
                                                          : std::numeric_limits<double>::infinity());
  }
  const double denom = std::max(ref_sq, floor_sq / static_cast<double>(cols));
  return {denom > 0 ? err_sq / denom : err_sq, max_abs, max_rel};
}

Tolerance tolerance_for(ActFormat f) {
  // Kernel error: float accumulation over up to ~10^5 terms gives an NMSE near 1e-13;
  // 1e-9 leaves room for any summation order while a wrong element (~1/rows) fails.
  // A Q8_1 dot that takes a block's min term from the fp16-rounded block sum s (ggml's
  // q4_1 and q5_1, and Q4_K's dp4a kernels on the GPU) errs by m * (s - d * sum q) per
  // block, which the reference, computing d * sum q exactly, does not share: on short
  // rows with outlier channels that reaches ~1e-2 of the row's scale, and a single
  // row's NMSE is then that figure squared. A wrong element (~1/rows) or a wrong
  // sub-block of a long row (~1/(cols/32)) still lies far above the bound.
  // End to end: int8 rounding of Gaussian activations costs an NMSE near 5e-5; a
  // single row (rows = 1) is a one-sample estimate with a chi-square tail that reached
  // 8e-4 in 75 draws, so the bound sits ~60x above the mean. With 20-50x-rms outlier
  // channels a block's step grows with its outlier; single rows reached 6e-2.
  // Worst row: float rounding stays below 5e-6 of the row's scale (measured on the
  // default shapes); a 1% slip in one element is ~1e-2, except under Q8_1's block sum,
  // whose fp16 rounding (2^-11 of s) on rows of one to three blocks with outlier
  // channels reached 2.5e-2 and 2.6e-2 of the row's scale in ggml's q4_1 and q5_1 (67x32,
  // 24x96): there the bound is 0.1, above that tail and far below a wrong row's ~1.
  switch (f) {
    case ActFormat::F32: return {1e-9, 1e-4, 1e-9, 1e-9};
    case ActFormat::Q8_K: return {1e-9, 1e-4, 5e-3, 0.25};
    case ActFormat::Q8_1: return {4e-4, 0.1, 5e-3, 0.25};
  }
  return {0, 0, 0, 0};
}

Tolerance tolerance_for(const KernelSpec& k) {
  if (k.act_converted_to.empty()) return tolerance_for(k.act);
  // A kernel converting the f32 vector itself is compared with the vector as converted,
  // so int8 or half rounding is off the kernel's account: it is held to the kernel
  // bounds of the format it converts to, and the end-to-end bounds of Q8_K's.
  Tolerance t = tolerance_for(ActFormat::Q8_K);
  if (k.act_converted_to == "q8_1") {
    const Tolerance q8_1 = tolerance_for(ActFormat::Q8_1);
    t.kernel_nmse = q8_1.kernel_nmse;
    t.kernel_max_rel = q8_1.kernel_max_rel;
  }
  return t;
}

std::string case_label(const CaseResult& c) {
  return c.n > 0 ? fmt::format("{} n={}", c.activation, c.n) : c.activation;
}

void parse_case_label(const std::string& label, CaseResult& c) {
  const auto at = label.rfind(" n=");
  c.activation = label.substr(0, at);
  c.n = 0;
  if (at != std::string::npos) c.n = std::atoi(label.c_str() + at + 3);
}

bool CheckResult::passed() const {
  if (!skipped.empty() || !not_run.empty() || cases.empty()) return false;
  for (const auto& c : cases)
    if (!c.passed) return false;
  return true;
}

namespace {

// Kernels that see the same activation values share a reference column: by format,
// or by the kernel's own conversion.
std::string activation_view(const KernelSpec& k) {
  return k.act_round_trip ? k.name : std::string(to_string(k.act));
}

using RowMajorD = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

struct ActivationCase {
  std::string name;
  // Vector 0 is the one every kernel sees; a batch kernel's call of n vectors takes
  // vectors 0..n-1, each drawn afresh, so a column mixed up with another fails.
  std::vector<std::vector<float>> x;
};

// One weight type and shape: the random matrices, and the references each case needs.
struct Problem {
  WeightType type;
  Shape shape;
  std::vector<std::vector<std::uint8_t>> weights;  // 1, or 2 for fused kernels
  std::vector<ActivationCase> cases;
  // [matrix] -> column per (case e2e, then each format x case) and vector of the case,
  // rows values each: W x, and |W| |x| for the error floor (see compare()).
  std::vector<Eigen::MatrixXd> reference;
  std::vector<Eigen::MatrixXd> abs_reference;
  std::vector<std::string> views;  // activation_view() of each kernel to check
  int vectors = 1;                 // per case: the largest max_n among the kernels

  int column_e2e(int c, int v = 0) const { return c * vectors + v; }
  int column_seen(const KernelSpec& k, int c, int v = 0) const {
    const auto view = static_cast<int>(std::find(views.begin(), views.end(), activation_view(k)) - views.begin());
    return static_cast<int>(cases.size()) * vectors * (1 + view) + c * vectors + v;
  }
};

}  // namespace

// W x and |W| |x| for every activation column at once, W dequantized in row chunks
// so even the lm_head shape stays within a few tens of MB of doubles.
std::pair<Eigen::MatrixXd, Eigen::MatrixXd> reference_products(WeightType type, Shape s,
                                                               const std::vector<std::uint8_t>& w,
                                                               const Eigen::MatrixXd& xs) {
  const std::int64_t chunk = std::max<std::int64_t>(1, (4 << 20) / s.cols);
  const std::size_t rb = row_bytes(type, s.cols);
  Eigen::MatrixXd out(s.rows, xs.cols()), abs_out(s.rows, xs.cols());
  const Eigen::MatrixXd abs_xs = xs.cwiseAbs();
  RowMajorD block;
  std::vector<float> row(static_cast<std::size_t>(s.cols));
  for (std::int64_t r0 = 0; r0 < s.rows; r0 += chunk) {
    const std::int64_t n = std::min(chunk, s.rows - r0);
    block.resize(n, s.cols);
#pragma omp parallel for schedule(static) firstprivate(row)
    for (std::int64_t i = 0; i < n; ++i) {
      dequantize_row(type, w.data() + rb * static_cast<std::size_t>(r0 + i), row.data(), s.cols);
      for (std::int64_t j = 0; j < s.cols; ++j) block(i, j) = row[static_cast<std::size_t>(j)];
    }
    out.middleRows(r0, n).noalias() = block * xs;
    abs_out.middleRows(r0, n).noalias() = block.cwiseAbs() * abs_xs;
  }
  return {std::move(out), std::move(abs_out)};
}

namespace {

// A problem's weights and references in CheckConfig::problem_cache, raw, in one file
// named by everything they depend on (the seed, the type, the shape, the number of
// matrices, the activation views and outlier settings). A file of any other size
// is not read: the problem is made again and the file replaced.
class ProblemCacheFile {
 public:
  ProblemCacheFile(const CheckConfig& cfg, const Problem& p, int matrices) : matrices_(matrices) {
    if (cfg.problem_cache.empty()) return;
    std::string key = fmt::format("{} {} {} {}", cfg.outlier_channels, cfg.outlier_min_x, cfg.outlier_max_x, matrices);
    if (p.vectors > 1) key += fmt::format(" vectors {}", p.vectors);
    for (const auto& v : p.views) key += " " + v;
    path_ = fmt::format("{}/{:016x}-{}-{}x{}-{:016x}.bin", cfg.problem_cache, cfg.seed, to_string(p.type),
                        p.shape.rows, p.shape.cols, std::hash<std::string>{}(key));
    weight_bytes_ = row_bytes(p.type, p.shape.cols) * static_cast<std::size_t>(p.shape.rows);
    reference_doubles_ =
        static_cast<std::size_t>(p.shape.rows) * p.cases.size() * static_cast<std::size_t>(p.vectors) * (1 + p.views.size());
  }

  bool load(Problem& p) const {
    std::ifstream in(path_, std::ios::binary | std::ios::ate);
    if (path_.empty() || !in || static_cast<std::size_t>(in.tellg()) != file_bytes()) return false;
    in.seekg(0);
    const Eigen::Index rows = p.shape.rows, cols = static_cast<Eigen::Index>(reference_doubles_ / p.shape.rows);
    for (int m = 0; m < matrices_; ++m) {
      p.weights.emplace_back(weight_bytes_);
      p.reference.emplace_back(rows, cols);
      p.abs_reference.emplace_back(rows, cols);
      in.read(reinterpret_cast<char*>(p.weights.back().data()), static_cast<std::streamsize>(weight_bytes_));
      in.read(reinterpret_cast<char*>(p.reference.back().data()), reference_doubles_ * sizeof(double));
      in.read(reinterpret_cast<char*>(p.abs_reference.back().data()), reference_doubles_ * sizeof(double));
    }
    if (in) return true;
    p.weights.clear(), p.reference.clear(), p.abs_reference.clear();
    return false;
  }

  // Written aside and renamed, so a reader never sees half a file; a failed write
  // only costs the next run the making.
  void save(const Problem& p) const {
    if (path_.empty()) return;
    const std::string aside = path_ + ".partial";
    {
      std::ofstream out(aside, std::ios::binary);
      for (int m = 0; m < matrices_; ++m) {
        out.write(reinterpret_cast<const char*>(p.weights[m].data()), static_cast<std::streamsize>(weight_bytes_));
        out.write(reinterpret_cast<const char*>(p.reference[m].data()), reference_doubles_ * sizeof(double));
        out.write(reinterpret_cast<const char*>(p.abs_reference[m].data()), reference_doubles_ * sizeof(double));
      }
      if (!out) return;
    }
    std::error_code ec;
    std::filesystem::rename(aside, path_, ec);
  }

 private:
  std::size_t file_bytes() const { return matrices_ * (weight_bytes_ + 2 * reference_doubles_ * sizeof(double)); }

  int matrices_;
  std::string path_;
  std::size_t weight_bytes_ = 0, reference_doubles_ = 0;
};

Problem make_problem(WeightType type, Shape shape, int matrices, const std::vector<const KernelSpec*>& kernels,
                     const CheckConfig& cfg) {
  // One reference column per distinct view of the activation among the kernels.
  std::vector<std::string> views;
  std::vector<const KernelSpec*> view_of;
  for (const KernelSpec* k : kernels)
    if (std::find(views.begin(), views.end(), activation_view(*k)) == views.end()) {
      views.push_back(activation_view(*k));
      view_of.push_back(k);
    }
  Problem p{type, shape, {}, {}, {}, {}, views};
  for (const KernelSpec* k : kernels)
    if (k->op == OpKind::MatVecBatch) p.vectors = std::max(p.vectors, k->max_n);
  // Seeds derived from the run seed and the problem, so every problem differs.
  const std::uint64_t base = cfg.seed ^ (std::uint64_t(shape.rows) << 40) ^
                             (std::uint64_t(shape.cols) << 8) ^ std::uint64_t(type);
  p.cases.push_back({"gaussian", {}});
  p.cases.push_back({"outliers", {}});
  for (int v = 0; v < p.vectors; ++v) {
    // Vector 0 keeps the seeds a single-vector check always drew.
    const std::uint64_t vs = base + 1000003u * static_cast<std::uint64_t>(v);
    p.cases[0].x.push_back(gaussian_vector(shape.cols, vs + 1));
    p.cases[1].x.push_back(
        activation_with_outliers(shape.cols, vs + 2, cfg.outlier_channels, cfg.outlier_min_x, cfg.outlier_max_x));
  }
  const ProblemCacheFile cache(cfg, p, matrices);
  if (cache.load(p)) return p;
  for (int m = 0; m < matrices; ++m)
    p.weights.push_back(random_quantized_matrix(type, shape, base + 7919u * (m + 1)));
  const int ncases = static_cast<int>(p.cases.size());
  Eigen::MatrixXd xs(shape.cols, ncases * p.vectors * (1 + static_cast<int>(views.size())));
  for (int c = 0; c < ncases; ++c)
    for (int v = 0; v < p.vectors; ++v)
      for (std::int64_t j = 0; j < shape.cols; ++j) xs(j, p.column_e2e(c, v)) = p.cases[c].x[v][j];
  // The activation values each kernel sees: quantized, then dequantized (by the
  // harness's quantizer, or by the kernel's own conversion for one that converts).
  std::vector<std::uint8_t> x_in_format;
  std::vector<float> seen(static_cast<std::size_t>(shape.cols));
  for (const KernelSpec* k : view_of) {
    x_in_format.resize(row_bytes(k->act, shape.cols));
    for (int c = 0; c < ncases; ++c)
      for (int v = 0; v < p.vectors; ++v) {
        if (k->act_round_trip) {
          k->act_round_trip(p.cases[c].x[v].data(), seen.data(), shape.cols);
        } else {
          quantize_activation(k->act, p.cases[c].x[v].data(), x_in_format.data(), shape.cols);
          dequantize_activation(k->act, x_in_format.data(), seen.data(), shape.cols);
        }
        for (std::int64_t j = 0; j < shape.cols; ++j) xs(j, p.column_seen(*k, c, v)) = seen[j];
      }
  }
  for (const auto& w : p.weights) {
    auto [ref, abs_ref] = reference_products(type, shape, w, xs);
    p.reference.push_back(std::move(ref));
    p.abs_reference.push_back(std::move(abs_ref));
  }
  cache.save(p);
  return p;
}

CheckResult check_one(const KernelSpec& spec, const Problem& p, const CheckConfig& cfg) {
  CheckResult res{&spec, p.shape, {}, {}, {}};
  const Tolerance tol = tolerance_for(spec);
  const int matrices = spec.op == OpKind::FusedUpGate ? 2 : 1;
  // A batch kernel is checked with every count of vectors it takes, each call on
  // outputs poisoned in all its columns.
  const int max_n = spec.op == OpKind::MatVecBatch ? std::min(spec.max_n, p.vectors) : 1;
  const std::size_t rows = static_cast<std::size_t>(p.shape.rows);
  const std::size_t x_one = row_bytes(spec.act, p.shape.cols);
  std::vector<std::uint8_t> x;
  std::vector<std::vector<float>> y(static_cast<std::size_t>(matrices));
  for (int n = 1; n <= max_n; ++n)
    for (std::size_t c = 0; c < p.cases.size(); ++c) {
      CaseResult cr;
      cr.activation = p.cases[c].name;
      cr.n = spec.op == OpKind::MatVecBatch ? n : 0;
      x.assign(x_one * static_cast<std::size_t>(n), 0);
      for (int v = 0; v < n; ++v)
        quantize_activation(spec.act, p.cases[c].x[v].data(), x.data() + x_one * v, p.shape.cols);
      for (auto& out : y) {
        out.assign(rows * static_cast<std::size_t>(n), 0.0f);
        poison(out);
      }
      HostCall call;
      call.shape = p.shape;
      call.w = p.weights[0].data();
      call.w_bytes = p.weights[0].size();
      call.x = x.data();
      call.x_bytes = x.size();
      call.y = y[0].data();
      call.n = n;
      if (matrices == 2) {
        call.w2 = p.weights[1].data();
        call.w2_bytes = p.weights[1].size();
        call.y2 = y[1].data();
      }
      call.threads = cfg.threads;
      const Status st = run_on_host_buffers(spec, call);
      if (!st.ok()) {
        cr.kernel = cr.end_to_end = {std::numeric_limits<double>::infinity(),
                                     std::numeric_limits<double>::infinity()};
        cr.failure = "kernel returned an error: " + st.error;
        res.cases.push_back(cr);
        continue;
      }
      // The case is as good as its worst output: of either matrix of a fused kernel,
      // of any vector of a batch.
      bool first = true;
      int worst_vector = 0;
      for (int m = 0; m < matrices; ++m)
        for (int v = 0; v < n; ++v) {
          const int col_seen = p.column_seen(spec, static_cast<int>(c), v);
          const int col_e2e = p.column_e2e(static_cast<int>(c), v);
          const Eigen::VectorXd r_seen = p.reference[m].col(col_seen);
          const Eigen::VectorXd r_e2e = p.reference[m].col(col_e2e);
          const Eigen::VectorXd a_seen = p.abs_reference[m].col(col_seen);
          const Eigen::VectorXd a_e2e = p.abs_reference[m].col(col_e2e);
          const float* out = y[m].data() + rows * static_cast<std::size_t>(v);
          const ErrorStats k = compare(out, r_seen.data(), p.shape.rows, a_seen.data(), p.shape.cols);
          const ErrorStats e = compare(out, r_e2e.data(), p.shape.rows, a_e2e.data(), p.shape.cols);
          const double max_rel = first ? k.max_rel : std::max(cr.kernel.max_rel, k.max_rel);
          if (first || !(k.nmse <= cr.kernel.nmse)) {
            cr.kernel = k;
            worst_vector = v;
          }
          cr.kernel.max_rel = max_rel;
          if (first || !(e.nmse <= cr.end_to_end.nmse)) cr.end_to_end = e;
          first = false;
        }
      const std::string where = n > 1 ? fmt::format(" (vector {} of {})", worst_vector, n) : "";
      if (!std::isfinite(cr.kernel.nmse))
        cr.failure = "output has NaN/inf (an element left unwritten or an overflow)" + where;
      else if (cr.kernel.nmse > tol.kernel_nmse)
        cr.failure = fmt::format("kernel NMSE {:.3g} > {:.3g}{}", cr.kernel.nmse, tol.kernel_nmse, where);
      else if (cr.kernel.max_rel > tol.kernel_max_rel)
        cr.failure = fmt::format("kernel worst-row relative error {:.3g} > {:.3g}", cr.kernel.max_rel,
                                 tol.kernel_max_rel);
      else if (const double e2e_tol = p.cases[c].name == "gaussian" ? tol.end_to_end_nmse_gaussian : tol.end_to_end_nmse_outliers;
               cr.end_to_end.nmse > e2e_tol)
        cr.failure = fmt::format("end-to-end NMSE {:.3g} > {:.3g}", cr.end_to_end.nmse, e2e_tol);
      cr.passed = cr.failure.empty();
      res.cases.push_back(cr);
    }
  return res;
}

}  // namespace

std::string check_skip_reason(const KernelSpec& k, Shape shape) {
  const Availability av = availability(k);
  if (!av.available) return "unavailable: " + av.reason;
  if (!k.supports(shape)) return "shape not supported (needs " + k.shape_rule + ")";
  return {};
}

std::vector<CheckResult> run_check(const std::vector<const KernelSpec*>& kernels,
                                   const std::vector<Shape>& shapes, const CheckConfig& config,
                                   const std::function<void(const CheckResult&)>& on_result) {
  std::vector<CheckResult> results;
  auto emit = [&](CheckResult r) {
    if (on_result) on_result(r);
    results.push_back(std::move(r));
  };
  for (WeightType type : kAllWeightTypes) {
    std::vector<const KernelSpec*> group;
    for (const KernelSpec* k : kernels)
      if (k->weight == type) group.push_back(k);
    if (group.empty()) continue;
    for (Shape shape : shapes) {
      std::vector<const KernelSpec*> runnable;
      for (const KernelSpec* k : group) {
        if (std::string why = check_skip_reason(*k, shape); !why.empty())
          emit({k, shape, std::move(why), {}, {}});
        else
          runnable.push_back(k);
      }
      if (runnable.empty()) continue;
      int matrices = 1;
      for (const KernelSpec* k : runnable)
        if (k->op == OpKind::FusedUpGate) matrices = 2;
      const Problem problem = make_problem(type, shape, matrices, runnable, config);
      for (const KernelSpec* k : runnable) {
        if (k->backend == Backend::CUDA)
          if (std::string lost = cuda_context_lost_after(); !lost.empty()) {
            emit({k, shape, "", {}, "the CUDA context was lost after " + lost});
            continue;
          }
        emit(check_one(*k, problem, config));
      }
    }
  }
  return results;
}

}  // namespace qmv
