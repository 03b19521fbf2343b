// Where a CpuForward's weights live (model/forward.h, WeightResidence): resident, each
// tensor the step reads is held once, a repacked matrix only in its kernels' layouts,
// made from the mapped file whose pages are then given back; in place, the tensors are
// read where the file is mapped. Both give the same logits bit for bit. Also the
// process's peak resident memory, which `decode` reports against the weights and the
// KV cache.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <vector>

#include "kernels/cpu_features.h"
#include "kernels/registry.h"
#include "kernels/weight_memory.h"
#include "model/config.h"
#include "model/forward.h"
#include "model/plan.h"
#include "model/step.h"
#include "tests/cli_run.h"
#include "tests/test_seed.h"

namespace qmv {
namespace {

using testing::CliRun;
using testing::qmvlab;
using testing::tmp;

// An untied toy model (lm_head is a matrix of its own, so the embedding's plain copy is
// not also a matrix that could be repacked), made once per process with a fresh seed.
const std::string& untied_toy() {
  static const std::string path = [] {
    const std::string p = tmp("toy-untied-q4_K_m.gguf");
    const CliRun r = qmvlab(fmt::format("make-model --preset toy --mix q4_K_m --untied --seed {} --out {}",
                                        qmv::testing::fresh_seed() % 1000000 + 1, p));
    EXPECT_EQ(r.code, 0) << r.output;
    return p;
  }();
  return path;
}

// The shapes of the model's matrices of each weight type, and of its gate/up pairs.
struct MatrixShapes {
  std::map<WeightType, std::set<std::pair<std::int64_t, std::int64_t>>> by_type;
  std::map<WeightType, std::set<std::pair<std::int64_t, std::int64_t>>> gate_up;  // when gate and up share a type
};

MatrixShapes matrix_shapes(const ModelWeights& w) {
  MatrixShapes s;
  auto add = [](auto& into, const gguf::Tensor* t) {
    WeightType type;
    if (!parse_weight_type(t->type->name, type)) return;
    into[type].insert({static_cast<std::int64_t>(t->dims[1]), static_cast<std::int64_t>(t->dims[0])});
  };
  for (const LayerWeights& l : w.layers) {
    for (const gguf::Tensor* t : {l.wq, l.wk, l.wv, l.wo, l.ffn_gate, l.ffn_up, l.ffn_down}) add(s.by_type, t);
    if (l.ffn_gate->type == l.ffn_up->type) add(s.gate_up, l.ffn_gate);
  }
  add(s.by_type, w.output);
  return s;
}

// The rule every choice below follows, so the test runs on any CPU: the first kernel
// that runs here on every shape given, of the kind and activation format asked for,
// with or without a weight transform; qmvlab's own before the peer's, and both before
// the test-only one (tests/prepared_kernel.cpp), which runs anywhere.
const KernelSpec* pick(WeightType w, const std::set<std::pair<std::int64_t, std::int64_t>>& shapes, OpKind kind,
                       bool with_prepare, bool f32_only = false) {
  std::vector<const KernelSpec*> fits;
  for (const KernelSpec& k : global_registry().all()) {
    if (k.backend != Backend::CPU || k.op != kind || k.weight != w || (k.prepare != nullptr) != with_prepare) continue;
    if (f32_only && k.act != ActFormat::F32) continue;
    if (missing_cpu_features(k.cpu_features) != 0) continue;
    if (!std::all_of(shapes.begin(), shapes.end(), [&](const auto& s) { return k.supports({s.first, s.second}); }))
      continue;
    fits.push_back(&k);
  }
  auto rank = [](const KernelSpec* k) { return std::make_tuple(k->name.rfind("test.", 0) == 0, !k->peer.empty(), k->name); };
  std::sort(fits.begin(), fits.end(), [&](const KernelSpec* a, const KernelSpec* b) { return rank(a) < rank(b); });
  return fits.empty() ? nullptr : fits.front();
}

// Plan rules: every weight type on a kernel with a weight transform where one runs here
// (`repack`), else on one without; gate+up fused on a repacking fused kernel where one
// runs, else apart. With `route`, outlier vectors go to an f32 sibling without one.
std::string plan_rules(const ModelWeights& w, bool repack, bool route) {
  const MatrixShapes s = matrix_shapes(w);
  std::string rules;
  auto add = [&](const std::string& rule) { rules += (rules.empty() ? "" : ",") + rule; };
  for (const auto& [type, shapes] : s.by_type) {
    const KernelSpec* k = repack ? pick(type, shapes, OpKind::MatVec, true) : nullptr;
    if (!k) k = pick(type, shapes, OpKind::MatVec, false);
    EXPECT_NE(k, nullptr) << to_string(type);
    if (!k) continue;
    add(fmt::format("{}={}", to_string(type), k->name));
    if (route) {
      const KernelSpec* sibling = pick(type, shapes, OpKind::MatVec, false, true);
      EXPECT_NE(sibling, nullptr) << to_string(type);
      if (sibling) add(fmt::format("outliers.{}={}", to_string(type), sibling->name));
    }
  }
  for (const auto& [type, shapes] : s.gate_up)
    if (const KernelSpec* f = repack ? pick(type, shapes, OpKind::FusedUpGate, true) : nullptr)
      add(fmt::format("ffn_up_gate.{}={}", to_string(type), f->name));
  add("ffn_up_gate=none");
  if (route) add("outliers.route=true,outliers.k=2.5");
  return rules;
}

std::vector<int> random_tokens(int n, int vocab) {
  std::mt19937 rng(qmv::testing::fresh_seed());
  std::vector<int> t(n);
  for (int& x : t) x = std::uniform_int_distribution<int>(0, vocab - 1)(rng);
  return t;
}

std::vector<float> logits(CpuForward& fwd, const std::vector<int>& tokens) {
  std::vector<float> all;
  for (int t : tokens) {
    const auto l = fwd.step(t);
    all.insert(all.end(), l.begin(), l.end());
  }
  return all;
}

// How many pages of [p, p + bytes) this process has mapped now (present in its page
// tables, from /proc/self/pagemap): every page the range touches, or with `inner` only
// those wholly inside it (not the ones it shares with a neighbouring tensor). Not
// mincore(): for a file the caller owns, that reports the page cache, which keeps the
// file's pages after the process gives them back.
std::int64_t pages_present(const void* p, std::size_t bytes, bool inner = false) {
  const std::uintptr_t page = static_cast<std::uintptr_t>(sysconf(_SC_PAGESIZE));
  const auto lo = reinterpret_cast<std::uintptr_t>(p), hi = lo + bytes;
  const std::uintptr_t first = inner ? (lo + page - 1) / page : lo / page, last = inner ? hi / page : (hi + page - 1) / page;
  if (last <= first) return 0;
  const int fd = ::open("/proc/self/pagemap", O_RDONLY);
  if (fd < 0) return -1;
  std::vector<std::uint64_t> entries(last - first);
  const auto want = static_cast<ssize_t>(entries.size() * sizeof(std::uint64_t));
  const ssize_t got = ::pread(fd, entries.data(), want, static_cast<off_t>(first * sizeof(std::uint64_t)));
  ::close(fd);
  if (got != want) return -1;
  return std::count_if(entries.begin(), entries.end(), [](std::uint64_t e) { return (e >> 63) & 1; });
}

// What the forward must hold, from the bound plan: the tensors some reader takes in
// their own layout (a kernel without a weight transform, the embedding lookup), and
// the matrices only ever read through their kernels' copies.
struct Expected {
  std::vector<const gguf::Tensor*> plain, repacked_only;
  std::uint64_t plain_bytes = 0, weight_bytes = 0;
};

Expected expected_residency(const LoadedModel& m, const std::vector<PlannedMatvec>& planned) {
  const BoundModel b = bind_plan(m.config, m.weights, planned, Backend::CPU);
  std::set<const gguf::Tensor*> matrices, plain{b.token_embd};
  auto readers = [&](const BoundMatvec& v) {
    for (const KernelSpec* k : {v.kernel, v.outlier_kernel})
      for (const gguf::Tensor* t : {v.w, v.w2})
        if (k && t) {
          matrices.insert(t);
          if (!k->prepare) plain.insert(t);
        }
  };
  for (const BoundLayer& l : b.layers)
    for (const BoundMatvec* v : {&l.q, &l.k, &l.v, &l.o, &l.gate, &l.up, &l.up_gate, &l.down}) readers(*v);
  readers(b.lm_head);
  Expected e;
  for (const gguf::Tensor* t : b.tensors) {
    e.weight_bytes += t->bytes;
    if (matrices.count(t) && !plain.count(t)) {
      e.repacked_only.push_back(t);
    } else {
      e.plain.push_back(t);
      e.plain_bytes += t->bytes;
    }
  }
  return e;
}

// (a) The resident forward's logits are the in-place forward's, bit for bit: with
// repacking kernels, without, and with outlier routing to plain f32 siblings (whose
// matrices are then held plain as well as repacked).
TEST(WeightResidence, ResidentLogitsAreTheInPlaceLogitsBitForBit) {
  const LoadedModel in_place(untied_toy());
  const auto tokens = random_tokens(7, in_place.config.vocab_size);
  for (const auto& [repack, route] : {std::pair{true, false}, std::pair{false, false}, std::pair{true, true}}) {
    const std::string rules = plan_rules(in_place.weights, repack, route);
    SCOPED_TRACE(rules);
    const auto planned = resolve_plan(load_plan(rules), in_place.weights, 2);
    CpuForward reference(in_place.config, in_place.weights, planned, 2, static_cast<int>(tokens.size()));
    const LoadedModel file(untied_toy());
    CpuForward resident(file, planned, 2, static_cast<int>(tokens.size()), WeightResidence::Resident);
    CpuForward mapped(file, planned, 2, static_cast<int>(tokens.size()), WeightResidence::InPlace);
    const auto want = logits(reference, tokens);
    EXPECT_EQ(logits(resident, tokens), want);
    EXPECT_EQ(logits(mapped, tokens), want);
    EXPECT_EQ(resident.weight_repack().matrices > 0, repack);
    // A matrix with a plain reader (an f32 sibling) is held plain as well as repacked.
    const Expected held = expected_residency(file, planned);
    EXPECT_EQ(resident.weight_residency().repacked_only, static_cast<int>(held.repacked_only.size()));
    EXPECT_EQ(resident.weight_residency().plain_bytes, held.plain_bytes);
    if (route) {
      std::int64_t routed = 0;
      for (std::int64_t n : resident.times().routed) routed += n;
      EXPECT_GT(routed, 0) << "no vector took the f32 sibling";
    }
  }
}

// (b) Resident, each tensor is held once: the plain copies are exactly the tensors
// read plain, a repacked matrix has no plain copy, and the file's pages of every tensor
// are given back and stay so while the step runs (it never reads the file).
TEST(WeightResidence, EachTensorIsHeldOnceAndTheFilePagesAreGivenBack) {
  const LoadedModel m(untied_toy());
  const std::string rules = plan_rules(m.weights, true, false);
  SCOPED_TRACE(rules);
  const auto planned = resolve_plan(load_plan(rules), m.weights, 2);
  const Expected want = expected_residency(m, planned);
  ASSERT_FALSE(want.repacked_only.empty()) << "no kernel with a weight transform runs here";

  CpuForward fwd(m, planned, 2, 4, WeightResidence::Resident);
  const auto& r = fwd.weight_residency();
  EXPECT_EQ(r.residence, WeightResidence::Resident);
  EXPECT_EQ(r.weight_bytes, want.weight_bytes);
  EXPECT_EQ(r.repacked_only, static_cast<int>(want.repacked_only.size()));
  EXPECT_EQ(r.plain_tensors, static_cast<int>(want.plain.size()));
  EXPECT_EQ(r.plain_bytes, want.plain_bytes);
  EXPECT_EQ(r.in_place_bytes, 0u);
  EXPECT_EQ(r.repacked_bytes, fwd.weight_repack().bytes);
  // Every tensor once: the repacked copies are about their matrices' size, so the whole
  // is at least the weights and at most 5% more (Q4_K's unpacked scales: 2.8%).
  EXPECT_GE(r.copied_bytes(), r.weight_bytes);
  EXPECT_LE(static_cast<double>(r.copied_bytes()), 1.05 * static_cast<double>(r.weight_bytes));
  EXPECT_GE(r.released_bytes, r.weight_bytes);
  if (r.huge_page_share >= 0) {
    EXPECT_LE(r.huge_page_share, 1.0);
  }
  EXPECT_EQ(fwd.page_in(), 0u);

  auto present = [&](const std::vector<const gguf::Tensor*>& ts) {
    std::int64_t pages = 0;
    for (const gguf::Tensor* t : ts) {
      const std::int64_t n = pages_present(t->data, t->bytes);
      EXPECT_GE(n, 0) << "cannot read /proc/self/pagemap";
      pages += std::max<std::int64_t>(n, 0);
    }
    return pages;
  };
  EXPECT_EQ(present(want.repacked_only), 0) << "the file's pages of a repacked matrix are still mapped";
  EXPECT_EQ(present(want.plain), 0) << "the file's pages of a copied tensor are still mapped";
  logits(fwd, random_tokens(4, m.config.vocab_size));
  EXPECT_EQ(present(want.repacked_only), 0) << "the step read a repacked matrix from the file";
  EXPECT_EQ(present(want.plain), 0) << "the step read a copied tensor from the file";

  // In place, the same reader sees the pages the step reads from the file (so the
  // checks above can fail), and the repacked matrices' are given back.
  const LoadedModel again(untied_toy());
  CpuForward in_place(again, planned, 2, 4, WeightResidence::InPlace);
  const Expected there = expected_residency(again, planned);
  EXPECT_EQ(in_place.weight_residency().plain_bytes, 0u);
  EXPECT_EQ(in_place.weight_residency().in_place_bytes, want.plain_bytes);
  EXPECT_EQ(in_place.weight_residency().repacked_only, static_cast<int>(want.repacked_only.size()));
  std::int64_t repacked = 0;
  for (const gguf::Tensor* t : there.repacked_only)
    repacked += std::max<std::int64_t>(pages_present(t->data, t->bytes, true), 0);
  EXPECT_EQ(repacked, 0);
  EXPECT_EQ(in_place.page_in(), want.plain_bytes);
  logits(in_place, random_tokens(4, m.config.vocab_size));
  std::int64_t read = 0;
  for (const gguf::Tensor* t : there.plain) read += std::max<std::int64_t>(pages_present(t->data, t->bytes), 0);
  EXPECT_GT(read, 0);
}

// Without a weight transform anywhere, resident is one plain copy of every tensor.
TEST(WeightResidence, APlanWithoutRepackingCopiesEveryTensorOnce) {
  const LoadedModel m(untied_toy());
  const auto planned = resolve_plan(load_plan(plan_rules(m.weights, false, false)), m.weights, 1);
  CpuForward fwd(m, planned, 1, 2, WeightResidence::Resident);
  const auto& r = fwd.weight_residency();
  EXPECT_EQ(fwd.weight_repack().matrices, 0);
  EXPECT_EQ(r.repacked_only, 0);
  EXPECT_EQ(r.plain_bytes, r.weight_bytes);
  EXPECT_EQ(r.copied_bytes(), r.weight_bytes);
  EXPECT_EQ(r.plain_tensors, r.tensors);
}

// (c) The peak resident memory: plausible, raised by memory touched, and started over
// by reset_peak_resident where the kernel allows it.
TEST(WeightResidence, PeakResidentMemoryIsPlausible) {
  const std::int64_t rss = resident_bytes(), peak = peak_resident_bytes();
  ASSERT_GT(rss, std::int64_t{1} << 20) << "cannot read /proc/self/status";
  EXPECT_GE(peak, rss);
  EXPECT_LT(peak, std::int64_t{1} << 40);
  constexpr std::size_t kBig = std::size_t{96} << 20;
  std::int64_t raised = 0;
  {
    std::vector<char> big(kBig);
    std::memset(big.data(), 1, big.size());
    raised = peak_resident_bytes();
    EXPECT_GE(raised, rss + static_cast<std::int64_t>(kBig) - (std::int64_t{8} << 20));
    EXPECT_GE(raised, resident_bytes());
  }
  if (!reset_peak_resident()) GTEST_SKIP() << "/proc/self/clear_refs refused: the peak runs from the process start";
  const std::int64_t after = peak_resident_bytes();
  EXPECT_LE(after, raised - static_cast<std::int64_t>(kBig) / 2) << "the freed buffer is still in the peak";
  EXPECT_GE(after, resident_bytes() - (std::int64_t{1} << 20));
  const double share = weight_memory_huge_page_share();
  EXPECT_LE(share, 1.0);
}

// `decode` makes the weights resident and prints the peak against weights + KV cache,
// as text and in --json; --mmap reads them in place.
TEST(WeightResidence, DecodeReportsResidenceAndPeakMemory) {
  const LoadedModel m(untied_toy());
  const std::string rules = plan_rules(m.weights, true, false);
  for (const bool mmap : {false, true}) {
    const std::string json = tmp(fmt::format("residence-{}.json", mmap));
    const CliRun r = qmvlab(fmt::format("decode --model {} --prompt-tokens 1,2,3 -n 4 --threads 1 --quiet --no-peak "
                                        "--plan '{}' --json {}{}",
                                        untied_toy(), rules, json, mmap ? " --mmap" : ""));
    ASSERT_EQ(r.code, 0) << r.output;
    EXPECT_NE(r.output.find("memory: peak resident "), std::string::npos) << r.output;
    EXPECT_NE(r.output.find(mmap ? "paged in from the file's mapping" : "made resident"), std::string::npos)
        << r.output;
    const nlohmann::json j = nlohmann::json::parse(std::ifstream(json));
    EXPECT_EQ(j["weights_in"], mmap ? "mapping" : "weight memory");
    const auto& mem = j["memory"];
    EXPECT_GT(mem["peak_resident_bytes"].get<double>(), 0.0);
    EXPECT_GT(mem["weight_bytes"].get<double>(), 0.0);
    EXPECT_GT(mem["kv_cache_bytes"].get<double>(), 0.0);
    EXPECT_GT(mem["peak_ratio"].get<double>(), 0.0);
    EXPECT_EQ(mem["plain_copy_bytes"].get<double>() > 0, !mmap);
  }
}

}  // namespace
}  // namespace qmv
