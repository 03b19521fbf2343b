#include "harness/output_file.h"
#include "harness/experiment.h"

#include <fmt/format.h>

#include "harness/fccp.h"
#include <toml++/toml.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <tuple>
#include <utility>

#include "harness/machine.h"
#include "kernels/availability.h"
#include "kernels/former_names.h"

namespace qmv {
namespace {

const std::vector<std::string> kKeys = {"name",  "description", "kernels",  "shapes", "threads",
                                        "cache", "repetitions", "min_time", "check",  "n"};

class Reader {
 public:
  Reader(const toml::table& root, std::string source) : root_(root), source_(std::move(source)) {}

  [[noreturn]] void fail(std::string_view key, const toml::source_region& where, const std::string& what) const {
    throw ExperimentError(fmt::format("{}:{}: key '{}': {}", source_, where.begin.line, key, what));
  }
  [[noreturn]] void fail(std::string_view key, const std::string& what) const {
    const toml::node* n = root_.get(key);
    if (n) fail(key, n->source(), what);
    throw ExperimentError(fmt::format("{}: key '{}': {}", source_, key, what));
  }

  const toml::node* get(std::string_view key, bool required) const {
    const toml::node* n = root_.get(key);
    if (!n && required) throw ExperimentError(fmt::format("{}: missing key '{}'", source_, key));
    return n;
  }

  // A non-empty array whose elements are each handed to `each` (with the element).
  template <class Fn>
  void array(std::string_view key, bool required, std::string_view element_kind, Fn each) const {
    const toml::node* n = get(key, required);
    if (!n) return;
    const toml::array* a = n->as_array();
    if (!a) fail(key, fmt::format("expected an array of {}", element_kind));
    if (a->empty()) fail(key, "empty array: nothing selected");
    for (const toml::node& e : *a) each(e);
  }

 private:
  const toml::table& root_;
  std::string source_;
};

bool valid_name(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-';
  });
}

}  // namespace

std::string exclusions_removed_all(std::string_view globs, const Registry& registry) {
  std::string include;
  std::vector<std::string> exclude;
  for (std::size_t start = 0; start <= globs.size();) {
    const std::size_t end = std::min(globs.find(',', start), globs.size());
    const std::string_view pattern = globs.substr(start, end - start);
    start = end + 1;
    if (pattern.size() > 1 && pattern.front() == '!') {
      exclude.emplace_back(pattern.substr(1));
    } else if (!pattern.empty() && pattern.front() != '!') {
      include += (include.empty() ? "" : ",") + std::string(pattern);
    }
  }
  if (exclude.empty()) return "";
  std::vector<std::string> matched;
  if (include.empty()) {
    for (const KernelSpec& k : registry.all()) matched.push_back(k.name);
  } else {
    for (const KernelSpec* k : registry.select(include)) matched.push_back(k->name);
  }
  if (matched.empty()) return "";
  std::string removing;
  for (const std::string& x : exclude)
    if (std::any_of(matched.begin(), matched.end(), [&](const std::string& n) { return glob_match_any(x, n); }))
      removing += (removing.empty() ? "'!" : "', '!") + x;
  const bool several = removing.find(',') != std::string::npos;
  const std::string exclusions = fmt::format("the exclusion{} {}'", several ? "s" : "", removing);
  if (include.empty()) return fmt::format("{} {} every kernel: none is left", exclusions, several ? "remove" : "removes");
  constexpr std::size_t kNamed = 4;
  std::string names;
  for (std::size_t i = 0; i < std::min(matched.size(), kNamed); ++i) names += (i ? ", " : "") + matched[i];
  if (matched.size() > kNamed) names += fmt::format(", ... ({} in all)", matched.size());
  return fmt::format("'{}' matches {}, and {} {} {}: no kernel is left", include, names, exclusions,
                     several ? "remove" : "removes", matched.size() == 1 ? "it" : "them all");
}

