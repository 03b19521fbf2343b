#include "registry.h"
#include "kernels/cpu_tiling.h"
#include "kernels/former_names.h"

#include <fnmatch.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <new>
#include <utility>

namespace qmv {

std::string_view to_string(Backend b) { return b == Backend::CPU ? "cpu" : "cuda"; }
std::string_view to_string(OpKind k) {
  switch (k) {
    case OpKind::MatVec: return "matvec";
    case OpKind::FusedUpGate: return "fused_up_gate";
    case OpKind::MatVecBatch: return "matvec_batch";
  }
  return "?";
}
std::string to_string(Shape s) { return fmt::format("{}x{}", s.rows, s.cols); }

bool supports_superblock_cols(Shape s) {
  return s.rows >= 1 && s.cols >= kSuperBlock && s.cols % kSuperBlock == 0;
}

bool supports_block32_cols(Shape s) {
  return s.rows >= 1 && s.cols >= kLegacyBlock && s.cols % kLegacyBlock == 0;
}

bool supports_any_cols(Shape s) { return s.rows >= 1 && s.cols >= 1; }

namespace {
CpuTiling& tiling_storage() {
  static CpuTiling t;
  return t;
}
}  // namespace

const CpuTiling& cpu_tiling() { return tiling_storage(); }
void set_cpu_tiling(CpuTiling t) { tiling_storage() = t; }

static int output_matrices(const KernelSpec& spec) {
  return spec.op == OpKind::FusedUpGate ? 2 : 1;
}

std::size_t bytes_moved(const KernelSpec& spec, Shape s, int n) {
  const auto vectors = static_cast<std::size_t>(std::max(n, 1));
  if (spec.bytes_moved) {
    // A kernel's own count is for one vector: the extra vectors add their activation
    // and output, the weights being read once.
    return spec.bytes_moved(s) +
           (vectors - 1) * (row_bytes(spec.act, s.cols) + static_cast<std::size_t>(s.rows) * sizeof(float));
  }
  const std::size_t weights = static_cast<std::size_t>(s.rows) * row_bytes(spec.weight, s.cols);
  const std::size_t output = static_cast<std::size_t>(s.rows) * sizeof(float);
  return output_matrices(spec) * (weights + vectors * output) + vectors * row_bytes(spec.act, s.cols);
}

double flops(const KernelSpec& spec, Shape s, int n) {
  return 2.0 * static_cast<double>(s.rows) * static_cast<double>(s.cols) * output_matrices(spec) * std::max(n, 1);
}

Status check_args(const KernelSpec& spec, const MatVecArgs& a) {
  const Shape s = a.shape;
  if (s.rows <= 0 || s.cols <= 0)
    return Status::Error(fmt::format("{}: shape {} is empty", spec.name, to_string(s)));
  if (!spec.supports(s))
    return Status::Error(fmt::format("{}: shape {} not supported (needs {})", spec.name,
                                     to_string(s), spec.shape_rule));
  // A batch kernel takes 1..max_n vectors; every other kernel exactly one.
  const int max_n = spec.op == OpKind::MatVecBatch ? std::max(spec.max_n, 1) : 1;
  if (a.n < 1 || a.n > max_n)
    return Status::Error(max_n == 1 ? fmt::format("{}: takes one activation vector per call, got n = {}", spec.name, a.n)
                                    : fmt::format("{}: takes 1 to {} activation vectors per call, got n = {}",
                                                  spec.name, max_n, a.n));
  const auto vectors = static_cast<std::size_t>(a.n);
  const std::size_t need_w = static_cast<std::size_t>(s.rows) * row_bytes(spec.weight, s.cols);
  const std::size_t need_x = vectors * row_bytes(spec.act, s.cols);
  const std::size_t need_y = vectors * static_cast<std::size_t>(s.rows);
  auto check_matrix = [&](const void* w, std::size_t w_bytes, const float* y, std::size_t y_len,
                          const char* which) -> Status {
    if (!w || !y)
      return Status::Error(fmt::format("{}: null {} weight or output pointer", spec.name, which));
    if (w_bytes < need_w)
      return Status::Error(fmt::format("{}: {} weights hold {} bytes, shape {} needs {}",
                                       spec.name, which, w_bytes, to_string(s), need_w));
    if (y_len < need_y)
      return Status::Error(vectors == 1 ? fmt::format("{}: {} output holds {} floats, shape {} needs {}", spec.name,
                                                      which, y_len, to_string(s), need_y)
                                        : fmt::format("{}: {} output holds {} floats, shape {} with n = {} vectors "
                                                      "needs {}",
                                                      spec.name, which, y_len, to_string(s), vectors, need_y));
    return Status::Ok();
  };
  if (auto st = check_matrix(a.w, a.w_bytes, a.y, a.y_len, "first"); !st.ok()) return st;
  if (spec.op == OpKind::FusedUpGate) {
    if (auto st = check_matrix(a.w2, a.w2_bytes, a.y2, a.y2_len, "second"); !st.ok()) return st;
  }
  if (!a.x) return Status::Error(fmt::format("{}: null activation pointer", spec.name));
  if (a.x_bytes < need_x)
    return Status::Error(vectors == 1 ? fmt::format("{}: activation holds {} bytes, {} x {} cols needs {}", spec.name,
                                                    a.x_bytes, to_string(spec.act), s.cols, need_x)
                                      : fmt::format("{}: activation holds {} bytes, {} vectors of {} x {} cols need {}",
                                                    spec.name, a.x_bytes, vectors, to_string(spec.act), s.cols,
                                                    need_x));
  if (spec.backend == Backend::CPU && a.threads < 1)
    return Status::Error(fmt::format("{}: threads must be >= 1, got {}", spec.name, a.threads));
  if (spec.prepare && !a.prepared)
    return Status::Error(fmt::format("{}: reads its own weight layout; prepare the matrix first", spec.name));
  return Status::Ok();
}

Status invoke(const KernelSpec& spec, const MatVecArgs& a) {
  if (auto st = check_args(spec, a); !st.ok()) return st;
  return spec.run(a);
}

Status Registry::add(KernelSpec spec) {
  if (spec.name.empty()) return Status::Error("kernel spec without a name");
  if (!spec.run || !spec.supports)
    return Status::Error(fmt::format("kernel {} lacks run() or supports()", spec.name));
  if (spec.prepare && (!spec.release || spec.backend != Backend::CPU))
    return Status::Error(fmt::format("kernel {}: a weight transform needs release() and a CPU kernel", spec.name));
  if (!spec.act_converted_to.empty() && (!spec.act_round_trip || spec.act != ActFormat::F32))
    return Status::Error(fmt::format("kernel {}: converting its activation needs f32 input and act_round_trip",
                                     spec.name));
  if ((spec.op == OpKind::MatVecBatch) != (spec.max_n > 1) || spec.max_n < 1)
    return Status::Error(fmt::format("kernel {}: a batch kernel (op matvec_batch) takes max_n > 1 vectors, any "
                                     "other kernel max_n = 1 (got {})",
                                     spec.name, spec.max_n));
  if (find(spec.name))
    return Status::Error(fmt::format("kernel name registered twice: {}", spec.name));
  auto pos = std::lower_bound(specs_.begin(), specs_.end(), spec.name,
                              [](const KernelSpec& k, const std::string& n) { return k.name < n; });
  specs_.insert(pos, std::move(spec));
  return Status::Ok();
}

const KernelSpec* Registry::find(std::string_view name) const {
  for (const auto& k : specs_)
    if (k.name == name) return &k;
  const std::string_view current = current_kernel_name(name);
  if (current == name) return nullptr;
  note_former_name(name, current);
  return find(current);
}

const KernelSpec* scalar_reference(WeightType w) {
  // By exact name: a former name (q4_K.cpu.scalar) must not stand in for a current one.
  for (const char* variant : {"scalar_f32", "scalar"}) {
    const std::string name = fmt::format("{}.cpu.{}", to_string(w), variant);
    for (const KernelSpec& k : global_registry().all())
      if (k.name == name) return &k;
  }
  return nullptr;
}

namespace {

// The comma-separated patterns of a selection, the exclusions ("!glob") apart.
struct GlobList {
  std::vector<std::string> include, exclude;
};

GlobList split_globs(std::string_view globs) {
  GlobList list;
  std::size_t start = 0;
  while (start <= globs.size()) {
    std::size_t end = globs.find(',', start);
    if (end == std::string_view::npos) end = globs.size();
    const std::string_view pattern = globs.substr(start, end - start);
    start = end + 1;
    if (pattern.empty()) continue;
    if (pattern.front() == '!') {
      if (pattern.size() > 1) list.exclude.emplace_back(pattern.substr(1));
    } else {
      list.include.emplace_back(pattern);
    }
  }
  return list;
}

bool matches(const std::string& pattern, std::string_view name) {
  return fnmatch(pattern.c_str(), std::string(name).c_str(), 0) == 0;
}

bool excluded(const GlobList& list, const std::string& name) {
  return std::any_of(list.exclude.begin(), list.exclude.end(), [&](const std::string& p) { return matches(p, name); });
}

}  // namespace

bool glob_match_any(std::string_view globs, std::string_view name) {
  const GlobList list = split_globs(globs);
  const std::string n(name);
  if (excluded(list, n)) return false;
  // Exclusions alone select everything else.
  if (list.include.empty()) return !list.exclude.empty();
  return std::any_of(list.include.begin(), list.include.end(), [&](const std::string& p) { return matches(p, n); });
}

std::vector<std::string> unmatched_exclusions(std::string_view globs, const std::vector<std::string>& names) {
  std::vector<std::string> unmatched;
  for (const std::string& p : split_globs(globs).exclude)
    if (std::none_of(names.begin(), names.end(), [&](const std::string& n) { return matches(p, n); }))
      unmatched.push_back("!" + p);
  return unmatched;
}

std::vector<std::string> Registry::unmatched_exclusions(std::string_view globs) const {
  std::vector<std::string> names;
  for (const auto& k : specs_) names.push_back(k.name);
  return qmv::unmatched_exclusions(globs, names);
}

std::vector<const KernelSpec*> Registry::select(std::string_view globs) const {
  const GlobList list = split_globs(globs);
  std::vector<const KernelSpec*> out;
  auto add = [&](const KernelSpec* k) {
    if (!excluded(list, k->name) && std::find(out.begin(), out.end(), k) == out.end()) out.push_back(k);
  };
  if (list.include.empty() && !list.exclude.empty())
    for (const auto& k : specs_) add(&k);
  for (const std::string& pattern : list.include) {
    std::vector<const KernelSpec*> matched;
    for (const auto& k : specs_)
      if (matches(pattern, k.name)) matched.push_back(&k);
    // A pattern written with the former names (and matching no current one) selects
    // the kernels they name now.
    if (matched.empty()) {
      std::string currents;
      for (const FormerName& f : former_kernel_names())
        if (matches(pattern, f.former))
          for (const auto& k : specs_)
            if (k.name == f.current && std::find(matched.begin(), matched.end(), &k) == matched.end()) {
              matched.push_back(&k);  // once, however many of its former names match
              currents += (currents.empty() ? "" : ",") + k.name;
            }
      if (!matched.empty()) note_former_name(pattern, currents);
    }
    for (const KernelSpec* k : matched) add(k);
  }
  std::sort(out.begin(), out.end(), [](const KernelSpec* a, const KernelSpec* b) { return a->name < b->name; });
  return out;
}

static std::vector<std::string>& startup_errors() {
  static std::vector<std::string> errors;
  return errors;
}

Registry& global_registry() {
  static Registry registry;
  return registry;
}

const std::vector<std::string>& registry_startup_errors() { return startup_errors(); }

static std::vector<PeerBuild>& peers() {
  static std::vector<PeerBuild> list;
  return list;
}

bool register_peer(const char* name, const char* version) {
  peers().push_back({name, version});
  return true;
}

const std::vector<PeerBuild>& peer_builds() { return peers(); }

bool register_kernel(const KernelRecord& r, const char* source_file) {
  KernelSpec spec;
  spec.name = r.name ? r.name : "";
  spec.op = r.op;
  spec.weight = r.weight;
  spec.act = r.act;
  spec.backend = r.backend;
  spec.cpu_features = r.cpu_features;
  spec.min_sm = r.min_sm;
  spec.shape_rule = r.shape_rule ? r.shape_rule : "";
  spec.supports = r.supports;
  spec.run = r.run;
  spec.bytes_moved = r.bytes_moved;
  spec.max_n = r.max_n;
  spec.description = r.description ? r.description : "";
  spec.prepare = r.prepare;
  spec.release = r.release;
  spec.act_converted_to = r.act_converted_to ? r.act_converted_to : "";
  spec.act_round_trip = r.act_round_trip;
  spec.peer = r.peer ? r.peer : "";
  spec.joins_call_teams = r.joins_call_teams && r.backend == Backend::CPU;
  // __FILE__ is the path the compiler was given; the build table names files from the
  // tree's root.
  if (source_file) {
    const std::string file = source_file;
    const auto at = file.rfind("kernels/");
    spec.source = at == std::string::npos ? file : file.substr(at);
  }
  if (auto st = global_registry().add(std::move(spec)); !st.ok())
    startup_errors().push_back(st.error);
  return true;
}

PreparedMatrix::PreparedMatrix(PreparedMatrix&& other) noexcept
    : weights_(std::exchange(other.weights_, {})), release_(std::exchange(other.release_, nullptr)) {}

PreparedMatrix& PreparedMatrix::operator=(PreparedMatrix&& other) noexcept {
  if (this != &other) {
    reset();
    weights_ = std::exchange(other.weights_, {});
    release_ = std::exchange(other.release_, nullptr);
  }
  return *this;
}

PreparedMatrix::~PreparedMatrix() { reset(); }

void PreparedMatrix::reset() {
  if (release_ && weights_.handle) release_(weights_);
  weights_ = {};
  release_ = nullptr;
}

Status PreparedMatrix::prepare(const KernelSpec& spec, const MatVecArgs& args) {
  reset();
  if (!spec.prepare) return Status::Ok();
  PreparedWeights made;
  if (Status st = spec.prepare(args, &made); !st.ok()) return st;
  if (!made.handle) return Status::Error(spec.name + ": prepare() made nothing");
  weights_ = made;
  release_ = spec.release;
  return Status::Ok();
}

namespace {
thread_local bool tls_in_call_team = false;
}  // namespace
void set_in_call_team(bool member) { tls_in_call_team = member; }
bool in_call_team() { return tls_in_call_team; }

void* thread_scratch(std::size_t bytes) {
  struct Buffer {
    void* data = nullptr;
    std::size_t capacity = 0;
    ~Buffer() { std::free(data); }
  };
  thread_local Buffer buf;
  if (buf.capacity < bytes) {
    std::free(buf.data);
    buf.capacity = (bytes + 63) / 64 * 64;
    buf.data = std::aligned_alloc(64, buf.capacity);
    if (!buf.data) {
      buf.capacity = 0;
      throw std::bad_alloc();
    }
  }
  return buf.data;
}

}  // namespace qmv
