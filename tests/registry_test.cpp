#include <gtest/gtest.h>
#include <fmt/format.h>

#include <algorithm>
#include <regex>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "harness/machine.h"
#include "kernels/availability.h"
#include "kernels/cpu_features.h"
#include "kernels/cpu_tiling.h"
#include "kernels/former_names.h"
#include "kernels/registry.h"

namespace qmv {
namespace {

Status ok_run(const MatVecArgs&) { return Status::Ok(); }

KernelSpec spec_named(std::string name) {
  KernelSpec s;
  s.name = std::move(name);
  s.shape_rule = kSuperBlockColsRule;
  s.supports = supports_superblock_cols;
  s.run = ok_run;
  return s;
}

TEST(Registry, DuplicateNameIsRefused) {
  Registry r;
  ASSERT_TRUE(r.add(spec_named("q4_K.cpu.a")).ok());
  const Status dup = r.add(spec_named("q4_K.cpu.a"));
  EXPECT_FALSE(dup.ok());
  EXPECT_NE(dup.error.find("registered twice: q4_K.cpu.a"), std::string::npos) << dup.error;
  EXPECT_EQ(r.all().size(), 1u);
}

TEST(Registry, IncompleteSpecIsRefused) {
  Registry r;
  KernelSpec no_run = spec_named("x.cpu.norun");
  no_run.run = nullptr;
  EXPECT_FALSE(r.add(no_run).ok());
  KernelSpec no_name = spec_named("");
  EXPECT_FALSE(r.add(no_name).ok());
  EXPECT_TRUE(r.all().empty());
}

TEST(Registry, GlobSelection) {
  Registry r;
  for (const char* n : {"q4_K.cpu.scalar_f32", "q4_K.cpu.avx2_q8k", "q6_K.cpu.scalar_f32", "q4_K.cuda.dp4a_q8_1",
                        "q6_K.cuda.halfwarp_dp4a_q8_1"})
    ASSERT_TRUE(r.add(spec_named(n)).ok());
  auto names = [](const std::vector<const KernelSpec*>& v) {
    std::vector<std::string> out;
    for (auto* k : v) out.push_back(k->name);
    return out;
  };
  EXPECT_EQ(names(r.select("q4_K.*")),
            (std::vector<std::string>{"q4_K.cpu.avx2_q8k", "q4_K.cpu.scalar_f32", "q4_K.cuda.dp4a_q8_1"}));
  EXPECT_EQ(names(r.select("*.scalar")), (std::vector<std::string>{"q4_K.cpu.scalar_f32", "q6_K.cpu.scalar_f32"}));
  EXPECT_EQ(names(r.select("*dp4a*")), (std::vector<std::string>{"q4_K.cuda.dp4a_q8_1", "q6_K.cuda.halfwarp_dp4a_q8_1"}));
  EXPECT_EQ(names(r.select("q6_K.cpu.scalar_f32,q4_K.cuda.*")),
            (std::vector<std::string>{"q4_K.cuda.dp4a_q8_1", "q6_K.cpu.scalar_f32"}));
  EXPECT_TRUE(r.select("q5_K.*").empty());
  EXPECT_TRUE(r.select("q4_K.cpu.scala").empty());  // globs match whole names
  ASSERT_NE(r.find("q6_K.cuda.halfwarp_dp4a_q8_1"), nullptr);
  EXPECT_EQ(r.find("nope"), nullptr);

  // Exclusions take out what they match wherever they stand; alone they keep the rest.
  EXPECT_EQ(names(r.select("q4_K.*,!*.cuda.*")), (std::vector<std::string>{"q4_K.cpu.avx2_q8k", "q4_K.cpu.scalar_f32"}));
  EXPECT_EQ(names(r.select("!q4_K.cpu.avx2_q8k,q4_K.cpu.*")), (std::vector<std::string>{"q4_K.cpu.scalar_f32"}));
  EXPECT_EQ(names(r.select("!*.cpu.*")),
            (std::vector<std::string>{"q4_K.cuda.dp4a_q8_1", "q6_K.cuda.halfwarp_dp4a_q8_1"}));
  EXPECT_TRUE(r.select("q6_K.cpu.*,!*.scalar_f32").empty());
  EXPECT_TRUE(r.select("!").empty());  // a bare "!" excludes nothing and selects nothing
  EXPECT_TRUE(glob_match_any("*,!q4_K.*", "q6_K.cpu.scalar_f32"));
  EXPECT_FALSE(glob_match_any("*,!q4_K.*", "q4_K.cpu.scalar_f32"));
  EXPECT_TRUE(glob_match_any("!q4_K.*", "q6_K.cpu.scalar_f32"));
  EXPECT_FALSE(glob_match_any("", "q6_K.cpu.scalar_f32"));
  const std::vector<std::string> all = {"q4_K.cpu.scalar_f32", "q6_K.cuda.halfwarp_dp4a_q8_1"};
  EXPECT_EQ(unmatched_exclusions("*,!q4_K.cpu.*,!q5_K.*,!*.cuda.tma*", all),
            (std::vector<std::string>{"!q5_K.*", "!*.cuda.tma*"}));
  EXPECT_TRUE(unmatched_exclusions("q5_K.*", all).empty());
}

TEST(Registry, GlobalRegistryHasTheReferenceKernels) {
  EXPECT_TRUE(registry_startup_errors().empty());
  for (const char* n : {"q4_K.cpu.scalar_f32", "q5_K.cpu.scalar_f32", "q6_K.cpu.scalar_f32", "q4_K.cpu.scalar_q8k",
                        "q5_K.cpu.scalar_q8k", "q6_K.cpu.scalar_q8k"}) {
    const KernelSpec* k = global_registry().find(n);
    ASSERT_NE(k, nullptr) << n;
    EXPECT_EQ(k->backend, Backend::CPU);
    EXPECT_FALSE(k->description.empty()) << n;
    EXPECT_TRUE(availability(*k).available) << n << ": " << availability(*k).reason;
  }
  std::set<std::string> names;
  for (const auto& k : global_registry().all()) EXPECT_TRUE(names.insert(k.name).second) << k.name;
}

TEST(Registry, NamesFollowTheConvention) {
  // weights.backend.variant; a peer's kernels weights.peer.backend[_variant]; test-only
  // kernels carry a "test." prefix. No fourth part: a count of units is part of the
  // variant (warpx3_f32), not a parameter after it.
  for (const auto& k : global_registry().all()) {
    if (k.name.rfind("test.", 0) == 0) continue;
    const std::string prefix = k.peer.empty()
                                   ? fmt::format("{}.{}.", to_string(k.weight), to_string(k.backend))
                                   : fmt::format("{}.{}.{}", to_string(k.weight), k.peer, to_string(k.backend));
    EXPECT_EQ(k.name.rfind(prefix, 0), 0u) << k.name << " should start with " << prefix;
    EXPECT_EQ(std::count(k.name.begin(), k.name.end(), '.'), 2) << k.name << " should have three parts";
  }
}

// A prefetch modifier (`_nopf`, `_l2pf`: kernels/README.md, "Names") names a second
// kernel of the same loop, so its twin without the modifier is there too and takes the
// same op, types, vector counts, CPU features and weight copy: `auto` and the bench then
// compare the two prefetch policies on one loop and nothing else.
TEST(Registry, EveryPrefetchVariantHasItsTwin) {
  const std::regex modifier(R"(_(nopf|l2pf)(?=_|$))");
  int variants = 0;
  std::set<std::string> kinds;
  for (const auto& k : global_registry().all()) {
    std::smatch m;
    if (!std::regex_search(k.name, m, modifier)) continue;
    ++variants;
    kinds.insert(m[1]);
    const std::string twin_name = std::regex_replace(k.name, modifier, "");
    const KernelSpec* twin = global_registry().find(twin_name);
    ASSERT_NE(twin, nullptr) << k.name << " has no twin " << twin_name;
    EXPECT_EQ(twin->name, twin_name) << k.name << ": its twin is a former name";
    EXPECT_EQ(twin->op, k.op) << k.name;
    EXPECT_EQ(twin->weight, k.weight) << k.name;
    EXPECT_EQ(twin->act, k.act) << k.name;
    EXPECT_EQ(twin->max_n, k.max_n) << k.name;
    EXPECT_EQ(twin->cpu_features, k.cpu_features) << k.name;
    EXPECT_EQ(twin->prepare, k.prepare) << k.name << ": the twins read different weight copies";
  }
  // Both modifiers are in the registry: the batch loops prefetching to L2 (Q4_K and Q6_K
  // on AVX2 and AVX-512 VNNI, the legacy types on AVX-512 VNNI), the matvec loops without.
  EXPECT_EQ(kinds, (std::set<std::string>{"l2pf", "nopf"}));
  EXPECT_EQ(global_registry().select("*_batch_l2pf_*").size(), 11u);
  EXPECT_GT(variants, 11);
}

// Parallelism has one spelling, <unit>[x<N>] (kernels/README.md, "Names"): N units
// together, the unit a plain row (left out: avx2_x4_q8k), an eight-row interleaved block
// (r8x2) or the thread group that owns a row (warp_f32, warpx3_f32, halfwarp_dp4a_q8_1).
// None of the spellings it replaced is left in a name, and each still selects its kernel.
TEST(Registry, ParallelismHasOneSpelling) {
  const std::regex former_spellings(R"([0-9]row|warp_row|multiwarp|\.w[0-9])");
  for (const auto& k : global_registry().all())
    EXPECT_FALSE(std::regex_search(k.name, former_spellings)) << k.name << " spells its parallelism the old way";

  struct Renamed {
    const char* former;
    const char* current;
  };
  const Renamed renamed[] = {
      {"q4_K.cpu.avx2_4row_q8k", "q4_K.cpu.avx2_x4_q8k"},
      {"q4_K.cpu.avx512vnni_2row_q8k", "q4_K.cpu.avx512vnni_x2_q8k"},
      {"q6_K.cpu.avx2_2row_q8k", "q6_K.cpu.avx2_x2_q8k"},
      {"q8_0.cpu.avx512vnni_4row_q8_1", "q8_0.cpu.avx512vnni_x4_q8_1"},
      {"f16.cpu.avx2_4row", "f16.cpu.avx2_x4"},
      {"q4_K.cpu.avx512_vnni_4row", "q4_K.cpu.avx512vnni_x4_q8k"},  // a name two renames old
      {"bf16.cuda.warp_row", "bf16.cuda.warp"},
      {"q4_K.cuda.warp_row_f32", "q4_K.cuda.warp_f32"},
      {"q5_0.cuda.warp_row_dp4a_q8_1", "q5_0.cuda.warp_dp4a_q8_1"},
      {"q6_K.cuda.multiwarp_f32.w3", "q6_K.cuda.warpx3_f32"},
      {"q4_K.cuda.multiwarp_dp4a_q8_1.w2", "q4_K.cuda.warpx2_dp4a_q8_1"},
      {"q4_K.cuda.mwv.w4", "q4_K.cuda.warpx4_f32"},  // a name two renames old
      {"q8_0.cuda.legacy", "q8_0.cuda.warp_f32"},
  };
  const bool cuda_built = !global_registry().select("*.cuda.*").empty();
  for (const Renamed& r : renamed) {
    EXPECT_EQ(current_kernel_name(r.former), r.current) << r.former;
    if (!cuda_built && std::string_view(r.current).find(".cuda.") != std::string_view::npos) continue;
    const KernelSpec* now = global_registry().find(r.current);
    ASSERT_NE(now, nullptr) << r.current;
    EXPECT_EQ(global_registry().find(r.former), now) << r.former;
  }
  // Every former name of the table leads straight to a kernel's current name: no chains.
  for (const FormerName& f : former_kernel_names()) {
    EXPECT_EQ(current_kernel_name(f.current), f.current) << f.former << " -> " << f.current << " -> ...";
    EXPECT_FALSE(std::regex_search(std::string(f.current), former_spellings)) << f.former << " -> " << f.current;
  }
  // A glob of the old spelling selects the renamed kernels: every CPU one of them here.
  const auto rows = global_registry().select("*.cpu.*_4row*,*.cpu.*_2row*");
  EXPECT_EQ(rows.size(), 21u);
  for (const KernelSpec* k : rows) EXPECT_TRUE(std::regex_search(k->name, std::regex(R"(_x[24](_|$))"))) << k->name;
}

// The variant says the technique, then the activation format wherever the weight type
// does not fix it (every quantized type): q4_K.cuda.warpx3_f32, f16.cpu.avx2_x4.
TEST(Registry, NamesSayTheActivationFormat) {
  for (const auto& k : global_registry().all()) {
    if (k.name.rfind("test.", 0) == 0) continue;
    if (!k.peer.empty()) continue;  // a peer names its kernels its own way
    const std::string variant = k.name.substr(k.name.find('.', k.name.find('.') + 1) + 1);
    const bool float_weights = k.weight == WeightType::F32 || k.weight == WeightType::F16 || k.weight == WeightType::BF16;
    const std::string suffix = k.act == ActFormat::F32 ? "_f32" : k.act == ActFormat::Q8_K ? "_q8k" : "_q8_1";
    const bool has_suffix = variant.size() > suffix.size() && variant.ends_with(suffix);
    EXPECT_EQ(has_suffix, !float_weights) << k.name;
    if (float_weights) {
      for (const char* act : {"_f32", "_q8k", "_q8_1"}) EXPECT_FALSE(variant.ends_with(act)) << k.name;
    }
  }
}

TEST(Registry, FormerNamesSelectTheKernelsTheyNameNow) {
  ASSERT_FALSE(former_kernel_names().empty());
  // A build without CUDA registers no CUDA kernel, so their former names name nothing.
  const bool cuda_built = !global_registry().select("*.cuda.*").empty();
  int cuda_names_not_checked = 0;
  for (const FormerName& f : former_kernel_names()) {
    if (!cuda_built && f.current.find(".cuda.") != std::string_view::npos) {
      ++cuda_names_not_checked;
      continue;
    }
    const KernelSpec* now = global_registry().find(f.current);
    ASSERT_NE(now, nullptr) << f.former << " -> " << f.current << ": no such kernel";
    EXPECT_NE(f.former, f.current);
    EXPECT_EQ(global_registry().find(f.former), now) << f.former;
    EXPECT_EQ(current_kernel_name(f.former), f.current);
    EXPECT_EQ(current_kernel_name(f.current), f.current) << "a current name is also a former one";
    const auto selected = global_registry().select(std::string(f.former));
    ASSERT_EQ(selected.size(), 1u) << f.former;
    EXPECT_EQ(selected[0], now);
  }
  // A glob of former names selects the current kernels; one that matches current names
  // too selects only those, each once.
  const auto warpx = global_registry().select("q4_K.cuda.mwv*");
  EXPECT_EQ(warpx.size(), cuda_built ? 6u : 0u);
  for (const KernelSpec* k : warpx) EXPECT_EQ(k->name.rfind("q4_K.cuda.warpx", 0), 0u) << k->name;
  EXPECT_EQ(global_registry().select("*").size(), global_registry().all().size());
  EXPECT_EQ(global_registry().select("q4_K.cpu.avx2_raw,q4_K.cpu.avx2_q8k").size(), 1u);
  EXPECT_EQ(global_registry().find("q4_K.cpu.no_such_variant"), nullptr);
  if (cuda_names_not_checked > 0)
    GTEST_SKIP() << "built without CUDA: " << cuda_names_not_checked << " former names of CUDA kernels not checked";
}

TEST(Requirements, CpuFeatureChecks) {
  EXPECT_EQ(missing_cpu_features(0), 0u);
  EXPECT_EQ(cpu_feature_names(CpuFeature::AVX2 | CpuFeature::FMA), "avx2 fma");
  // Whatever this CPU is, a feature reported missing must be one that was asked for.
  const std::uint32_t all = CpuFeature::AVX2 | CpuFeature::FMA | CpuFeature::F16C | CpuFeature::AVX512F |
                            CpuFeature::AVX512BW | CpuFeature::AVX512VL | CpuFeature::AVX512VNNI;
  EXPECT_EQ(missing_cpu_features(all) & ~all, 0u);
  KernelSpec s = spec_named("q4_K.cpu.needs_all");
  s.cpu_features = all;
  const Availability av = availability(s);
  EXPECT_EQ(av.available, missing_cpu_features(all) == 0);
  if (!av.available) {
    EXPECT_NE(av.reason.find("CPU lacks"), std::string::npos);
  }
}

TEST(Requirements, CudaKernelWithoutDeviceIsUnavailableWithReason) {
  KernelSpec s = spec_named("q4_K.cuda.fake");
  s.backend = Backend::CUDA;
  s.min_sm = 9999;  // no device is this new, so it is never available
  const Availability av = availability(s);
  EXPECT_FALSE(av.available);
  EXPECT_FALSE(av.reason.empty());
}

TEST(Invoke, BadArgumentsAreRefusedBeforeTheKernelRuns) {
  static int calls = 0;
  KernelSpec s = spec_named("q4_K.cpu.counting");
  s.run = [](const MatVecArgs&) {
    ++calls;
    return Status::Ok();
  };
  std::vector<std::uint8_t> w(4 * row_bytes(WeightType::Q4_K, 512));
  std::vector<float> x(512), y(4);
  MatVecArgs a;
  a.shape = {4, 512};
  a.w = w.data();
  a.w_bytes = w.size();
  a.x = x.data();
  a.x_bytes = x.size() * sizeof(float);
  a.y = y.data();
  a.y_len = y.size();
  ASSERT_TRUE(invoke(s, a).ok());
  ASSERT_EQ(calls, 1);

  auto expect_refused = [&](MatVecArgs bad, const char* what) {
    const Status st = invoke(s, bad);
    EXPECT_FALSE(st.ok()) << what;
    EXPECT_NE(st.error.find(what), std::string::npos) << st.error;
  };
  MatVecArgs b = a;
  b.w_bytes -= 1;
  expect_refused(b, "weights hold");
  b = a;
  b.y_len = 3;
  expect_refused(b, "output holds");
  b = a;
  b.x_bytes = 511 * sizeof(float);
  expect_refused(b, "activation holds");
  b = a;
  b.x = nullptr;
  expect_refused(b, "null activation");
  b = a;
  b.shape = {4, 500};
  expect_refused(b, "not supported (needs rows >= 1, cols % 256 == 0)");
  b = a;
  b.threads = 0;
  expect_refused(b, "threads must be >= 1");
  EXPECT_EQ(calls, 1);
}

TEST(BytesMoved, CountsWeightsActivationAndOutput) {
  KernelSpec s = spec_named("q4_K.cpu.x");
  s.act = ActFormat::Q8_K;
  const Shape sh{10, 512};
  EXPECT_EQ(bytes_moved(s, sh), 10u * 2 * 144 + 2 * 292 + 10 * 4);
  s.op = OpKind::FusedUpGate;
  EXPECT_EQ(bytes_moved(s, sh), 2 * (10u * 2 * 144 + 10 * 4) + 2 * 292);
  EXPECT_DOUBLE_EQ(flops(s, sh), 2.0 * 2 * 10 * 512);
}

}  // namespace
}  // namespace qmv