Experiment parse_experiment(std::string_view text, const std::string& source, const Registry& registry) {
  toml::table root;
  try {
    root = toml::parse(text, source);
  } catch (const toml::parse_error& e) {
    throw ExperimentError(fmt::format("{}:{}: {}", source, e.source().begin.line, e.description()));
  }
  const Reader r(root, source);
  for (const auto& [key, node] : root)
    if (std::find(kKeys.begin(), kKeys.end(), key.str()) == kKeys.end()) {
      std::string known;
      for (const auto& k : kKeys) known += (known.empty() ? "" : ", ") + k;
      r.fail(key.str(), key.source(), fmt::format("unknown key (known: {})", known));
    }

  Experiment e;
  e.source = source;
  const auto name = r.get("name", true)->value<std::string>();
  if (!name || !valid_name(*name))
    r.fail("name", "expected a string of letters, digits, '.', '_' or '-' (it names the results file)");
  e.name = *name;
  if (const toml::node* d = r.get("description", false)) {
    if (!d->is_string()) r.fail("description", "expected a string");
    e.description = *d->value<std::string>();
  }

  r.array("kernels", true, "kernel-name globs", [&](const toml::node& n) {
    const auto glob = n.value<std::string>();
    if (!n.is_string() || glob->empty()) r.fail("kernels", n.source(), "expected a kernel-name glob string");
    e.kernel_globs.push_back(*glob);
  });
  std::string globs;
  for (const auto& g : e.kernel_globs) globs += (globs.empty() ? "" : ",") + g;
  for (const std::string& x : registry.unmatched_exclusions(globs))
    r.fail("kernels", fmt::format("'{}' excludes no kernel (see `qmvlab list`)", x));
  if (registry.select(globs).empty()) {
    if (const std::string why = exclusions_removed_all(globs, registry); !why.empty()) r.fail("kernels", why);
    r.fail("kernels", fmt::format("no kernel matches '{}' (see `qmvlab list`)", globs));
  }

  r.array("shapes", true, "preset names or \"ROWSxCOLS[:OP]\" strings", [&](const toml::node& n) {
    if (!n.is_string()) r.fail("shapes", n.source(), "expected a preset name or \"ROWSxCOLS[:OP]\" string");
    try {
      for (const TaggedShape& s : parse_tagged_shapes(*n.value<std::string>())) {
        auto it = std::find_if(e.shapes.begin(), e.shapes.end(),
                               [&](const TaggedShape& t) { return t.shape == s.shape; });
        if (it == e.shapes.end()) {
          e.shapes.push_back(s);
        } else if (!s.ops.empty()) {
          // A shape listed again (two models share it) keeps every op tag once.
          std::string ops = it->ops;
          for (std::size_t a = 0; a <= s.ops.size();) {
            std::size_t b = s.ops.find(',', a);
            if (b == std::string::npos) b = s.ops.size();
            const std::string op = s.ops.substr(a, b - a);
            if (("," + ops + ",").find("," + op + ",") == std::string::npos) ops += (ops.empty() ? "" : ",") + op;
            a = b + 1;
          }
          it->ops = ops;
        }
      }
    } catch (const std::invalid_argument& err) {
      r.fail("shapes", n.source(), err.what());
    }
  });

  if (r.get("threads", false)) {
    r.array("threads", false, "positive integers or \"all\"", [&](const toml::node& n) {
      int t = 0;
      if (n.is_string() && *n.value<std::string>() == "all") {
        t = machine_info().cores;
      } else if (n.is_integer() && *n.value<std::int64_t>() >= 1 && *n.value<std::int64_t>() <= 4096) {
        t = static_cast<int>(*n.value<std::int64_t>());
      } else {
        r.fail("threads", n.source(), "expected a positive integer (at most 4096) or \"all\"");
      }
      if (std::find(e.threads.begin(), e.threads.end(), t) == e.threads.end()) e.threads.push_back(t);
    });
  } else {
    e.threads = {1};
  }

  if (r.get("cache", false)) {
    r.array("cache", false, "\"cold\" or \"warm\"", [&](const toml::node& n) {
      const auto c = n.value<std::string>();
      if (!n.is_string() || (*c != "cold" && *c != "warm")) r.fail("cache", n.source(), "expected \"cold\" or \"warm\"");
      if (std::find(e.caches.begin(), e.caches.end(), *c) == e.caches.end()) e.caches.push_back(*c);
    });
  } else {
    e.caches = {"cold"};
  }

  if (r.get("n", false)) {
    e.vectors.clear();
    r.array("n", false, "vector counts from 1 to 64", [&](const toml::node& n) {
      if (!n.is_integer() || *n.value<std::int64_t>() < 1 || *n.value<std::int64_t>() > 64)
        r.fail("n", n.source(), "expected a count of activation vectors from 1 to 64");
      const int v = static_cast<int>(*n.value<std::int64_t>());
      if (std::find(e.vectors.begin(), e.vectors.end(), v) == e.vectors.end()) e.vectors.push_back(v);
    });
  }

  if (const toml::node* n = r.get("repetitions", false)) {
    if (!n->is_integer() || *n->value<std::int64_t>() < 1 || *n->value<std::int64_t>() > 1000)
      r.fail("repetitions", "expected an integer from 1 to 1000");
    e.repetitions = static_cast<int>(*n->value<std::int64_t>());
  }
  if (const toml::node* n = r.get("min_time", false)) {
    // An integer a double cannot hold exactly has no value<double>(); nan fails both tests.
    const auto s = n->value<double>();
    if (!n->is_number() || !s || !(*s >= 0.001 && *s <= 60))
      r.fail("min_time", "expected seconds per repetition, from 0.001 to 60");
    e.min_time_s = *s;
  }
  if (const toml::node* n = r.get("check", false)) {
    if (!n->is_boolean()) r.fail("check", "expected true or false");
    e.check = *n->value<bool>();
  }
  return e;
}

