// The isolated check (run_check_isolated in check.h): one child process per kernel.
#include <fmt/format.h>
#include <stdlib.h>

#include <algorithm>
#include <filesystem>
#include <limits>
#include <stdexcept>

#include "harness/check.h"
#include "harness/child_process.h"
#include "harness/csv.h"
#include "kernels/cpu_features.h"

namespace qmv {
namespace {

// A folder of this run's own under the system's temporary folder, removed with everything
// in it when the run ends.
class TempFolder {
 public:
  TempFolder() {
    std::string pattern = (std::filesystem::temp_directory_path() / "qmv-isolate-XXXXXX").string();
    if (!mkdtemp(pattern.data())) throw std::runtime_error("check --isolate: cannot make a folder in " + pattern);
    path_ = pattern;
  }
  ~TempFolder() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempFolder(const TempFolder&) = delete;
  TempFolder& operator=(const TempFolder&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// On destruction, removes the cached problems of one weight type (problem files are named
// "<seed>-<type>-..."); nothing for an empty type.
class TypeCacheCleanup {
 public:
  TypeCacheCleanup(std::string folder, std::string type) : folder_(std::move(folder)), type_(std::move(type)) {}
  ~TypeCacheCleanup() {
    if (type_.empty()) return;
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator(folder_, ec))
      if (entry.path().filename().string().find("-" + type_ + "-") != std::string::npos)
        std::filesystem::remove(entry.path(), ec);
  }
  TypeCacheCleanup(const TypeCacheCleanup&) = delete;
  TypeCacheCleanup& operator=(const TypeCacheCleanup&) = delete;

 private:
  std::string folder_, type_;
};

// The pair as the child's check wrote it: its rows back into a result.
CheckResult from_rows(const KernelSpec& k, Shape shape, const std::vector<const CheckRow*>& rows) {
  CheckResult r{&k, shape, {}, {}, {}};
  for (const CheckRow* row : rows) {
    if (row->activation == "skipped") {
      r.skipped = row->failure;
      continue;
    }
    CaseResult c;
    parse_case_label(row->activation, c);
    c.kernel = {row->nmse_kernel, row->max_abs_kernel, row->max_rel_kernel};
    c.end_to_end = {row->nmse_e2e, row->max_abs_e2e, 0};
    c.passed = row->passed;
    c.failure = row->failure;
    r.cases.push_back(c);
  }
  return r;
}

// A pair its child never reported: a failure whose one case, `process`, says why.
CheckResult unreported(const KernelSpec& k, Shape shape, std::string why) {
  const double inf = std::numeric_limits<double>::infinity();
  CaseResult c;
  c.activation = "process";
  c.kernel = c.end_to_end = {inf, inf, inf};
  c.failure = std::move(why);
  return {&k, shape, {}, {c}, {}};
}

std::string shape_list(const std::vector<Shape>& shapes) {
  std::string s;
  for (Shape shape : shapes) s += (s.empty() ? "" : ",") + to_string(shape);
  return s;
}

}  // namespace

std::vector<CheckResult> run_check_isolated(const std::vector<const KernelSpec*>& kernels,
                                            const std::vector<Shape>& shapes, const CheckConfig& config,
                                            const IsolateConfig& isolate,
                                            const std::function<void(const CheckResult&)>& on_result) {
  std::vector<CheckResult> results;
  auto emit = [&](CheckResult r) {
    if (on_result) on_result(r);
    results.push_back(std::move(r));
  };
  const TempFolder folder;
  // The children run under this process's ISA mask, however it was given.
  if (cpu_features_masked()) {
    std::string names = cpu_feature_names(cpu_feature_mask());
    std::replace(names.begin(), names.end(), ' ', ',');
    setenv(kCpuFeaturesEnv, names.c_str(), 1);
  }
  // Grouped by weight type as run_check orders them, so kernels sharing a problem run
  // one after another and the cache is read while it is in the page cache.
  std::vector<const KernelSpec*> order = kernels;
  std::stable_sort(order.begin(), order.end(),
                   [](const KernelSpec* a, const KernelSpec* b) { return a->weight < b->weight; });
  for (std::size_t i = 0; i < order.size(); ++i) {
    const KernelSpec* k = order[i];
    // The last kernel of its weight type: the problems no later child reads go with it.
    const bool last_of_type = i + 1 == order.size() || order[i + 1]->weight != k->weight;
    std::vector<Shape> runnable;
    for (Shape shape : shapes) {
      if (std::string why = check_skip_reason(*k, shape); !why.empty())
        emit({k, shape, std::move(why), {}, {}});
      else
        runnable.push_back(shape);
    }
    const TypeCacheCleanup cleanup(folder.path(), last_of_type ? std::string(to_string(k->weight)) : "");
    if (runnable.empty()) continue;
    const std::string csv = fmt::format("{}/{}.csv", folder.path(), results.size());
    std::vector<std::string> argv = {isolate.executable, "check", "--kernels", k->name, "--shapes",
                                     shape_list(runnable), "--seed", std::to_string(config.seed),
                                     "--threads", std::to_string(config.threads), "--problem-cache",
                                     folder.path(), "--out", csv};
    argv.insert(argv.end(), isolate.child_options.begin(), isolate.child_options.end());
    const ChildEnd end = run_child(argv, isolate.kernel_timeout_s);
    std::vector<CheckRow> rows;
    try {
      if (std::filesystem::exists(csv)) rows = read_check_csv(csv);
    } catch (const std::exception&) {
      rows.clear();  // a file cut off mid-row by the child's end: every pair is unreported
    }
    // The first pair the child did not report is where it ended; the pairs after it
    // were never reached.
    std::string reached;
    for (Shape shape : runnable) {
      std::vector<const CheckRow*> mine;
      for (const CheckRow& row : rows)
        if (row.rows == shape.rows && row.cols == shape.cols) mine.push_back(&row);
      if (!mine.empty()) {
        emit(from_rows(*k, shape, mine));
      } else if (end.how == ChildEnd::How::Exited && end.code <= 1) {
        // It stopped on its own: a fault at an earlier shape lost its CUDA context.
        emit(unreported(*k, shape, "not checked: its process lost its CUDA context to an earlier fault"));
      } else if (reached.empty()) {
        reached = to_string(shape);
        emit(unreported(*k, shape, "its process " + end.describe()));
      } else {
        emit(unreported(*k, shape, fmt::format("not checked: its process {} at {}", end.describe(), reached)));
      }
    }
  }
  return results;
}

}  // namespace qmv