namespace qmv {
namespace {

TEST(Tiling, EveryRowExactlyOnceForAnyTileAndThreshold) {
  const CpuTiling saved = cpu_tiling();
  for (std::int64_t tile : {1, 7, 64, 1000})
    for (std::int64_t min_parallel : {0, 100, 1 << 20})
      for (std::int64_t rows : {1, 3, 63, 64, 65, 257, 4099}) {
        set_cpu_tiling({tile, min_parallel});
        std::vector<int> hits(static_cast<std::size_t>(rows), 0);
        parallel_row_tiles(rows, 2, [&](std::int64_t r0, std::int64_t r1) {
          ASSERT_LE(r1 - r0, tile);
          for (std::int64_t r = r0; r < r1; ++r) ++hits[static_cast<std::size_t>(r)];  // tiles are disjoint
        });
        for (std::int64_t r = 0; r < rows; ++r)
          ASSERT_EQ(hits[static_cast<std::size_t>(r)], 1) << "tile " << tile << " rows " << rows << " row " << r;
      }
  set_cpu_tiling(saved);
}

TEST(Tiling, TilesAreBalancedOverThreads) {
  const CpuTiling saved = cpu_tiling();
  set_cpu_tiling({64, 0});
  for (std::int64_t rows : {192, 576, 1536, 2048, 49152, 11008}) {
    for (int threads : {2, 3}) {
      const std::int64_t h = balanced_tile_rows(rows, threads);
      const std::int64_t tiles = (rows + h - 1) / h;
      EXPECT_LE(h, 64);
      // The busiest thread's rows against an even share (a 64-row tile grid would
      // give 192 rows on 2 threads a 1.33 split).
      const double busiest = double((tiles + threads - 1) / threads * h) / (double(rows) / threads);
      EXPECT_LE(busiest, 1.05)
          << rows << " rows, " << threads << " threads, tile " << h;
    }
  }
  set_cpu_tiling(saved);
}

}  // namespace
}  // namespace qmv