Experiment load_experiment(const std::string& path, const Registry& registry) {
  if (const std::string problem = input_file_problem(path); !problem.empty())
    throw ExperimentError(fmt::format("{}: {}", path, problem));
  std::ifstream in(path);
  if (!in) throw ExperimentError(fmt::format("{}: cannot open", path));
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_experiment(ss.str(), path, registry);
}

std::string point_key(const std::string& kernel, std::int64_t rows, std::int64_t cols, int threads,
                      const std::string& cache, int n) {
  return fmt::format("{}|{}x{}|{}|{}{}", kernel, rows, cols, threads, cache, n != 1 ? fmt::format("|n{}", n) : "");
}

std::string point_key(const SweepPoint& p) {
  return point_key(p.kernel->name, p.shape.shape.rows, p.shape.shape.cols, p.threads, p.cache, p.n);
}

bool point_less(const SweepPoint& a, const SweepPoint& b) {
  return std::tie(a.kernel->name, a.shape.shape.rows, a.shape.shape.cols, a.threads, a.cache, a.n) <
         std::tie(b.kernel->name, b.shape.shape.rows, b.shape.shape.cols, b.threads, b.cache, b.n);
}

std::vector<SweepPoint> expand_points(const Experiment& e, const Registry& registry) {
  std::string globs;
  for (const auto& g : e.kernel_globs) globs += (globs.empty() ? "" : ",") + g;
  std::vector<SweepPoint> out;
  for (const KernelSpec* k : registry.select(globs)) {
    const Availability av = availability(*k);
    for (const TaggedShape& s : e.shapes) {
      std::string reason;
      if (!av.available)
        reason = "unavailable: " + av.reason;
      else if (!k->supports(s.shape))
        reason = "shape not supported (needs " + k->shape_rule + ")";
      // A GPU kernel has no thread count: one point per shape and cache state.
      const std::vector<int> threads =
          k->backend == Backend::CPU ? e.threads : std::vector<int>{e.threads.front()};
      // A batch kernel for each count it takes, any other kernel with one vector.
      std::vector<int> counts;
      for (int n : e.vectors)
        if (n == 1 || (k->op == OpKind::MatVecBatch && n <= k->max_n)) counts.push_back(n);
      for (int t : threads)
        for (const std::string& c : e.caches)
          for (int n : counts) out.push_back({k, s, t, c, reason, n});
    }
  }
  return out;
}

Shard parse_shard(std::string_view spec) {
  const std::size_t slash = spec.find('/');
  Shard s{0, 0};
  auto num = [](std::string_view t, int& v) {
    if (t.empty() || t.size() > 6 || !std::all_of(t.begin(), t.end(), [](char c) { return c >= '0' && c <= '9'; }))
      return false;
    v = std::stoi(std::string(t));
    return true;
  };
  if (slash == std::string_view::npos || !num(spec.substr(0, slash), s.index) ||
      !num(spec.substr(slash + 1), s.count) || s.count < 1 || s.index < 1 || s.index > s.count)
    throw std::invalid_argument(
        fmt::format("bad shard '{}': expected I/N with 1 <= I <= N, e.g. --shard 2/4", spec));
  return s;
}

bool in_shard(const std::string& key, Shard shard) {
  // FNV-1a: fixed by its definition, unlike std::hash.
  std::uint64_t h = 14695981039346656037ull;
  for (unsigned char c : key) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return static_cast<int>(h % static_cast<std::uint64_t>(shard.count)) == shard.index - 1;
}

