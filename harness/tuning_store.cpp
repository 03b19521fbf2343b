#include "harness/tuning_store.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <fmt/format.h>

#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <tuple>

#include "harness/accuracy.h"
#include "harness/csv_columns.h"
#include "harness/machine.h"
#include "harness/peak.h"
#include "kernels/build_id.h"
#include "kernels/cpu_features.h"
#include "kernels/cpu_tiling.h"
#include "kernels/former_names.h"
#include "kernels/registry.h"

namespace qmv {
namespace {

// `n`, `read_gbps` and `rotation_bytes` last and optional: a file written before them
// reads as one vector per call at an unknown read speed and rotation, and a reader that
// predates them reads a newer file.
constexpr std::array<const char*, 21> kColumns = {
    "kind",        "machine", "isa",  "cpu_model", "kernel",      "kernel_build",   "op",
    "weight_type", "rows",    "cols", "threads",   "repetitions", "time_median_us", "gbps",
    "cache",       "source",  "measured_at", "git_commit", "n", "read_gbps", "rotation_bytes"};
constexpr std::size_t kRequiredColumns = kColumns.size() - 3;
// A key keeps this many rows at distinct read speeds; a new one displaces the oldest.
constexpr std::size_t kReadSpeedsPerKey = 3;

// The features this process may use: what the CPU has, within the ISA mask.
std::string usable_isa() {
  constexpr std::uint32_t kAll = 0x7F;  // every CpuFeature bit
  std::string names = cpu_feature_names(kAll & ~missing_cpu_features(kAll));
  for (char& c : names) c = c == ' ' ? '+' : c;
  return names.empty() ? "none" : names;
}

using Key = std::tuple<std::string, std::string, std::string, std::string, std::string, std::string, std::int64_t,
                       std::int64_t, int, std::string, int>;
Key key_of(const TuningRow& r) {
  return {r.kind, r.machine, r.isa, r.kernel, r.kernel_build, r.op, r.rows, r.cols, r.threads, r.cache, r.n};
}

std::vector<std::string> fields_of(const TuningRow& r) {
  return {r.kind,
          r.machine,
          r.isa,
          r.cpu_model,
          r.kernel,
          r.kernel_build,
          r.op,
          r.weight_type,
          std::to_string(r.rows),
          std::to_string(r.cols),
          std::to_string(r.threads),
          std::to_string(r.repetitions),
          fmt::format("{:.6g}", r.time_median_us),
          fmt::format("{:.6g}", r.gbps),
          r.cache,
          r.source,
          r.measured_at,
          r.git_commit,
          std::to_string(r.n),
          fmt::format("{:.6g}", r.read_gbps),
          std::to_string(r.rotation_bytes)};
}

// Refuses what no writer of ours produces, so a garbled file is not half believed.
void validate(const TuningRow& r, const std::string& path, unsigned line) {
  auto bad = [&](const std::string& what) {
    throw std::runtime_error(fmt::format("{}: line {}: {}", path, line, what));
  };
  if (r.kind != "kernel" && r.kind != "peak") bad(fmt::format("kind '{}' is neither kernel nor peak", one_line(r.kind)));
  if (r.machine.empty() || r.kernel.empty()) bad("a row without its machine or kernel");
  if (!(r.gbps > 0) || !std::isfinite(r.gbps)) bad(fmt::format("gbps {} is not a positive number", r.gbps));
  if (r.threads < 0 || r.repetitions < 0) bad("a negative thread or repetition count");
  if (r.n < 1) bad(fmt::format("n {} is not a count of vectors", r.n));
  if (!(r.read_gbps >= 0) || !std::isfinite(r.read_gbps))
    bad(fmt::format("read_gbps {} is neither 0 (unknown) nor a positive number", r.read_gbps));
  if (r.rotation_bytes < 0) bad(fmt::format("rotation_bytes {} is negative", r.rotation_bytes));
  if (r.n > 1 && r.op != to_string(OpKind::MatVecBatch))
    bad(fmt::format("n {} on a {} row: only a batch kernel takes more than one vector per call", r.n, one_line(r.op)));
  if (r.kind == "kernel") {
    if (r.rows <= 0 || r.cols <= 0) bad(fmt::format("shape {}x{} is empty", r.rows, r.cols));
    if (!(r.time_median_us > 0) || !std::isfinite(r.time_median_us))
      bad(fmt::format("time_median_us {} is not a positive number", r.time_median_us));
    if (r.cache != "cold" && r.cache != "warm") bad(fmt::format("cache '{}' is neither cold nor warm", one_line(r.cache)));
  }
}

// An exclusive lock on <path>.lock for the life of the object (flock: released when the
// process dies, so a killed writer never leaves the store locked).
class FileLock {
 public:
  explicit FileLock(const std::string& path) : fd_(::open((path + ".lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644)) {
    if (fd_ >= 0 && ::flock(fd_, LOCK_EX) != 0) {
      ::close(fd_);
      fd_ = -1;
    }
  }
  ~FileLock() {
    if (fd_ >= 0) ::close(fd_);
  }
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;
  bool held() const { return fd_ >= 0; }

 private:
  int fd_;
};

// Whether a kernel row belongs to the GPU's scope: a CUDA kernel's, by the registry or,
// for one no longer registered, by its name.
bool gpu_kernel(const std::string& kernel) {
  if (const KernelSpec* k = global_registry().find(kernel)) return k->backend == Backend::CUDA;
  return kernel.find(".cuda.") != std::string::npos;
}

}  // namespace

bool cold_enough(const KernelSpec& k, const TuningRow& r) {
  return k.backend != Backend::CPU || r.cache != "cold" ||
         r.rotation_bytes >= static_cast<std::int64_t>(cold_rotation_bytes());
}

StoreScope StoreScope::here() {
  const MachineInfo& m = machine_info();
  return {m.machine, usable_isa(), m.gpu_machine, m.gpu_arch};
}

std::vector<std::string> tuning_store_header() { return {kColumns.begin(), kColumns.end()}; }

TuningStore::TuningStore(std::string path, Backend backend)
    : path_(path.empty() ? default_path(backend) : std::move(path)) {}

std::string TuningStore::default_path(Backend backend) {
  if (const char* env = std::getenv("QMV_TUNING_STORE"); env && *env) return env;
  const MachineInfo& m = machine_info();
  // Without a device no CUDA row is written or used; the CPU's file stands in.
  const bool gpu = backend == Backend::CUDA && !m.gpu_machine.empty();
  const std::string relative = fmt::format("results/{}/tuning.csv", gpu ? m.gpu_machine : m.machine);
  const std::filesystem::path tree(QMV_SOURCE_DIR);
  std::error_code ec;
  if (std::filesystem::is_directory(tree / "results", ec)) return (tree / relative).string();
  return relative;
}

std::vector<TuningRow> TuningStore::read_all() const {
  std::error_code ec;
  if (!std::filesystem::exists(path_, ec)) return {};
  if (std::filesystem::file_size(path_, ec) == 0 && !ec) throw std::runtime_error(fmt::format("{}: empty file", path_));
  std::vector<TuningRow> rows;
  csv_columns::read(path_, "tuning store", kColumns, kRequiredColumns, [&](const csv_columns::Fields& f) {
    TuningRow r;
    r.kind = f["kind"];
    r.machine = f["machine"];
    r.isa = f["isa"];
    r.cpu_model = f["cpu_model"];
    // A row written under a kernel's former name is the kernel's under its name now
    // (kernels/former_names.h), and is written back so.
    r.kernel = std::string(current_kernel_name(f["kernel"]));
    r.kernel_build = f["kernel_build"];
    r.op = f["op"];
    r.weight_type = f["weight_type"];
    r.rows = f.required<std::int64_t>("rows");
    r.cols = f.required<std::int64_t>("cols");
    r.threads = f.required<int>("threads");
    r.cache = f["cache"];
    r.n = f.number_or<int>("n", 1);
    r.read_gbps = f.number_or<double>("read_gbps", 0);
    r.rotation_bytes = f.number_or<std::int64_t>("rotation_bytes", 0);
    r.repetitions = f.required<int>("repetitions");
    r.time_median_us = f.required<double>("time_median_us");
    r.gbps = f.required<double>("gbps");
    r.measured_at = f["measured_at"];
    r.source = f["source"];
    r.git_commit = f["git_commit"];
    validate(r, path_, f.line);
    rows.push_back(std::move(r));
  });
  return rows;
}

std::vector<TuningRow> TuningStore::usable_rows(std::string* warning, const StoreScope& scope) const {
  std::vector<TuningRow> all;
  try {
    all = read_all();
  } catch (const std::exception& e) {
    if (warning) *warning = fmt::format("tuning store ignored: {}", one_line(e.what()));
    return {};
  }
  std::vector<TuningRow> out;
  for (TuningRow& r : all) {
    if (r.kind == "kernel" && gpu_kernel(r.kernel)) {
      if (scope.gpu_machine.empty() || r.machine != scope.gpu_machine || r.isa != scope.gpu_arch) continue;
    } else if (canonical_machine(r.machine) != scope.cpu_machine || r.isa != scope.cpu_isa) {
      // A row written under a former name of this machine is still this machine's.
      continue;
    }
    if (r.kind == "kernel") {
      const KernelSpec* k = global_registry().find(r.kernel);
      if (!k || r.kernel_build != kernel_build_id(*k) || r.kernel_build == "unknown") continue;
      if (!cold_enough(*k, r)) continue;
    }
    out.push_back(std::move(r));
  }
  return out;
}

std::optional<TuningRow> TuningStore::peak(int threads) const {
  std::optional<TuningRow> newest;
  for (TuningRow& r : usable_rows())
    if (r.kind == "peak" && r.threads == threads && (!newest || r.measured_at >= newest->measured_at))
      newest = std::move(r);
  return newest;
}

std::string TuningStore::add(const std::vector<TuningRow>& rows) const {
  if (rows.empty()) return "";
  const std::filesystem::path p(path_);
  std::error_code ec;
  if (p.has_parent_path()) std::filesystem::create_directories(p.parent_path(), ec);
  if (ec) return fmt::format("{}: cannot create its directory: {}", path_, ec.message());
  if (std::filesystem::exists(p, ec) && !std::filesystem::is_regular_file(p, ec))
    return fmt::format("{}: not a regular file", path_);
  const FileLock lock(path_);
  if (!lock.held()) return fmt::format("{}: cannot lock {}.lock", path_, path_);

  // Per key, its rows at distinct read speeds, oldest first; the keys in first-seen
  // order, so the file reads as it grew.
  std::map<Key, std::vector<TuningRow>> merged;
  std::vector<Key> order;
  auto put = [&](const TuningRow& r) {
    const Key k = key_of(r);
    auto [it, fresh] = merged.try_emplace(k);
    if (fresh) order.push_back(k);
    std::vector<TuningRow>& kept = it->second;
    std::erase_if(kept, [&](const TuningRow& old) { return same_read_speed(old.read_gbps, r.read_gbps); });
    kept.push_back(r);
    if (kept.size() > kReadSpeedsPerKey) kept.erase(kept.begin());
  };
  std::string note;
  try {
    for (const TuningRow& r : read_all()) put(r);
  } catch (const std::exception& e) {
    // Kept for whoever wants to see what broke; the new file starts afresh.
    std::filesystem::rename(p, path_ + ".damaged", ec);
    note = fmt::format(" (the damaged file was moved to {}.damaged: {})", path_, one_line(e.what()));
  }
  for (const TuningRow& r : rows) put(r);

  const std::string aside = fmt::format("{}.{}.tmp", path_, ::getpid());
  {
    CsvWriter out(aside, tuning_store_header(), false);
    for (const Key& k : order)
      for (const TuningRow& r : merged.at(k)) out.write(fields_of(r));
  }
  std::filesystem::rename(aside, p, ec);
  if (ec) {
    std::filesystem::remove(aside, ec);
    return fmt::format("{}: cannot replace it: {}", path_, ec.message());
  }
  if (!note.empty()) std::fprintf(stderr, "qmvlab: tuning store rewritten%s\n", note.c_str());
  return "";
}

bool same_read_speed(double a_gbps, double b_gbps) {
  if (a_gbps <= 0 || b_gbps <= 0) return true;
  return std::max(a_gbps, b_gbps) <= kSameReadSpeed * std::min(a_gbps, b_gbps);
}

std::vector<std::pair<std::size_t, std::size_t>> read_speed_groups(const std::vector<double>& ascending_gbps) {
  std::vector<std::pair<std::size_t, std::size_t>> out;
  for (std::size_t i = 0; i < ascending_gbps.size();) {
    const std::size_t begin = i;
    const double high = ascending_gbps[begin] * kSameReadSpeed;
    while (i < ascending_gbps.size() && ascending_gbps[i] <= high) ++i;
    out.emplace_back(begin, i);
  }
  return out;
}

int read_speed_changes(const std::vector<double>& gbps_in_order) {
  int changes = 0;
  for (std::size_t p = 1; p < gbps_in_order.size(); ++p)
    if (!same_read_speed(gbps_in_order[p - 1], gbps_in_order[p])) ++changes;
  return changes;
}

double roofline_pct_by_spell(const std::vector<double>& step_s, const std::vector<double>& step_bytes,
                             const std::vector<double>& pass_gbps) {
  if (pass_gbps.empty() || step_s.empty() || step_bytes.size() != step_s.size()) return 0;
  // The steady spells: [begin, end) of passes, each with its median read.
  struct Spell {
    std::size_t begin, end;
    double gbps;
  };
  std::vector<Spell> spells;
  for (std::size_t begin = 0; begin < pass_gbps.size();) {
    std::size_t end = begin + 1;
    while (end < pass_gbps.size() && same_read_speed(pass_gbps[end - 1], pass_gbps[end])) ++end;
    spells.push_back({begin, end,
                      median_of({pass_gbps.begin() + static_cast<std::ptrdiff_t>(begin),
                                 pass_gbps.begin() + static_cast<std::ptrdiff_t>(end)})});
    begin = end;
  }
  // A spell of fewer than kMinSpellPasses passes is a stalled pass or two, not the
  // memory's speed: its tokens take the last long spell's read before it (the first long
  // one's after it; the run's median where none is long).
  std::vector<double> pass_spell_gbps(pass_gbps.size(), median_of(pass_gbps));
  const Spell* last_long = nullptr;
  std::vector<std::size_t> waiting;  // short spells before the first long one
  for (const Spell& sp : spells) {
    const bool long_spell = sp.end - sp.begin >= kMinSpellPasses;
    if (long_spell) {
      for (const std::size_t w : waiting)
        std::fill(pass_spell_gbps.begin() + static_cast<std::ptrdiff_t>(spells[w].begin),
                  pass_spell_gbps.begin() + static_cast<std::ptrdiff_t>(spells[w].end), sp.gbps);
      waiting.clear();
      last_long = &sp;
    }
    const double gbps = long_spell ? sp.gbps : last_long ? last_long->gbps : 0;
    if (gbps > 0)
      std::fill(pass_spell_gbps.begin() + static_cast<std::ptrdiff_t>(sp.begin),
                pass_spell_gbps.begin() + static_cast<std::ptrdiff_t>(sp.end), gbps);
    else
      waiting.push_back(static_cast<std::size_t>(&sp - spells.data()));
  }
  double at_roofline = 0, taken = 0;
  for (std::size_t i = 0; i < step_s.size(); ++i) {
    const double gbps = pass_spell_gbps[std::min(i == 0 ? 0 : i - 1, pass_spell_gbps.size() - 1)];
    if (!(gbps > 0)) return 0;
    at_roofline += step_bytes[i] / (gbps * 1e9);
    taken += step_s[i];
  }
  return taken > 0 ? 100 * at_roofline / taken : 0;
}

std::string utc_timestamp() {
  const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm utc{};
  gmtime_r(&now, &utc);
  std::array<char, 32> text{};
  std::strftime(text.data(), text.size(), "%Y-%m-%dT%H:%M:%SZ", &utc);
  return text.data();
}

TuningRow tuning_row(const BenchRow& b, const std::string& source, const StoreScope& scope) {
  const MachineInfo& m = machine_info();
  const bool gpu = b.backend == "cuda";
  TuningRow r;
  r.machine = gpu ? scope.gpu_machine : scope.cpu_machine;
  r.isa = gpu ? scope.gpu_arch : scope.cpu_isa;
  r.cpu_model = gpu ? b.gpu_name : m.cpu_model;
  r.kernel = b.kernel;
  if (const KernelSpec* k = global_registry().find(b.kernel)) r.kernel_build = kernel_build_id(*k);
  r.op = b.op;
  r.weight_type = b.weight_type;
  r.rows = b.rows;
  r.cols = b.cols;
  r.threads = b.threads;
  r.cache = b.cache;
  r.n = b.n;
  r.rotation_bytes = b.rotation_bytes;
  r.repetitions = b.repetitions;
  r.time_median_us = b.time_median_us;
  r.gbps = b.gbps_median;
  r.measured_at = utc_timestamp();
  r.source = source;
  r.git_commit = m.git_commit;
  return r;
}

std::vector<RepsAtSpeed> reps_by_read_speed(const std::vector<double>& rep_us, const std::vector<double>& rep_read_gbps,
                                            double bytes_per_call) {
  std::vector<std::size_t> known;
  for (std::size_t i = 0; i < rep_us.size() && i < rep_read_gbps.size(); ++i)
    if (rep_read_gbps[i] > 0 && rep_us[i] > 0 &&
        !(bytes_per_call > 0 && bytes_per_call / (rep_us[i] * 1e3) > kSameReadSpeed * rep_read_gbps[i]))
      known.push_back(i);
  std::sort(known.begin(), known.end(),
            [&](std::size_t a, std::size_t b) { return rep_read_gbps[a] < rep_read_gbps[b]; });
  auto upper_median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  std::vector<double> ascending;
  for (const std::size_t i : known) ascending.push_back(rep_read_gbps[i]);
  std::vector<RepsAtSpeed> out;
  for (const auto& [begin, end] : read_speed_groups(ascending)) {
    std::vector<double> times, reads;
    for (std::size_t i = begin; i < end; ++i) {
      times.push_back(rep_us[known[i]]);
      reads.push_back(rep_read_gbps[known[i]]);
    }
    if (static_cast<int>(times.size()) >= kMinRepsAtSpeed || times.size() == rep_us.size())
      out.push_back({upper_median(times), upper_median(reads), static_cast<int>(times.size())});
  }
  return out;
}

std::vector<TuningRow> tuning_rows_by_read_speed(const BenchRow& b, const std::string& source, double read_gbps,
                                                 const StoreScope& scope) {
  const TuningRow whole = tuning_row(b, source, scope);
  if (b.cache != "cold") return {whole};
  std::vector<TuningRow> out;
  for (const RepsAtSpeed& g : reps_by_read_speed(b.rep_us, b.rep_read_gbps, static_cast<double>(b.bytes_per_call))) {
    TuningRow r = whole;
    r.time_median_us = g.time_median_us;
    r.gbps = b.gbps_median * b.time_median_us / g.time_median_us;
    r.repetitions = g.repetitions;
    r.read_gbps = g.read_gbps;
    out.push_back(std::move(r));
  }
  if (out.empty()) {
    out.push_back(whole);
    out.back().read_gbps = read_gbps;
  }
  return out;
}

TuningRow peak_tuning_row(int threads, double gbps, const std::string& read_loop, int repetitions,
                          const std::string& source) {
  const MachineInfo& m = machine_info();
  TuningRow r;
  r.kind = "peak";
  r.machine = m.machine;
  r.isa = usable_isa();
  r.cpu_model = m.cpu_model;
  r.kernel = read_loop;
  r.op = "read";
  r.threads = threads;
  r.repetitions = repetitions;
  r.gbps = gbps;
  r.measured_at = utc_timestamp();
  r.source = source;
  r.git_commit = m.git_commit;
  return r;
}

void record_in_store(const std::vector<BenchRow>& rows, const std::string& source,
                     const std::map<int, double>& read_gbps) {
  std::vector<TuningRow> cpu, gpu;
  const CpuTiling usual;
  const StoreScope scope = StoreScope::here();
  for (const BenchRow& b : rows) {
    if (!(b.time_median_us > 0 && b.gbps_median > 0)) continue;  // a failed point has no time
    // More than one vector per call only for a batch kernel, as `decode --batch` calls it.
    if (b.n != 1 && b.op != to_string(OpKind::MatVecBatch)) continue;
    // What decode would meet: CPU rows under the row tiling decode runs with; CUDA rows
    // of weights streamed from memory, on this process's device.
    if (b.backend == "cpu" && b.tile_rows == usual.tile_rows && b.min_parallel_rows == usual.min_parallel_rows) {
      // A kernel streaming its weights from memory is as quick as the memory was then.
      const auto read = read_gbps.find(b.threads);
      for (TuningRow& r : tuning_rows_by_read_speed(b, source, read != read_gbps.end() ? read->second : 0.0, scope))
        cpu.push_back(std::move(r));
    }
    else if (b.backend == "cuda" && b.cache == "cold" && !scope.gpu_machine.empty())
      gpu.push_back(tuning_row(b, source, scope));
  }
  for (const auto& [backend, out] : {std::pair{Backend::CPU, &cpu}, std::pair{Backend::CUDA, &gpu}})
    if (const std::string error = TuningStore({}, backend).add(*out); !error.empty())
      std::fprintf(stderr, "qmvlab: the tuning store was not updated: %s\n", error.c_str());
}

StoredRoofline cpu_roofline(int threads, const std::string& measured_by) {
  const TuningStore store;
  if (const auto row = store.peak(threads))
    return {row->gbps,
            fmt::format("{} read loop median, from the tuning store, {} by {}", row->kernel, row->date(), row->source),
            row->kernel};
  std::fprintf(stderr, "measuring the read bandwidth on %d thread(s) for the roofline (once; kept in %s)\n", threads,
               store.path().c_str());
  const PeakResult p = measure_read_bandwidth(threads, 7);
  if (const std::string error = store.add({peak_tuning_row(threads, p.steady_gbps(), p.steady_loop(), p.repetitions,
                                                           measured_by)});
      !error.empty())
    std::fprintf(stderr, "qmvlab: the tuning store was not updated: %s\n", error.c_str());
  return {p.steady_gbps(), fmt::format("{} read loop median, measured now", p.steady_loop()), p.steady_loop()};
}

}  // namespace qmv
