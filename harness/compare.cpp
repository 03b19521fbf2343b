#include "harness/output_file.h"
#include "harness/compare.h"

#include <fmt/format.h>

#include "harness/fccp.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <string_view>
#include <tuple>

#include "harness/csv.h"
#include "harness/table.h"
#include "harness/machine.h"
#include "kernels/former_names.h"

namespace qmv {
namespace {

// csv_number's checks (whole, finite, not negative), as compare's error.
template <class T>
T parse_number(const std::string& text, const std::string& path, unsigned line, const char* column) {
  try {
    return csv_number<T>(text, path, line, column);
  } catch (const std::runtime_error& e) {
    throw CompareError(e.what());
  }
}

// The shape, with the vectors per call of a batch row: rows of one kernel and shape at
// different n are different points.
std::string shape_text(const ResultRow& r) {
  return r.n > 1 ? fmt::format("{}x{} n={}", r.rows, r.cols, r.n) : fmt::format("{}x{}", r.rows, r.cols);
}

// A short list for messages: the first few items and how many more.
std::string short_list(const std::set<std::string>& items) {
  std::string s;
  int n = 0;
  for (const auto& x : items) {
    if (n == 6) return s + fmt::format(" and {} more", items.size() - 6);
    s += (n++ ? ", " : "") + x;
  }
  return s.empty() ? "none" : s;
}

template <class Fn>
std::set<std::string> values_of(const ResultsFile& f, Fn fn) {
  std::set<std::string> out;
  for (const auto& r : f.rows) out.insert(fn(r));
  return out;
}

bool intersects(const std::set<std::string>& a, const std::set<std::string>& b) {
  for (const auto& x : a)
    if (b.count(x)) return true;
  return false;
}

// Why nothing matched: the first property no row of A shares with a row of B.
std::string no_match_reason(const ResultsFile& a, const ResultsFile& b, CompareBy by) {
  struct Dimension {
    const char* name;
    std::string (*get)(const ResultRow&);
  };
  const std::vector<Dimension> kernel_dims = {
      {"kernel", [](const ResultRow& r) { return r.kernel; }},
      {"shape", [](const ResultRow& r) { return shape_text(r); }},
      {"thread count", [](const ResultRow& r) { return std::to_string(r.threads); }},
      {"cache mode", [](const ResultRow& r) { return r.cache; }}};
  const std::vector<Dimension> shape_dims = {
      {"weight type", [](const ResultRow& r) { return r.weight_type; }},
      {"op", [](const ResultRow& r) { return r.op; }},
      {"shape", [](const ResultRow& r) { return shape_text(r); }},
      {"cache mode", [](const ResultRow& r) { return r.cache; }}};
  const auto& dims = by == CompareBy::Kernel ? kernel_dims : shape_dims;
  for (const auto& d : dims) {
    if (std::string_view(d.name) == "op" && !(a.has_op && b.has_op)) continue;
    const auto va = values_of(a, d.get), vb = values_of(b, d.get);
    if (!intersects(va, vb))
      return fmt::format("no {} is in both (A: {}; B: {})", d.name, short_list(va), short_list(vb));
  }
  return by == CompareBy::Kernel
             ? "no row has the same kernel, shape, threads and cache in both (try --by shape)"
             : "no row has the same shape, weight type, op and cache in both";
}

using Key = std::tuple<std::string, std::string, std::int64_t, std::int64_t, int, std::string, int, std::string>;

// Key in report order: weight type, op, shape, vectors per call, then kernel and
// threads (empty when comparing by shape), cache.
Key key_of(const ResultRow& r, CompareBy by, bool use_op) {
  const std::string op = use_op ? r.op : "";
  if (by == CompareBy::Shape) return {r.weight_type, op, r.rows, r.cols, r.n, "", 0, r.cache};
  return {r.weight_type, op, r.rows, r.cols, r.n, r.kernel, r.threads, r.cache};
}

struct Best {
  ResultRow row;
  int candidates = 0;
};

std::map<Key, Best> best_per_key(const ResultsFile& f, CompareBy by, bool use_op, int* peer_rows) {
  std::map<Key, Best> out;
  for (const auto& r : f.rows) {
    if (by == CompareBy::Shape && is_peer_kernel(r.kernel)) {
      ++*peer_rows;
      continue;
    }
    Best& b = out[key_of(r, by, use_op)];
    if (b.candidates++ == 0 || r.gbps_median > b.row.gbps_median) b.row = r;
  }
  return out;
}

bool usable(double v) { return std::isfinite(v) && v > 0; }

}  // namespace

ResultsFile read_results_csv(const std::string& path) {
  if (const std::string problem = input_file_problem(path); !problem.empty())
    throw CompareError(fmt::format("{}: {}", path, problem));
  {
    std::ifstream probe(path);
    std::string first;
    if (!std::getline(probe, first) || first.empty())
      throw CompareError(fmt::format("{}: empty file, not a results CSV", path));
  }
  ResultsFile f;
  f.path = path;
  std::optional<io::CSVReader<20, io::trim_chars<' ', '\t'>, io::double_quote_escape<',', '"'>>> reader;
  try {
    auto& in = reader.emplace(path);
    in.read_header(io::ignore_extra_column | io::ignore_missing_column, "kernel", "weight_type",
                   "backend", "rows", "cols", "threads", "cache", "time_median_us", "gbps_median",
                   "peak_pct", "status", "machine", "cpu_model", "gpu", "git_commit", "op", "act_format",
                   "act_quant", "act_quant_median_us", "n");
    std::string missing;
    for (const char* c : {"kernel", "weight_type", "backend", "rows", "cols", "threads", "cache",
                          "time_median_us", "gbps_median", "peak_pct"})
      if (!in.has_column(c)) missing += (missing.empty() ? "" : ", ") + std::string(c);
    if (!missing.empty())
      throw CompareError(fmt::format(
          "{}: not a results CSV (a bench or sweep CSV): missing column(s) {}", path, missing));
    const bool has_status = in.has_column("status");
    f.has_op = in.has_column("op");

    std::string kernel, weight, backend, rows, cols, threads, cache, time, gbps, pct, status;
    std::string machine, cpu_model, gpu, commit, op, act_format, act_quant, act_quant_us, vectors;
    bool first = true;
    std::set<std::string> renamed;  // former kernel names the file uses
    while (in.read_row(kernel, weight, backend, rows, cols, threads, cache, time, gbps, pct, status,
                       machine, cpu_model, gpu, commit, op, act_format, act_quant, act_quant_us, vectors)) {
      const unsigned line = in.get_file_line();
      if (has_status && !known_sweep_status(status))
        throw CompareError(fmt::format("{}: line {}: column status: '{}' is not a sweep status ({})", path, line,
                                       one_line(status), kSweepStatuses));
      if (has_status && status != "ok") {
        ++f.skipped_not_ok;
        continue;
      }
      if (first) {
        f.machine = canonical_machine(machine), f.cpu_model = cpu_model, f.gpu = gpu, f.git_commit = commit;
        first = false;
      }
      ResultRow r;
      // Rows written before the kernels were renamed match their kernels' current names.
      const std::string_view current = current_kernel_name(kernel);
      if (current != kernel) renamed.emplace(kernel);
      r.kernel = std::string(current), r.op = op, r.weight_type = weight, r.backend = backend, r.cache = cache;
      r.rows = parse_number<std::int64_t>(rows, path, line, "rows");
      r.cols = parse_number<std::int64_t>(cols, path, line, "cols");
      r.threads = parse_number<int>(threads, path, line, "threads");
      r.time_median_us = parse_number<double>(time, path, line, "time_median_us");
      r.gbps_median = parse_number<double>(gbps, path, line, "gbps_median");
      r.peak_pct = parse_number<double>(pct, path, line, "peak_pct");
      r.act_format = act_format, r.act_quant = act_quant;
      if (!act_quant_us.empty())
        r.act_quant_median_us = parse_number<double>(act_quant_us, path, line, "act_quant_median_us");
      // Files from before the column hold one vector per call.
      if (!vectors.empty()) r.n = parse_number<int>(vectors, path, line, "n");
      if (r.n < 1) throw CompareError(fmt::format("{}: line {}: column n: {} vectors per call", path, line, r.n));
      if (r.kernel.empty()) throw CompareError(fmt::format("{}: line {}: empty kernel name", path, line));
      f.rows.push_back(std::move(r));
    }
    if (!renamed.empty())
      fmt::print(stderr, "compare: note: {} names {} kernel(s) by their former names (e.g. '{}' is now '{}'); "
                         "they are compared under their current names\n",
                 path, renamed.size(), *renamed.begin(), current_kernel_name(*renamed.begin()));
  } catch (const io::error::base& e) {
    throw CompareError(csv_read_error(path, reader ? reader->get_file_line() : 0, e));
  }
  return f;
}

Metric parse_metric(const std::string& name) {
  if (name == "gbps") return Metric::Gbps;
  if (name == "time") return Metric::Time;
  if (name == "peak_pct") return Metric::PeakPct;
  throw CompareError(fmt::format("unknown metric '{}' (known: gbps, time, peak_pct)", name));
}

CompareBy parse_compare_by(const std::string& name) {
  if (name == "kernel") return CompareBy::Kernel;
  if (name == "shape") return CompareBy::Shape;
  throw CompareError(fmt::format("unknown --by '{}' (known: kernel, shape)", name));
}

const char* metric_label(Metric m) {
  switch (m) {
    case Metric::Gbps: return "GB/s";
    case Metric::Time: return "median us";
    case Metric::PeakPct: return "% of peak";
  }
  return "";
}

double metric_value(const ResultRow& r, Metric m) {
  switch (m) {
    case Metric::Gbps: return r.gbps_median;
    case Metric::Time: return r.time_median_us;
    case Metric::PeakPct: return r.peak_pct;
  }
  return 0;
}

Comparison compare_results(const ResultsFile& a, const ResultsFile& b, CompareBy by, Metric metric) {
  for (const ResultsFile* f : {&a, &b})
    if (f->rows.empty())
      throw CompareError(fmt::format("{}: no rows to compare{}", f->path,
                                     f->skipped_not_ok ? fmt::format(" ({} rows without status ok)", f->skipped_not_ok)
                                                       : std::string()));
  Comparison c;
  c.by = by;
  c.metric = metric;
  const bool use_op = a.has_op && b.has_op;
  const auto best_a = best_per_key(a, by, use_op, &c.peer_rows_a), best_b = best_per_key(b, by, use_op, &c.peer_rows_b);
  for (const auto& [key, x] : best_a) {
    if (by == CompareBy::Kernel) c.duplicates_a += x.candidates - 1;
    const auto it = best_b.find(key);
    if (it == best_b.end()) {
      ++c.unmatched_a;
      continue;
    }
    ComparedRow m;
    m.a = x.row, m.b = it->second.row;
    m.candidates_a = x.candidates, m.candidates_b = it->second.candidates;
    m.value_a = metric_value(m.a, metric), m.value_b = metric_value(m.b, metric);
    // Time is better when smaller: A/B keeps "> 1 means B is better" for every metric.
    m.ratio = !usable(m.value_a) || !usable(m.value_b) ? NAN
              : metric == Metric::Time                 ? m.value_a / m.value_b
                                                       : m.value_b / m.value_a;
    c.matched.push_back(m);
  }
  for (const auto& [key, y] : best_b) {
    if (by == CompareBy::Kernel) c.duplicates_b += y.candidates - 1;
    if (!best_a.count(key)) ++c.unmatched_b;
  }
  if (c.matched.empty())
    throw CompareError(fmt::format("{} and {}: no rows match: {}", a.path, b.path, no_match_reason(a, b, by)));
  double log_sum = 0;
  int n = 0;
  for (const auto& m : c.matched)
    if (std::isfinite(m.ratio)) log_sum += std::log(m.ratio), ++n;
  if (n == 0)
    throw CompareError(fmt::format("{} and {}: no matched row has a positive {} on both sides", a.path,
                                   b.path, metric_label(metric)));
  c.geomean = std::exp(log_sum / n);
  return c;
}

namespace {

std::string describe(const char* side, const ResultsFile& f) {
  std::string where = f.machine.empty() ? "unknown machine" : f.machine;
  std::string hw = f.cpu_model;
  if (!f.gpu.empty() && f.gpu != "none") hw += (hw.empty() ? "" : ", ") + f.gpu;
  if (!hw.empty()) where += " (" + hw + ")";
  if (!f.git_commit.empty()) where += ", commit " + f.git_commit;
  std::string skipped =
      f.skipped_not_ok ? fmt::format("; {} rows without status ok ignored", f.skipped_not_ok) : std::string();
  return fmt::format("{}: {}: {}{}", side, f.path, where, skipped);
}

std::string format_value(double v, Metric m) {
  switch (m) {
    case Metric::Gbps: return fmt::format("{:.2f}", v);
    case Metric::Time: return fmt::format("{:.1f}", v);
    case Metric::PeakPct: return fmt::format("{:.1f}%", v);
  }
  return "";
}

std::string ratio_heading(Metric m) {
  switch (m) {
    case Metric::Gbps: return "B/A (>1: B faster)";
    case Metric::Time: return "A/B (>1: B faster)";
    case Metric::PeakPct: return "B/A (>1: B nearer its peak)";
  }
  return "";
}

std::string with_threads(const ResultRow& r) { return fmt::format("{} ({}t)", r.kernel, r.threads); }

}  // namespace

void print_comparison(const ResultsFile& a, const ResultsFile& b, const Comparison& c) {
  fmt::print("{}\n{}\n", describe("A", a), describe("B", b));
  const std::string label = metric_label(c.metric);
  std::vector<std::vector<std::string>> t;
  int without_ratio = 0;
  for (const auto& m : c.matched) {
    const std::string ratio = std::isfinite(m.ratio) ? fmt::format("{:.3f}", m.ratio) : "n/a";
    without_ratio += !std::isfinite(m.ratio);
    const std::string va = format_value(m.value_a, c.metric), vb = format_value(m.value_b, c.metric);
    if (c.by == CompareBy::Kernel)
      t.push_back({m.a.kernel, shape_text(m.a), std::to_string(m.a.threads), m.a.cache, va, vb, ratio});
    else
      t.push_back({m.a.op.empty() || m.a.op == "matvec" ? m.a.weight_type : m.a.weight_type + " " + m.a.op,
                   shape_text(m.a), m.a.cache, with_threads(m.a), va, with_threads(m.b), vb, ratio});
  }
  if (c.by == CompareBy::Kernel) {
    fmt::print("matched by kernel, shape (with the vectors per call, n), threads and cache\n\n");
    print_table({"kernel", "shape", "threads", "cache", "A " + label, "B " + label, ratio_heading(c.metric)}, t);
  } else {
    fmt::print("matched by shape (with n), weight type, op and cache; each side's fastest row (max GB/s) per "
               "match\n\n");
    print_table({"weights", "shape", "cache", "A kernel", "A " + label, "B kernel", "B " + label,
                 ratio_heading(c.metric)},
                t);
  }
  const std::string direction = c.metric == Metric::Time ? "A/B" : "B/A";
  const char* verdict = c.geomean > 1 ? (c.metric == Metric::PeakPct ? "B nearer its peak" : "B faster")
                        : c.geomean < 1 ? (c.metric == Metric::PeakPct ? "A nearer its peak" : "A faster")
                                        : "equal";
  fmt::print("\ngeometric mean of {}: {:.3f} ({}) over {} matched rows\n", direction, c.geomean, verdict,
             c.matched.size() - without_ratio);
  fmt::print("matched {}; unmatched: {} only in A, {} only in B", c.matched.size(), c.unmatched_a, c.unmatched_b);
  if (without_ratio) fmt::print("; {} matched without a positive value on both sides", without_ratio);
  if (c.duplicates_a || c.duplicates_b)
    fmt::print("; repeated keys (fastest kept): {} in A, {} in B", c.duplicates_a, c.duplicates_b);
  if (c.peer_rows_a || c.peer_rows_b)
    fmt::print("; ggml rows left out of the match by shape: {} in A, {} in B", c.peer_rows_a, c.peer_rows_b);
  fmt::print("\n");
}

namespace {

std::vector<TimedRow> peer_input(const ResultsFile& f) {
  std::vector<TimedRow> out;
  out.reserve(f.rows.size());
  for (const ResultRow& r : f.rows) {
    if (r.n != 1) continue;  // the peer ratio is of one vector per call, as decode's
    TimedRow t;
    t.kernel = r.kernel, t.op = r.op.empty() ? "matvec" : r.op, t.weight_type = r.weight_type;
    t.act_format = r.act_format, t.backend = r.backend, t.cache = r.cache;
    t.rows = r.rows, t.cols = r.cols, t.threads = r.threads;
    t.time_median_us = r.time_median_us, t.gbps_median = r.gbps_median;
    t.act_quant = r.act_quant, t.act_quant_median_us = r.act_quant_median_us;
    out.push_back(std::move(t));
  }
  return out;
}

bool has_peer(const ResultsFile& f) {
  return std::any_of(f.rows.begin(), f.rows.end(), [](const ResultRow& r) { return is_peer_kernel(r.kernel); });
}

}  // namespace

PeerComparison compare_peers(const ResultsFile& a, const ResultsFile& b) {
  PeerComparison p;
  p.peer_a = has_peer(a), p.peer_b = has_peer(b);
  if (!p.peer_a || !p.peer_b) return p;
  // Groups with a ratio, by weight type, op, backend and cache, then threads.
  using Kind = std::tuple<std::string, std::string, std::string, std::string>;
  auto groups = [](const ResultsFile& f) {
    std::map<Kind, std::map<int, PeerGroup>> out;
    for (PeerGroup& g : peer_groups(peer_points(peer_input(f))))
      if (g.ratio_shapes > 0) out[{g.weight_type, g.op, g.backend, g.cache}][g.threads] = std::move(g);
    return out;
  };
  const auto ga = groups(a), gb = groups(b);
  bool common_kind = false, common_threads = false;
  for (const auto& [kind, ta] : ga)
    if (const auto it = gb.find(kind); it != gb.end()) {
      common_kind = true;
      for (const auto& [threads, g] : ta) common_threads = common_threads || it->second.count(threads);
    }
  p.same_threads = common_threads || !common_kind;
  std::set<Kind> kinds;
  for (const auto& [k, v] : ga) kinds.insert(k);
  for (const auto& [k, v] : gb) kinds.insert(k);
  for (const Kind& kind : kinds) {
    const auto ia = ga.find(kind), ib = gb.find(kind);
    const std::map<int, PeerGroup> none;
    const auto& ta = ia == ga.end() ? none : ia->second;
    const auto& tb = ib == gb.end() ? none : ib->second;
    auto row = [&](int threads_a, int threads_b) {
      PeerComparison::Row r;
      std::tie(r.weight_type, r.op, r.backend, r.cache) = kind;
      r.threads_a = threads_a, r.threads_b = threads_b;
      if (threads_a) r.a = ta.at(threads_a);
      if (threads_b) r.b = tb.at(threads_b);
      p.only_a += threads_a && !threads_b;
      p.only_b += threads_b && !threads_a;
      p.rows.push_back(std::move(r));
    };
    if (p.same_threads) {
      std::set<int> threads;
      for (const auto& [t, g] : ta) threads.insert(t);
      for (const auto& [t, g] : tb) threads.insert(t);
      for (int t : threads) row(ta.count(t) ? t : 0, tb.count(t) ? t : 0);
    } else {
      row(ta.empty() ? 0 : ta.rbegin()->first, tb.empty() ? 0 : tb.rbegin()->first);
    }
  }
  return p;
}

void print_peer_comparison(const PeerComparison& p) {
  if (!p.peer_a && !p.peer_b) return;
  if (!p.peer_a || !p.peer_b) {
    fmt::print("\npeer ratio: only {} has ggml rows (the other was measured without the peer kernels)\n",
               p.peer_a ? "A" : "B");
    return;
  }
  fmt::print("\nwhere qmvlab stands against ggml on each side: ggml time / qmvlab time of the fastest kernels, "
             "geometric mean over that side's shapes (min-max), >1: qmvlab faster{}\n\n",
             p.same_threads ? "" : "; no thread count in common: each side's highest");
  std::vector<std::vector<std::string>> t;
  auto cell = [](const PeerGroup& g) {
    return g.ratio_shapes ? fmt::format("{} [{}]", ratio_range(g.ratio_geomean, g.ratio_min, g.ratio_max, g.ratio_shapes),
                                        g.ratio_shapes)
                          : std::string("-");
  };
  const bool caches = std::any_of(p.rows.begin(), p.rows.end(), [&](const auto& r) { return r.cache != p.rows.front().cache; });
  for (const auto& r : p.rows) {
    std::vector<std::string> row = {peer_label(r.weight_type, r.op, r.backend)};
    if (p.same_threads) {
      row.push_back(std::to_string(r.threads_a ? r.threads_a : r.threads_b));
    } else {
      row.push_back(r.threads_a ? std::to_string(r.threads_a) : "-");
      row.push_back(r.threads_b ? std::to_string(r.threads_b) : "-");
    }
    if (caches) row.push_back(r.cache);
    row.push_back(cell(r.a));
    row.push_back(cell(r.b));
    t.push_back(std::move(row));
  }
  std::vector<std::string> header = {"weights"};
  if (p.same_threads) {
    header.push_back("threads");
  } else {
    header.push_back("A threads");
    header.push_back("B threads");
  }
  if (caches) header.push_back("cache");
  header.push_back("A ggml/qmvlab time [shapes]");
  header.push_back("B ggml/qmvlab time [shapes]");
  fmt::print("{}", markdown_table(header, t));
  if (p.only_a || p.only_b)
    fmt::print("ratio on one side only: {} rows in A, {} in B\n", p.only_a, p.only_b);
}

}  // namespace qmv
