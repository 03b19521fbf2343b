// The results summary as text: the peer tables and the one-screen report (plain or
// Markdown) of a ResultsSummary that summary.cpp read.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "harness/summary.h"
#include "harness/summary_detail.h"

namespace qmv {
namespace {

namespace fs = std::filesystem;
using namespace summary_detail;
using Decode = ResultsSummary::Decode;

std::string pct_text(double v) { return std::isfinite(v) ? fmt::format("{:.0f}%", v) : "-"; }

std::string pct_range(double med, double lo, double hi, int n) {
  if (!std::isfinite(med)) return "-";
  if (n < 2) return pct_text(med);
  return fmt::format("{:.0f}% ({:.0f}-{:.0f}%)", med, lo, hi);
}

}  // namespace

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
