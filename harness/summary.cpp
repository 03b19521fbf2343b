#include "harness/summary.h"

#include <fmt/format.h>

#include "harness/csv_columns.h"
#include "harness/summary_detail.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <limits>
#include <optional>
#include <set>
#include <stdexcept>
#include <tuple>
#include <utility>

#include "harness/machine.h"
#include "kernels/former_names.h"

namespace qmv {
namespace {

using namespace summary_detail;

namespace fs = std::filesystem;

using csv_columns::Fields;

// Sorts a plain matvec before the other ops of its weight type.
std::string op_order(const std::string& op) { return op == "matvec" ? std::string() : op; }

// The most frequent string (ties: the first by name) and how often it occurs.
std::pair<std::string, int> mode(const std::vector<std::string>& v) {
  std::map<std::string, int> count;
  for (const auto& x : v) ++count[x];
  std::pair<std::string, int> best{"", 0};
  for (const auto& [x, n] : count)
    if (n > best.second) best = {x, n};
  return best;
}

// A failure's kind, without the numbers that differ from row to row ("kernel NMSE
// 0.012 > 1e-09" -> "kernel NMSE ..."), so that one line counts them all.
std::string reason_kind(const std::string& reason) {
  int depth = 0;  // numbers inside parentheses are part of the kind: "(needs cols % 256 == 0)"
  for (std::size_t i = 0; i < reason.size(); ++i) {
    depth += reason[i] == '(' ? 1 : reason[i] == ')' ? -1 : 0;
    if (depth > 0) continue;
    const bool word_start = i == 0 || reason[i - 1] == ' ';
    const bool digit = std::isdigit(static_cast<unsigned char>(reason[i])) ||
                       (reason[i] == '-' && i + 1 < reason.size() && std::isdigit(static_cast<unsigned char>(reason[i + 1])));
    if (word_start && digit) {
      std::string head = reason.substr(0, i);
      while (!head.empty() && (head.back() == ' ' || head.back() == ':' || head.back() == ',')) head.pop_back();
      return head + " ...";
    }
  }
  return reason;
}

}  // namespace

bool is_peer_kernel(std::string_view kernel) {
  const std::size_t dot = kernel.find('.');
  if (dot == std::string_view::npos) return false;
  const std::string_view rest = kernel.substr(dot + 1);
  return rest.substr(0, rest.find('.')) == "ggml";
}

std::string act_quant_of(const TimedRow& r) {
  if (!r.act_quant.empty()) return r.act_quant;
  if (is_peer_kernel(r.kernel)) return "in_call";
  if (r.act_format == "q8_K" || r.act_format == "q8_1" || r.act_format == "q8_0") return "before";
  return "none";
}

double comparable_time_us(const TimedRow& r) {
  return r.time_median_us + (act_quant_of(r) == "before" ? r.act_quant_median_us : 0);
}

TimedFile read_timed_csv(const std::string& path) {
  static constexpr std::array<const char*, 21> kNames = {
      "kernel", "weight_type", "backend", "rows", "cols", "threads", "cache", "time_median_us", "gbps_median",
      // optional
      "op", "act_format", "bytes_per_call", "peak_gbps", "act_quant", "act_quant_median_us", "status", "reason",
      "machine", "cpu_model", "git_commit", "model_op"};
  TimedFile f;
  f.path = path;
  bool first = true;
  std::array<bool, kNames.size()> present{};
  require_input_file(path);
  csv_columns::read(path, "bench or sweep", kNames, 9, [&](const Fields& x) {
    if (first) {
      f.machine = canonical_machine(x["machine"]), f.cpu_model = x["cpu_model"], f.git_commit = x["git_commit"];
      first = false;
    }
    TimedRow r;
    if (x["kernel"].empty()) throw std::runtime_error(fmt::format("{}: line {}: empty kernel name", path, x.line));
    r.kernel = std::string(current_kernel_name(x["kernel"]));
    r.op = x["op"].empty() ? "matvec" : x["op"];
    r.weight_type = x["weight_type"], r.act_format = x["act_format"], r.backend = x["backend"];
    r.cache = x["cache"], r.model_op = x["model_op"], r.act_quant = x["act_quant"];
    if (!x["status"].empty()) r.status = x["status"];
    if (!known_sweep_status(r.status))
      throw std::runtime_error(fmt::format("{}: line {}: column status: '{}' is not a sweep status ({})", path, x.line,
                                           one_line(r.status), kSweepStatuses));
    r.reason = x["reason"];
    if (r.status == "ok") {
      r.rows = x.required<std::int64_t>("rows");
      r.cols = x.required<std::int64_t>("cols");
      r.threads = x.required<int>("threads");
      r.time_median_us = x.required<double>("time_median_us");
      if (!(r.time_median_us > 0) || !std::isfinite(r.time_median_us))
        throw std::runtime_error(fmt::format("{}: line {}: column time_median_us: '{}' is not a positive time",
                                             path, x.line, one_line(x["time_median_us"])));
      r.gbps_median = x.number<double>("gbps_median");
      r.bytes_per_call = static_cast<std::int64_t>(x.number<double>("bytes_per_call"));
      r.peak_gbps = x.number<double>("peak_gbps");
      r.act_quant_median_us = x.number<double>("act_quant_median_us");
    } else {  // a point not timed: its measurement columns are empty
      r.rows = static_cast<std::int64_t>(x.number<double>("rows"));
      r.cols = static_cast<std::int64_t>(x.number<double>("cols"));
      r.threads = static_cast<int>(x.number<double>("threads"));
    }
    f.rows.push_back(std::move(r));
  }, &present);
  static_assert(std::string_view(kNames[13]) == "act_quant");
  f.has_act_quant = present[13];
  return f;
}

std::vector<TimedRow> timed_rows(const std::vector<BenchRow>& rows) {
  std::vector<TimedRow> out;
  out.reserve(rows.size());
  for (const BenchRow& b : rows) {
    TimedRow r;
    r.kernel = std::string(current_kernel_name(b.kernel));
    r.op = b.op.empty() ? "matvec" : b.op;
    r.weight_type = b.weight_type, r.act_format = b.act_format, r.backend = b.backend, r.cache = b.cache;
    r.rows = b.rows, r.cols = b.cols, r.bytes_per_call = b.bytes_per_call, r.threads = b.threads;
    r.time_median_us = b.time_median_us, r.gbps_median = b.gbps_median, r.peak_gbps = b.peak_gbps;
    r.act_quant = b.act_quant, r.act_quant_median_us = b.act_quant_median_us;
    out.push_back(std::move(r));
  }
  return out;
}

std::vector<PeerPoint> peer_points(const std::vector<TimedRow>& rows, const std::map<int, double>& peaks) {
  using Key = std::tuple<std::string, std::string, std::string, std::string, int, std::int64_t, std::int64_t>;
  std::map<Key, PeerPoint> points;
  for (const TimedRow& r : rows) {
    if (r.status != "ok") continue;
    PeerPoint& p = points[{r.weight_type, op_order(r.op), r.backend, r.cache, r.threads, r.rows, r.cols}];
    if (p.weight_type.empty()) {
      p.weight_type = r.weight_type, p.op = r.op, p.backend = r.backend, p.cache = r.cache;
      p.threads = r.threads, p.rows = r.rows, p.cols = r.cols;
    }
    if (p.model_op.empty()) p.model_op = r.model_op;
    PeerBest& b = is_peer_kernel(r.kernel) ? p.ggml : p.qmv;
    const double t = comparable_time_us(r);
    ++b.candidates;
    if (b.found && t >= b.time_us) continue;
    b.found = true;
    b.kernel = r.kernel;
    b.time_us = t;
    // Bytes moved per call; a file without the column has them in GB/s x time.
    const double bytes =
        r.bytes_per_call > 0 ? static_cast<double>(r.bytes_per_call) : r.gbps_median * r.time_median_us * 1e3;
    b.gbps = bytes / (t * 1e3);
    double peak = r.peak_gbps;
    if (!(peak > 0)) {
      const auto it = peaks.find(r.threads);
      peak = it == peaks.end() ? 0 : it->second;
    }
    b.peak_pct = peak > 0 && bytes > 0 ? 100 * b.gbps / peak : kNaN;
    b.act_quant_missing = act_quant_of(r) == "before" && !(r.act_quant_median_us > 0);
  }
  std::vector<PeerPoint> out;
  for (auto& [key, p] : points) {
    p.ratio = p.qmv.found && p.ggml.found ? p.ggml.time_us / p.qmv.time_us : kNaN;
    out.push_back(std::move(p));
  }
  return out;
}

std::vector<PeerGroup> peer_groups(const std::vector<PeerPoint>& points) {
  using Key = std::tuple<std::string, std::string, std::string, std::string, int>;
  std::map<Key, std::vector<const PeerPoint*>> by;
  for (const PeerPoint& p : points) by[{p.weight_type, op_order(p.op), p.backend, p.cache, p.threads}].push_back(&p);
  std::vector<PeerGroup> out;
  for (const auto& [key, ps] : by) {
    PeerGroup g;
    const PeerPoint& first = *ps.front();
    g.weight_type = first.weight_type, g.op = first.op, g.backend = first.backend, g.cache = first.cache;
    g.threads = first.threads;
    g.shapes = static_cast<int>(ps.size());
    std::vector<std::string> qk, gk;
    std::vector<double> pct, ratios;
    for (const PeerPoint* p : ps) {
      if (p->qmv.found) {
        qk.push_back(p->qmv.kernel);
        if (std::isfinite(p->qmv.peak_pct)) pct.push_back(p->qmv.peak_pct);
      }
      if (p->ggml.found) gk.push_back(p->ggml.kernel);
      if (usable(p->ratio)) ratios.push_back(p->ratio);
    }
    std::tie(g.qmv_kernel, g.qmv_kernel_wins) = mode(qk);
    std::tie(g.ggml_kernel, g.ggml_kernel_wins) = mode(gk);
    g.qmv_shapes = static_cast<int>(qk.size());
    g.ggml_shapes = static_cast<int>(gk.size());
    g.pct_median = median(pct);
    g.pct_min = pct.empty() ? kNaN : *std::min_element(pct.begin(), pct.end());
    g.pct_max = pct.empty() ? kNaN : *std::max_element(pct.begin(), pct.end());
    g.ratio_shapes = static_cast<int>(ratios.size());
    if (ratios.empty()) {
      g.ratio_geomean = g.ratio_min = g.ratio_max = kNaN;
    } else {
      double log_sum = 0;
      for (double r : ratios) log_sum += std::log(r);
      g.ratio_geomean = std::exp(log_sum / static_cast<double>(ratios.size()));
      g.ratio_min = *std::min_element(ratios.begin(), ratios.end());
      g.ratio_max = *std::max_element(ratios.begin(), ratios.end());
    }
    out.push_back(std::move(g));
  }
  return out;
}

// ---------------------------------------------------------------------------------------
// The results folder.

namespace {

struct Context {
  std::string machine, cpu_model, git_commit;
};

Context read_context(const std::string& path, const char* kind, const char* commit_column) {
  const std::array<const char*, 3> names = {"machine", "cpu_model", commit_column};
  Context c;
  bool first = true;
  require_input_file(path);
  csv_columns::read(path, kind, names, 0, [&](const Fields& f) {
    if (!first) return;
    c = {f["machine"], f["cpu_model"], f[commit_column]};
    first = false;
  });
  return c;
}

using Decode = ResultsSummary::Decode;

std::vector<Decode> read_peer_decode(const std::string& path, std::string* peer, Context* ctx) {
  static constexpr std::array<const char*, 16> kNames = {
      "model", "threads", "qmvlab_tok_s", "llamacpp_tok_s",
      // optional
      "weights", "llamacpp_norepack_tok_s", "ratio", "roofline_tok_s", "qmvlab_roofline_pct", "llamacpp_roofline_pct",
      "qmvlab_plan", "peer", "machine", "cpu_model", "qmvlab_commit", "rounds"};
  std::map<std::tuple<std::string, std::string, int>, std::size_t> last;
  std::vector<Decode> out;
  require_input_file(path);
  csv_columns::read(path, "decode-vs-llamacpp", kNames, 4, [&](const Fields& f) {
    if (peer->empty()) *peer = f["peer"];
    if (ctx->machine.empty()) *ctx = {f["machine"], f["cpu_model"], f["qmvlab_commit"]};
    Decode d;
    d.model = f["model"], d.weights = f["weights"], d.plan = f["qmvlab_plan"];
    d.threads = f.required<int>("threads");
    d.runs = static_cast<int>(f.number<double>("rounds"));
    d.qmv_tok_s = f.number_or<double>("qmvlab_tok_s", kNaN);
    d.llama_tok_s = f.number_or<double>("llamacpp_tok_s", kNaN);
    d.llama_norepack_tok_s = f.number_or<double>("llamacpp_norepack_tok_s", kNaN);
    d.ratio = f.number_or<double>("ratio", kNaN);
    if (!std::isfinite(d.ratio) && usable(d.qmv_tok_s) && usable(d.llama_tok_s)) d.ratio = d.qmv_tok_s / d.llama_tok_s;
    d.roofline_tok_s = f.number_or<double>("roofline_tok_s", kNaN);
    d.qmv_roofline_pct = f.number_or<double>("qmvlab_roofline_pct", kNaN);
    d.llama_roofline_pct = f.number_or<double>("llamacpp_roofline_pct", kNaN);
    // A later row of the same model and threads is a later run: it replaces the earlier.
    const auto key = std::make_tuple(d.model, d.weights, d.threads);
    const auto it = last.find(key);
    if (it != last.end()) {
      out[it->second] = std::move(d);
    } else {
      last[key] = out.size();
      out.push_back(std::move(d));
    }
  });
  return out;
}

std::vector<Decode> read_decode(const std::string& path, Context* ctx) {
  static constexpr std::array<const char*, 9> kNames = {"model", "threads", "decode_tok_s",
                                                        // optional
                                                        "plan", "roofline_tok_s", "roofline_pct", "machine",
                                                        "cpu_model", "git_commit"};
  struct Runs {
    std::vector<double> tok_s, roofline_tok_s, roofline_pct;
  };
  std::map<std::tuple<std::string, std::string, int>, Runs> runs;
  require_input_file(path);
  csv_columns::read(path, "decode", kNames, 3, [&](const Fields& f) {
    if (ctx->machine.empty()) *ctx = {f["machine"], f["cpu_model"], f["git_commit"]};
    Runs& r = runs[{f["model"], f["plan"], f.required<int>("threads")}];
    r.tok_s.push_back(f.required<double>("decode_tok_s"));
    // A run without a roofline (--no-peak) writes 0: not a share of anything.
    const double roofline = f.number<double>("roofline_tok_s");
    if (roofline > 0) {
      r.roofline_tok_s.push_back(roofline);
      r.roofline_pct.push_back(f.number<double>("roofline_pct"));
    }
  });
  std::vector<Decode> out;
  for (const auto& [key, r] : runs) {
    Decode d;
    std::tie(d.model, d.plan, d.threads) = key;
    d.runs = static_cast<int>(r.tok_s.size());
    d.qmv_tok_s = median(r.tok_s);
    d.roofline_tok_s = median(r.roofline_tok_s);
    d.qmv_roofline_pct = median(r.roofline_pct);
    d.llama_tok_s = d.llama_norepack_tok_s = d.ratio = d.llama_roofline_pct = kNaN;
    out.push_back(std::move(d));
  }
  return out;
}

// Lines of the "skipped and failed" section: one per reason, most points first.
struct ReasonCount {
  int count = 0;
  std::set<std::string> kernels;
  std::string example;
};

void add_reasons(std::vector<ResultsSummary::Reason>& out, const std::map<std::string, ReasonCount>& reasons,
                 const char* unit_one, const char* unit_many) {
  std::vector<std::pair<std::string, ReasonCount>> v(reasons.begin(), reasons.end());
  std::stable_sort(v.begin(), v.end(), [](const auto& a, const auto& b) { return a.second.count > b.second.count; });
  for (const auto& [what, r] : v) {
    std::string line = fmt::format("{} {} ({}, e.g. {})", plural(r.count, unit_one, unit_many), what,
                                   plural(static_cast<long>(r.kernels.size()), "kernel", "kernels"), r.example);
    out.push_back({r.count, std::move(line)});
  }
}

}  // namespace

ResultsSummary summarize_results(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    throw std::runtime_error(fmt::format("{}: {} (expected a results folder, results/<machine>)", dir,
                                         fs::exists(dir, ec) ? "not a folder" : "no such folder"));
  ResultsSummary s;
  s.dir = dir;
  auto path = [&](const char* name) { return (fs::path(dir) / name).string(); };
  auto present = [&](const char* name) { return fs::exists(path(name)); };
  Context ctx;

  std::map<int, double> peaks;
  if ((s.has_peak = present(kPeak))) {
    s.peaks = read_peak_csv(path(kPeak));
    for (const PeakRow& p : s.peaks)
      if (p.device == "cpu") peaks[p.threads] = p.gbps_best;
  }

  std::map<std::string, ReasonCount> skipped, failed;
  if (!present(kSweep) && present(kQuickSweep)) s.sweep_name = kQuickSweep;
  if ((s.has_sweep = present(s.sweep_name.c_str()))) {
    s.sweep_file = path(s.sweep_name.c_str());
    const TimedFile f = read_timed_csv(s.sweep_file);
    ctx = {f.machine, f.cpu_model, f.git_commit};
    s.sweep_rows = static_cast<int>(f.rows.size());
    bool any_cold = false;
    for (const TimedRow& r : f.rows) {
      s.peer_rows += is_peer_kernel(r.kernel);
      if (r.status == "ok") {
        ++s.sweep_ok;
        any_cold = any_cold || r.cache == "cold";
        if (s.cache.empty()) s.cache = r.cache;
      } else {
        const bool skip = r.status == "skipped";
        const std::string what = fmt::format("{}: {}", r.status, skip ? r.reason : reason_kind(r.reason));
        ReasonCount& rc = (skip ? skipped : failed)[what];
        ++rc.count;
        rc.kernels.insert(r.kernel);
        if (rc.example.empty())
          rc.example = skip ? r.kernel
                            : fmt::format("{} {} {}t: {}", r.kernel, shape_text(r.rows, r.cols), r.threads, r.reason);
      }
    }
    if (any_cold) s.cache = "cold";
    std::vector<TimedRow> rows;
    for (const TimedRow& r : f.rows)
      if (r.status == "ok") {
        if (r.cache != s.cache) {
          ++s.other_cache_rows;
          continue;
        }
        s.peer_rows_ok += is_peer_kernel(r.kernel);
        rows.push_back(r);
      }
    s.points = peer_points(rows, peaks);
    s.groups = peer_groups(s.points);
    for (const PeerPoint& p : s.points) s.act_quant_missing += p.qmv.found && p.qmv.act_quant_missing;
  }
  add_reasons(s.skipped, skipped, "point", "points");
  add_reasons(s.skipped, failed, "point", "points");
  if (s.has_sweep && s.peer_rows == 0)
    s.skipped.push_back({0, fmt::format("ggml kernels: no ggml rows in {} (peer kernels not built)", s.sweep_name)});

  if ((s.has_check = present(kCheck))) {
    const std::vector<CheckRow> all = read_check_csv(path(kCheck));
    std::vector<CheckRow> rows;
    std::map<std::string, ReasonCount> unchecked;
    for (const CheckRow& r : all) {
      if (r.activation != "skipped") {
        rows.push_back(r);
        continue;
      }
      ReasonCount& rc = unchecked[fmt::format("not checked ({}): {}", kCheck, reason_kind(r.failure))];
      ++rc.count;
      rc.kernels.insert(r.kernel);
      if (rc.example.empty()) rc.example = r.kernel;
    }
    add_reasons(s.skipped, unchecked, "kernel x shape pair", "kernel x shape pairs");
    s.check_rows = static_cast<int>(rows.size());
    std::map<std::tuple<std::string, std::int64_t, std::int64_t, int>, const CheckRow*> pairs;  // the first failure
    for (const CheckRow& r : rows) {
      const CheckRow*& first_failure = pairs[{r.kernel, r.rows, r.cols, r.threads}];
      if (!r.passed && !first_failure) first_failure = &r;
    }
    s.check_pairs = static_cast<int>(pairs.size());
    std::map<std::string, ReasonCount> reasons;
    for (const auto& [key, r] : pairs) {
      if (!r) continue;
      ++s.check_failed_pairs;
      ReasonCount& rc = reasons[fmt::format("failed in {}: {}: {}", kCheck, r->activation, reason_kind(r->failure))];
      ++rc.count;
      rc.kernels.insert(r->kernel);
      if (rc.example.empty()) rc.example = fmt::format("{} {}: {}", r->kernel, shape_text(r->rows, r->cols), r->failure);
    }
    add_reasons(s.skipped, reasons, "kernel x shape pair", "kernel x shape pairs");
  }

  if ((s.has_peer_decode = present(kPeerDecode))) {
    Context c;
    s.peer_decode = read_peer_decode(path(kPeerDecode), &s.peer, &c);
    if (ctx.machine.empty()) ctx = c;
    int unmeasured = 0;
    for (const Decode& d : s.peer_decode) unmeasured += !usable(d.llama_tok_s);
    if (unmeasured)
      s.skipped.push_back({unmeasured, fmt::format("{} without a llama.cpp measurement in {}",
                                                   plural(unmeasured, "decode row", "decode rows"), kPeerDecode)});
  } else {
    s.skipped.push_back({0, fmt::format("decode against llama.cpp: not measured (no {})", kPeerDecode)});
  }
  if ((s.has_decode = present(kDecode))) {
    Context c;
    s.decode = read_decode(path(kDecode), &c);
    if (ctx.machine.empty()) ctx = c;
  }
  if (ctx.machine.empty() && s.has_peak) ctx = read_context(path(kPeak), "peak", "git_commit");
  // Rows measured under a machine's former name report it by the name it has now.
  s.machine = canonical_machine(ctx.machine), s.cpu_model = ctx.cpu_model, s.git_commit = ctx.git_commit;

  for (const auto& e : fs::directory_iterator(dir))
    if (e.is_regular_file() && e.path().extension() == ".png") s.plots.push_back(e.path().filename().string());
  // The sweep's plots first, then the others, each by name.
  const std::string sweep_stem = fs::path(s.sweep_name).stem().string();
  std::sort(s.plots.begin(), s.plots.end(), [&](const std::string& a, const std::string& b) {
    const std::string sa = fs::path(a).stem().string(), sb = fs::path(b).stem().string();
    return std::make_pair(sa.rfind(sweep_stem, 0) != 0, sa) < std::make_pair(sb.rfind(sweep_stem, 0) != 0, sb);
  });
  return s;
}
}  // namespace qmv