std::vector<std::string> sweep_fields(const RunContext& ctx, const std::string& experiment,
                                      const SweepPoint& p, const BenchRow* bench, const SweepCheck& check,
                                      const std::string& status, const std::string& reason) {
  BenchRow id;
  const KernelSpec& k = *p.kernel;
  id.kernel = k.name;
  id.op = std::string(to_string(k.op));
  id.weight_type = std::string(to_string(k.weight));
  id.act_format = std::string(to_string(k.act));
  id.backend = std::string(to_string(k.backend));
  id.rows = p.shape.shape.rows;
  id.cols = p.shape.shape.cols;
  id.threads = p.threads;
  id.cache = p.cache;
  id.n = p.n;
  std::vector<std::string> f = sweep_bench_fields(ctx, bench ? *bench : id);
  if (!bench) {
    // Nothing was timed: the measurement columns stay empty rather than read as zeros.
    const auto h = sweep_header();
    const auto first = std::find(h.begin(), h.end(), "tile_rows") - h.begin();
    const auto last = std::find(h.begin(), h.end(), "command") - h.begin();
    for (auto i = first; i < last; ++i) f[static_cast<std::size_t>(i)].clear();
  }
  auto num = [](double v) { return fmt::format("{}", v); };
  f.insert(f.end(), {experiment, p.shape.ops, status, reason, check.ran ? (check.passed ? "1" : "0") : "",
                     check.ran ? num(check.nmse_kernel) : "", check.ran ? num(check.nmse_e2e_gaussian) : "",
                     check.ran ? num(check.nmse_e2e_outliers) : "", ctx.slurm_job_id, ctx.slurm_array_task_id,
                     ctx.slurm_node});
  return f;
}

std::size_t CsvTable::column(const std::string& name) const {
  const auto it = std::find(header.begin(), header.end(), name);
  if (it == header.end()) throw std::runtime_error(fmt::format("CSV has no column '{}'", name));
  return static_cast<std::size_t>(it - header.begin());
}

std::string CsvTable::key(std::size_t row) const {
  const auto& r = rows.at(row);
  const std::string& n = r[column("n")];  // empty in files from before the n axis
  return point_key(r[column("kernel")], std::stoll(r[column("rows")]), std::stoll(r[column("cols")]),
                   std::stoi(r[column("threads")]), r[column("cache")], n.empty() ? 1 : std::stoi(n));
}

namespace {

constexpr std::size_t kSweepColumns = 41;

template <class In, std::size_t... I>
bool read_row_into(In& in, std::array<std::string, kSweepColumns>& a, std::index_sequence<I...>) {
  return in.read_row(a[I]...);
}

// A legacy file lacks some of the columns: they read as "".
template <class In, std::size_t... I>
void read_header_of(In& in, const std::vector<std::string>& h, std::index_sequence<I...>) {
  in.read_header(io::ignore_missing_column, h[I]...);
}

// A row is refused where it is read, not passed on to a merge, a report or a resumed
// sweep: what key() and merging read (the point's shape and thread count) whole
// numbers, every other measurement a number or empty (nothing measured), and the
// columns with a fixed set of values one of them.
void check_sweep_row(const CsvTable& t, const std::array<std::string, kSweepColumns>& a, const std::string& path,
                     unsigned line) {
  const auto field = [&](const char* column) -> const std::string& { return a[t.column(column)]; };
  for (const char* c : {"rows", "cols"}) (void)csv_number<std::int64_t>(field(c), path, line, c);
  (void)csv_number<int>(field("threads"), path, line, "threads");
  if (!field("n").empty() && csv_number<int>(field("n"), path, line, "n") < 1)
    throw std::runtime_error(fmt::format("{}: line {}: column n: '{}' is not a count of vectors", path, line,
                                         one_line(field("n"))));
  for (const char* c : {"tile_rows", "min_parallel_rows", "repetitions", "bytes_per_call"})
    if (!field(c).empty()) (void)csv_number<std::int64_t>(field(c), path, line, c);
  for (const char* c : {"time_min_us", "time_median_us", "time_max_us", "gbps_median", "gbps_best", "peak_gbps",
                        "peak_pct", "gflops", "act_quant_median_us", "nmse_kernel", "nmse_e2e_gaussian",
                        "nmse_e2e_outliers"})
    if (!field(c).empty()) (void)csv_number<double>(field(c), path, line, c);
  const auto refuse = [&](const char* column, const char* what) {
    throw std::runtime_error(
        fmt::format("{}: line {}: column {}: '{}' is not {}", path, line, column, one_line(field(column)), what));
  };
  if (field("kernel").empty()) refuse("kernel", "a kernel name");
  if (!known_sweep_status(field("status"))) refuse("status", fmt::format("a sweep status ({})", kSweepStatuses).c_str());
  if (field("cache") != "cold" && field("cache") != "warm") refuse("cache", "a cache state (cold, warm)");
  const std::string& passed = field("check_passed");
  if (!passed.empty() && passed != "0" && passed != "1") refuse("check_passed", "0, 1 or empty");
  const std::string& act_quant = field("act_quant");
  if (!act_quant.empty() && act_quant != "none" && act_quant != "before" && act_quant != "in_call")
    refuse("act_quant", "none, before, in_call or empty");
  // An ok row was timed: without its time nothing downstream can rank it.
  if (field("status") == "ok" && field("time_median_us").empty()) refuse("time_median_us", "a time on an ok row");
}

}  // namespace

