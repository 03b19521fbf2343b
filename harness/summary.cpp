#include "harness/summary.h"

#include <fmt/format.h>

#include "harness/csv_columns.h"

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

namespace fs = std::filesystem;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

using csv_columns::Fields;

bool usable(double v) { return std::isfinite(v) && v > 0; }

double median(std::vector<double> v) {
  if (v.empty()) return kNaN;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// Sorts a plain matvec before the other ops of its weight type.
std::string op_order(const std::string& op) { return op == "matvec" ? std::string() : op; }

std::string shape_text(std::int64_t rows, std::int64_t cols) { return fmt::format("{}x{}", rows, cols); }

std::string pct_text(double v) { return std::isfinite(v) ? fmt::format("{:.0f}%", v) : "-"; }

std::string pct_range(double med, double lo, double hi, int n) {
  if (!std::isfinite(med)) return "-";
  if (n < 2) return pct_text(med);
  return fmt::format("{:.0f}% ({:.0f}-{:.0f}%)", med, lo, hi);
}

std::string tok_s(double v) { return std::isfinite(v) && v > 0 ? fmt::format("{:.1f}", v) : "not measured"; }

std::string plural(long n, const char* one, const char* many) { return fmt::format("{} {}", n, n == 1 ? one : many); }

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

std::string peer_label(const std::string& weight_type, const std::string& op, const std::string& backend) {
  std::string s = weight_type;
  if (!op.empty() && op != "matvec") s += " " + op;
  if (!backend.empty() && backend != "cpu") s += " (" + backend + ")";
  return s;
}

std::string ratio_range(double geomean, double lo, double hi, int n) {
  if (!std::isfinite(geomean)) return "-";
  if (n < 2) return fmt::format("{:.2f}", geomean);
  return fmt::format("{:.2f} ({:.2f}-{:.2f})", geomean, lo, hi);
}

std::string markdown_table(const std::vector<std::string>& header, const std::vector<std::vector<std::string>>& rows) {
  std::vector<std::size_t> w(header.size());
  for (std::size_t c = 0; c < header.size(); ++c) {
    w[c] = header[c].size();
    for (const auto& r : rows) w[c] = std::max(w[c], r.at(c).size());
  }
  std::string out;
  auto line = [&](const std::vector<std::string>& r) {
    out += "|";
    for (std::size_t c = 0; c < r.size(); ++c) out += " " + r[c] + std::string(w[c] - r[c].size(), ' ') + " |";
    out += "\n";
  };
  line(header);
  out += "|";
  for (auto x : w) out += std::string(x + 2, '-') + "|";
  out += "\n";
  for (const auto& r : rows) line(r);
  return out;
}

namespace {

template <class T, class Fn>
bool several(const std::vector<T>& v, Fn fn) {
  std::set<std::string> seen;
  for (const auto& x : v) seen.insert(fn(x));
  return seen.size() > 1;
}

}  // namespace

std::string peer_point_table(const std::vector<PeerPoint>& points, const std::string& ggml_note) {
  const bool caches = several(points, [](const PeerPoint& p) { return p.cache; });
  const bool model_ops = std::any_of(points.begin(), points.end(), [](const PeerPoint& p) { return !p.model_op.empty(); });
  const bool ggml = ggml_note.empty();
  std::vector<std::string> header = {"weights", "shape"};
  if (model_ops) header.push_back("model ops");
  header.push_back("threads");
  if (caches) header.push_back("cache");
  for (const char* h : {"best qmvlab kernel", "us", "% of peak"}) header.push_back(h);
  if (ggml)
    for (const char* h : {"best ggml kernel", "us", "ggml/qmvlab time"}) header.push_back(h);
  std::vector<std::vector<std::string>> t;
  for (const PeerPoint& p : points) {
    std::vector<std::string> r = {peer_label(p.weight_type, p.op, p.backend), shape_text(p.rows, p.cols)};
    if (model_ops) r.push_back(p.model_op);
    r.push_back(std::to_string(p.threads));
    if (caches) r.push_back(p.cache);
    r.push_back(p.qmv.found ? p.qmv.kernel : "-");
    r.push_back(p.qmv.found ? fmt::format("{:.1f}", p.qmv.time_us) : "-");
    r.push_back(p.qmv.found ? pct_text(p.qmv.peak_pct) : "-");
    if (ggml) {
      r.push_back(p.ggml.found ? p.ggml.kernel : "-");
      r.push_back(p.ggml.found ? fmt::format("{:.1f}", p.ggml.time_us) : "-");
      r.push_back(std::isfinite(p.ratio) ? fmt::format("{:.2f}", p.ratio) : "-");
    }
    t.push_back(std::move(r));
  }
  return markdown_table(header, t);
}

std::string peer_group_table(const std::vector<PeerGroup>& groups, const std::string& ggml_note) {
  const bool caches = several(groups, [](const PeerGroup& g) { return g.cache; });
  const bool ggml = ggml_note.empty();
  std::vector<std::string> header = {"weights", "threads"};
  if (caches) header.push_back("cache");
  for (const char* h : {"best qmvlab kernel (shapes)", "% of peak"}) header.push_back(h);
  if (ggml)
    for (const char* h : {"best ggml kernel (shapes)", "ggml/qmvlab time"}) header.push_back(h);
  std::vector<std::vector<std::string>> t;
  for (const PeerGroup& g : groups) {
    std::vector<std::string> r = {peer_label(g.weight_type, g.op, g.backend), std::to_string(g.threads)};
    if (caches) r.push_back(g.cache);
    r.push_back(g.qmv_shapes ? fmt::format("{} ({}/{})", g.qmv_kernel, g.qmv_kernel_wins, g.qmv_shapes) : "-");
    r.push_back(pct_range(g.pct_median, g.pct_min, g.pct_max, g.qmv_shapes));
    if (ggml) {
      r.push_back(g.ggml_shapes ? fmt::format("{} ({}/{})", g.ggml_kernel, g.ggml_kernel_wins, g.ggml_shapes) : "-");
      r.push_back(ratio_range(g.ratio_geomean, g.ratio_min, g.ratio_max, g.ratio_shapes));
    }
    t.push_back(std::move(r));
  }
  return markdown_table(header, t);
}

// ---------------------------------------------------------------------------------------
// The results folder.

namespace {

constexpr const char* kPeak = "peak.csv";
// The full main job's sweep, else the quick main job's (scripts/main.sh).
constexpr const char* kSweep = "default.csv";
constexpr const char* kQuickSweep = "quick.csv";
constexpr const char* kCheck = "check.csv";
constexpr const char* kPeerDecode = "decode-vs-llamacpp.csv";
constexpr const char* kDecode = "decode.csv";

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

namespace {

constexpr std::size_t kMaxReasonLines = 8;

std::string not_measured(const std::string& file) { return fmt::format("not measured (no {})", file); }

std::string context_lines(const ResultsSummary& s, bool md) {
  std::string out;
  const std::string machine = s.machine.empty() ? fs::path(s.dir).filename().string() : s.machine;
  out += fmt::format("machine {}{}{}\n", md ? "`" + machine + "`" : machine,
                     s.cpu_model.empty() ? "" : " (" + s.cpu_model + ")",
                     s.git_commit.empty() ? "" : ", qmvlab commit " + s.git_commit);
  if (md) out += "\n";
  std::string peak;
  if (!s.has_peak) peak = not_measured(kPeak);
  for (const PeakRow& p : s.peaks) {
    peak += peak.empty() ? "" : ", ";
    std::string loop = p.read_loop.empty() ? "" : ", " + p.read_loop;
    if (p.huge_page_pct >= 0) loop += fmt::format(", {:.0f}% in huge pages", p.huge_page_pct);
    peak += p.device == "cpu"
                ? fmt::format("{:.2f} GB/s ({}{})", p.gbps_best, plural(p.threads, "thread", "threads"), loop)
                : fmt::format("{:.2f} GB/s ({}{})", p.gbps_best, p.device, loop);
  }
  std::string peer;
  if (!s.peer.empty())
    peer = s.peer;
  else if (s.peer_rows_ok > 0)
    peer = "ggml (version not recorded; no " + std::string(kPeerDecode) + ")";
  else
    peer = "none measured";
  out += fmt::format("peak read {}; peer: {}\n", peak, peer);
  return out;
}

std::string kernels_section(const ResultsSummary& s, bool md) {
  std::string out = md ? "\n## Kernels\n\n" : "\n## Kernels\n";
  if (!s.has_sweep) return out + not_measured(s.sweep_name) + "\n";
  out += fmt::format("{}{}{}: {} rows ({} ok); summarised: the {} rows, {} points (weight type x shape x threads){}\n",
                     md ? "`" : "", s.sweep_name, md ? "`" : "", s.sweep_rows, s.sweep_ok, s.cache.empty() ? "timed" : s.cache,
                     s.points.size(),
                     s.other_cache_rows ? fmt::format("; {} other rows left out", s.other_cache_rows) : "");
  if (md) out += "\n";
  out += "Per weight type and threads, over the shapes: the qmvlab kernel fastest on most of them\n"
         "(shapes won / shapes), the fastest qmvlab kernel's share of the read peak (median, min-max),\n";
  out += s.peer_rows_ok ? "ggml's fastest, and ggml time / qmvlab time (geometric mean, min-max; >1: qmvlab faster).\n"
                        : "and ggml's where measured.\n";
  out += "Times include the activation's quantization where the harness does it before the call.\n";
  if (md) out += "\n";
  if (s.act_quant_missing)
    out += fmt::format("{} of the fastest qmvlab kernels have no quantization time recorded ({} predates\n"
                       "the act_quant columns, or the harness did not time it): their times leave it out.\n{}",
                       s.act_quant_missing, s.sweep_name, md ? "\n" : "");
  const std::string note = s.peer_rows_ok ? ""
                           : s.peer_rows  ? "no ggml row was timed (see Skipped and failed)"
                                          : "no ggml rows (peer kernels not built)";
  if (!note.empty()) out += fmt::format("ggml: {}.\n{}", note, md ? "\n" : "");
  if (s.groups.empty()) return out + "no timed rows\n";
  out += peer_group_table(s.groups, note);
  if (md) {
    out += "\n### Per shape\n\n";
    out += peer_point_table(s.points, note);
  }
  return out;
}

// The default plan by name; another as its rules, cut short on a screen.
std::string short_plan(const std::string& plan, bool md) {
  if (plan == "*=auto") return "default (auto)";
  if (md || plan.size() <= 44) return plan;
  return plan.substr(0, 41) + "...";
}

std::string decode_section(const ResultsSummary& s, bool md) {
  std::string out = md ? "\n## Decode\n\n" : "\n## Decode\n";
  auto pct = [](double v) { return std::isfinite(v) ? fmt::format("{:.0f}%", v) : std::string("-"); };
  if (s.has_peer_decode) {
    out += fmt::format("against llama.cpp{} ({}): qmvlab/llama.cpp > 1: qmvlab faster\n",
                       s.peer.empty() ? "" : ", " + s.peer, kPeerDecode);
    if (md) out += "\n";
    std::vector<std::vector<std::string>> t;
    for (const Decode& d : s.peer_decode)
      t.push_back({d.model, d.weights, std::to_string(d.threads), tok_s(d.qmv_tok_s),
                   fmt::format("{} / {}", tok_s(d.llama_tok_s), tok_s(d.llama_norepack_tok_s)),
                   std::isfinite(d.ratio) ? fmt::format("{:.2f}", d.ratio) : "-",
                   std::isfinite(d.roofline_tok_s) ? fmt::format("{:.1f}", d.roofline_tok_s) : "-",
                   fmt::format("{} / {}", pct(d.qmv_roofline_pct), pct(d.llama_roofline_pct))});
    out += markdown_table({"model", "weights", "threads", "qmvlab tok/s", "llama.cpp tok/s (repack on / off)",
                           "qmvlab/llama.cpp", "roofline tok/s", "% of roofline (qmvlab / llama.cpp)"},
                          t);
    // The plans side by side (the default one against what `tune` found), when measured.
    if (!s.has_decode) return out;
  } else {
    out += fmt::format("against llama.cpp: {}\n", not_measured(kPeerDecode));
    if (!s.has_decode) return out + fmt::format("qmvlab alone: {}\n", not_measured(kDecode));
  }
  out += fmt::format("{}qmvlab's plans ({}): medians over the runs of each plan\n", md ? "\n" : "", kDecode);
  if (md) out += "\n";
  std::vector<std::vector<std::string>> t;
  // Each plan's median against the default plan's, same model and threads.
  auto default_tok_s = [&](const Decode& d) {
    for (const Decode& o : s.decode)
      if (o.model == d.model && o.threads == d.threads && o.plan == "*=auto") return o.qmv_tok_s;
    return kNaN;
  };
  for (const Decode& d : s.decode) {
    const double base = default_tok_s(d);
    t.push_back({d.model, short_plan(d.plan, md), std::to_string(d.threads), std::to_string(d.runs),
                 tok_s(d.qmv_tok_s), usable(base) ? fmt::format("{:.2f}", d.qmv_tok_s / base) : "-",
                 std::isfinite(d.roofline_tok_s) ? fmt::format("{:.1f}", d.roofline_tok_s) : "-",
                 pct(d.qmv_roofline_pct)});
  }
  out += markdown_table({"model", "plan", "threads", "runs", "tok/s", "/ default", "roofline tok/s", "% of roofline"}, t);
  return out;
}

std::string skipped_section(const ResultsSummary& s, bool md) {
  std::string out = md ? "\n## Skipped and failed\n\n" : "\n## Skipped and failed\n";
  std::vector<std::string> lines;
  if (!s.has_sweep) lines.push_back(fmt::format("sweep: {}", not_measured(s.sweep_name)));
  if (!s.has_check)
    lines.push_back(fmt::format("check: {}", not_measured(kCheck)));
  else if (s.check_failed_pairs == 0)
    lines.push_back(fmt::format("{}: {} ({} rows), all passed", kCheck,
                                plural(s.check_pairs, "kernel x shape pair", "kernel x shape pairs"), s.check_rows));
  else
    lines.push_back(fmt::format("{}: {} of {} failed", kCheck, s.check_failed_pairs,
                                plural(s.check_pairs, "kernel x shape pair", "kernel x shape pairs")));
  std::size_t shown = 0;
  int rest_lines = 0, rest_count = 0;
  for (const auto& r : s.skipped) {
    if (shown++ < kMaxReasonLines) {
      lines.push_back(r.what);
    } else {
      ++rest_lines;
      rest_count += r.count;
    }
  }
  if (rest_lines) lines.push_back(fmt::format("{} more reasons ({} points or pairs): see the CSVs", rest_lines, rest_count));
  for (const auto& l : lines) out += "- " + l + "\n";
  return out;
}

std::string plot_caption(const std::string& dir, const std::string& file) {
  const std::string stem = fs::path(file).stem().string();
  if (fs::exists(fs::path(dir) / (stem + ".csv"))) return fmt::format("{}: GB/s per kernel and shape", stem);
  static const std::vector<std::pair<std::string, std::string>> kinds = {
      {"-leaderboard", "share of the read peak per kernel and shape"},
      {"-roofline", "GB/s against bytes per call, under the measured peak"},
      {"-accuracy", "end-to-end NMSE against share of the peak"},
      {"-peer", "ggml time / qmvlab time per weight type"}};
  for (const auto& [suffix, what] : kinds)
    if (stem.size() > suffix.size() && stem.compare(stem.size() - suffix.size(), suffix.size(), suffix) == 0)
      return fmt::format("{}: {}", stem, what);
  return stem;
}

}  // namespace

std::string summary_text(const ResultsSummary& s) {
  std::string out = fmt::format("# qmvlab report: {}\n", s.dir);
  out += context_lines(s, false);
  out += kernels_section(s, false);
  out += decode_section(s, false);
  out += skipped_section(s, false);
  return out;
}

std::string summary_markdown(const ResultsSummary& s, const std::string& markdown_path) {
  std::string out = fmt::format("# qmvlab results: {}\n\n", s.machine.empty() ? s.dir : s.machine);
  out += fmt::format("Written by `qmvlab report --summary {}` from the CSVs in that folder.\n\n", s.dir);
  out += context_lines(s, true);
  out += kernels_section(s, true);
  out += decode_section(s, true);
  out += skipped_section(s, true);
  if (!s.plots.empty()) {
    out += "\n## Plots\n";
    std::error_code ec;
    const fs::path from = fs::absolute(fs::path(markdown_path), ec).parent_path();
    for (const auto& p : s.plots) {
      const fs::path png = fs::absolute(fs::path(s.dir) / p, ec);
      fs::path rel = png.lexically_relative(from);
      if (rel.empty()) rel = png;
      out += fmt::format("\n![{}]({})\n", plot_caption(s.dir, p), rel.generic_string());
    }
  }
  return out;
}

}  // namespace qmv