CsvTable read_sweep_csv(const std::string& path, bool* dropped_partial) {
  CsvTable t;
  t.header = sweep_header();
  if (t.header.size() != kSweepColumns) throw std::logic_error("sweep header and reader disagree");
  if (const std::string problem = input_file_problem(path); !problem.empty())
    throw std::runtime_error(fmt::format("{}: {}", path, problem));
  std::string text;
  {
    std::ifstream in(path, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    text = ss.str();
  }
  if (text.empty()) throw std::runtime_error(fmt::format("{}: empty file", path));
  auto joined = [](const std::vector<std::string>& header) {
    std::string line;
    for (const auto& c : header) line += (line.empty() ? "" : ",") + csv_escape(c);
    return line;
  };
  const std::string first(header_line(text));
  if (first != joined(t.header)) {
    const auto legacy = legacy_sweep_headers();
    if (std::none_of(legacy.begin(), legacy.end(), [&](const auto& h) { return first == joined(h); }))
      throw std::runtime_error(fmt::format("{}: not a sweep CSV of this qmvlab (its header differs)", path));
    t.older_header = true;
  }
  if (dropped_partial) *dropped_partial = false;
  if (text.find('\n') == std::string::npos) text += '\n';  // the header alone, complete: no rows yet
  if (text.back() != '\n') {
    // An interrupted write leaves a last line without its newline.
    text.erase(text.rfind('\n') + 1);
    if (dropped_partial) *dropped_partial = true;
  }
  std::optional<io::CSVReader<kSweepColumns, io::trim_chars<>, io::double_quote_escape<',', '"'>>> reader;
  try {
    auto& in = reader.emplace(path, text.data(), text.data() + text.size());
    read_header_of(in, t.header, std::make_index_sequence<kSweepColumns>());
    std::array<std::string, kSweepColumns> a;
    const std::size_t kernel = t.column("kernel");
    while (read_row_into(in, a, std::make_index_sequence<kSweepColumns>())) {
      check_sweep_row(t, a, path, in.get_file_line());
      // A point timed before its kernel was renamed is the kernel's under its name now:
      // a resumed sweep does not time it again, a merge keeps it once.
      a[kernel] = std::string(current_kernel_name(a[kernel]));
      t.rows.emplace_back(a.begin(), a.end());
    }
  } catch (const io::error::base& e) {
    throw std::runtime_error(csv_read_error(path, reader ? reader->get_file_line() : 0, e));
  }
  return t;
}

CsvTable merge_sweeps(const std::vector<std::string>& paths, std::vector<std::string>* duplicates) {
  CsvTable out;
  out.header = sweep_header();
  std::map<std::string, std::size_t> seen;
  std::vector<std::pair<std::tuple<std::string, long long, long long, int, std::string, int>, std::vector<std::string>>>
      rows;
  for (const auto& path : paths) {
    bool partial = false;
    const CsvTable t = read_sweep_csv(path, &partial);
    if (partial) throw std::runtime_error(fmt::format("{}: last line is cut short (an interrupted sweep? --resume it first)", path));
    for (std::size_t i = 0; i < t.rows.size(); ++i) {
      const std::string key = t.key(i);
      if (!seen.emplace(key, i).second) {
        if (duplicates) duplicates->push_back(fmt::format("{} (again in {})", key, path));
        continue;
      }
      const auto& r = t.rows[i];
      const std::string& n = r[t.column("n")];
      rows.push_back({{r[t.column("kernel")], std::stoll(r[t.column("rows")]), std::stoll(r[t.column("cols")]),
                       std::stoi(r[t.column("threads")]), r[t.column("cache")], n.empty() ? 1 : std::stoi(n)},
                      r});
    }
  }
  std::stable_sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  for (auto& r : rows) out.rows.push_back(std::move(r.second));
  return out;
}

}  // namespace qmv
