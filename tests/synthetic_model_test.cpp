// The streaming GGUF writer and the synthetic model generator: files read back through
// our reader, the model config and the tokenizer; the tensor types of each mix as
// llama.cpp assigns them; determinism; and `qmvlab make-model` end to end.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <random>
#include <set>

#include "kernels/formats/formats.h"
#include "model/config.h"
#include "model/gguf.h"
#include "model/gguf_writer.h"
#include "model/synthetic.h"
#include "model/tokenizer.h"
#include "tests/cli_run.h"
#include "tests/gguf_writer.h"
#include "tests/test_seed.h"

namespace qmv {
namespace {

namespace fs = std::filesystem;

std::string tmp(const std::string& name) {
  const std::string dir = std::string(QMV_TEST_TMP) + "/synthetic";
  fs::create_directories(dir);
  return dir + "/" + name;
}

std::vector<std::uint8_t> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

#define EXPECT_ERROR(statement, phrase)                                        \
  do {                                                                         \
    const std::string message_ = error_of([&] { statement; });                 \
    EXPECT_NE(message_.find(phrase), std::string::npos) << "error: '" << message_ << "'"; \
  } while (0)

// ---------------------------------------------------------------------------------
// The writer.

struct RandomTensor {
  std::string name;
  std::vector<std::uint64_t> dims;
  std::uint32_t type;
  std::vector<std::uint8_t> bytes;
};

TEST(GgufWriter, EveryValueKindAndTensorReadsBackBitExact) {
  std::mt19937_64 rng(qmv::testing::fresh_seed());
  for (std::uint32_t alignment : {32u, 64u}) {
    const std::string path = tmp("roundtrip.gguf");
    fs::remove(path);
    const auto u32 = static_cast<std::uint32_t>(rng());
    const auto i32 = -static_cast<std::int32_t>(rng() % 1000000) - 1;
    const std::uint64_t u64 = rng();
    const float f32 = std::normal_distribution<float>(0, 100)(rng);
    std::vector<std::string> strings;
    for (int k = 0; k < 1 + static_cast<int>(rng() % 20); ++k)
      strings.push_back(std::string(rng() % 13, static_cast<char>('a' + rng() % 26)) + "\xC4\xA0" + std::to_string(rng()));
    std::vector<std::int32_t> ints(1 + rng() % 50);
    for (auto& x : ints) x = static_cast<std::int32_t>(rng());
    std::vector<float> floats(1 + rng() % 50);
    for (auto& x : floats) x = std::normal_distribution<float>()(rng);

    // Tensors of several types, row lengths a random multiple of the block.
    std::vector<RandomTensor> tensors;
    for (std::uint32_t type : {0u, 1u, 2u, 8u, 12u, 14u, 30u, 3u}) {
      const gguf::TypeInfo* info = gguf::type_info(type);
      RandomTensor t;
      t.name = "t." + std::string(info->name) + "." + std::to_string(tensors.size());
      t.type = type;
      t.dims = {info->block_elems * (1 + rng() % 5)};
      for (std::uint64_t extra = rng() % 3; extra > 0; --extra) t.dims.push_back(1 + rng() % 4);
      std::uint64_t n = 1;
      for (auto d : t.dims) n *= d;
      t.bytes.resize(n / info->block_elems * info->block_bytes);
      for (auto& b : t.bytes) b = static_cast<std::uint8_t>(rng());
      tensors.push_back(t);
    }

    gguf::Writer w(alignment);
    w.add_string("general.architecture", "test");
    w.add_u32("k.u32", u32);
    w.add_i32("k.i32", i32);
    w.add_u64("k.u64", u64);
    w.add_f32("k.f32", f32);
    w.add_bool("k.true", true);
    w.add_bool("k.false", false);
    w.add_string("k.empty", "");
    w.add_string_array("k.strings", strings);
    w.add_i32_array("k.ints", ints);
    w.add_f32_array("k.floats", floats);
    for (const auto& t : tensors) EXPECT_EQ(w.add_tensor(t.name, t.dims, t.type), t.bytes.size());
    const std::uint64_t predicted = w.file_size();
    w.begin(path);
    for (std::size_t k = 0; k < tensors.size(); ++k) {
      const auto& t = tensors[k];
      if (k % 2 == 0) {
        w.write_tensor(t.name, t.bytes);
      } else {  // in random parts, an empty one included
        std::size_t at = 0;
        w.write_tensor_part(t.name, std::span<const std::uint8_t>(t.bytes.data(), 0));
        while (at < t.bytes.size()) {
          const std::size_t n = std::min<std::size_t>(1 + rng() % 40, t.bytes.size() - at);
          w.write_tensor_part(t.name, std::span<const std::uint8_t>(t.bytes.data() + at, n));
          at += n;
        }
      }
    }
    EXPECT_FALSE(fs::exists(path)) << "the file appears only when finished";
    w.finish();
    EXPECT_FALSE(fs::exists(path + ".partial"));
    EXPECT_EQ(fs::file_size(path), predicted);

    const gguf::File f = gguf::File::open(path);
    EXPECT_EQ(f.version(), 3u);
    EXPECT_EQ(f.alignment(), alignment);
    EXPECT_EQ(f.data_offset() % alignment, 0u);
    EXPECT_EQ(f.get_string("general.architecture"), "test");
    EXPECT_EQ(f.find("k.u32")->type, gguf::ValueType::UINT32);
    EXPECT_EQ(f.get_uint("k.u32"), u32);
    EXPECT_EQ(f.find("k.i32")->type, gguf::ValueType::INT32);
    EXPECT_EQ(f.find("k.i32")->i, i32);
    EXPECT_EQ(f.get_uint("k.u64"), u64);
    EXPECT_EQ(f.find("k.f32")->type, gguf::ValueType::FLOAT32);
    EXPECT_EQ(static_cast<float>(*f.get_float("k.f32")), f32);
    EXPECT_EQ(f.find("k.true")->type, gguf::ValueType::BOOL);
    EXPECT_EQ(f.find("k.true")->u, 1u);
    EXPECT_EQ(f.find("k.false")->u, 0u);
    EXPECT_EQ(f.get_string("k.empty"), "");
    const gguf::Value* s = f.find("k.strings");
    ASSERT_EQ(s->count, strings.size());
    for (std::size_t k = 0; k < strings.size(); ++k) EXPECT_EQ(f.array_string(*s, k), strings[k]);
    const gguf::Value* iv = f.find("k.ints");
    ASSERT_EQ(iv->elem_type, gguf::ValueType::INT32);
    ASSERT_EQ(iv->count, ints.size());
    for (std::size_t k = 0; k < ints.size(); ++k) EXPECT_EQ(f.array_number(*iv, k), ints[k]);
    const gguf::Value* fv = f.find("k.floats");
    ASSERT_EQ(fv->elem_type, gguf::ValueType::FLOAT32);
    for (std::size_t k = 0; k < floats.size(); ++k) EXPECT_EQ(static_cast<float>(f.array_number(*fv, k)), floats[k]);
    EXPECT_EQ(f.get_uint("general.alignment"), alignment);

    ASSERT_EQ(f.tensors().size(), tensors.size());
    for (std::size_t k = 0; k < tensors.size(); ++k) {
      const gguf::Tensor& t = f.tensors()[k];
      EXPECT_EQ(t.name, tensors[k].name);
      EXPECT_EQ(t.dims, tensors[k].dims);
      EXPECT_EQ(t.type->id, tensors[k].type);
      EXPECT_EQ(t.offset % alignment, 0u);
      ASSERT_EQ(t.bytes, tensors[k].bytes.size());
      EXPECT_EQ(std::memcmp(t.data, tensors[k].bytes.data(), t.bytes), 0) << t.name;
    }
    fs::remove(path);
  }
}

TEST(GgufWriter, RefusesWrongSizesOrderAndDeclarations) {
  const std::string path = tmp("refused.gguf");
  std::vector<std::uint8_t> q4k(144 * 2, 0x5a), f32(4 * 8, 0x11);
  {
    gguf::Writer w;
    w.add_u32("a", 1);
    EXPECT_ERROR(w.add_u32("a", 2), "duplicate metadata key 'a'");
    EXPECT_ERROR(w.add_u32("general.alignment", 64), "set by the writer");
    EXPECT_ERROR(w.add_tensor("bad", {100, 2}, 12), "row length 100 is not a multiple of Q4_K's block of 256");
    EXPECT_ERROR(w.add_tensor("bad", {256}, 99), "unknown ggml type id 99");
    EXPECT_ERROR(w.add_tensor("bad", {256, 0}, 0), "zero dimension");
    EXPECT_ERROR(w.add_tensor("bad", {1, 1, 1, 1, 1}, 0), "5 dimensions");
    w.add_tensor("q", {256, 2}, 12);
    w.add_tensor("f", {8}, 0);
    EXPECT_ERROR(w.add_tensor("q", {256}, 12), "duplicate tensor name 'q'");
    EXPECT_ERROR(w.write_tensor("q", q4k), "before begin()");
    w.begin(path);
    EXPECT_ERROR(w.add_u32("b", 1), "after begin()");
    EXPECT_ERROR(w.add_tensor("g", {8}, 0), "after begin()");
    // Wrong byte counts, whole or in parts.
    EXPECT_ERROR(w.write_tensor("q", std::span(q4k.data(), q4k.size() - 1)), "tensor 'q' is 288 bytes (Q4_K), got 287");
    std::vector<std::uint8_t> longer(q4k.size() + 1);
    EXPECT_ERROR(w.write_tensor("q", longer), "tensor 'q' is 288 bytes (Q4_K), got 289");
    // Order and names.
    EXPECT_ERROR(w.write_tensor("f", f32), "tensor 'f' written out of order: 'q' comes next");
    EXPECT_ERROR(w.write_tensor("nope", f32), "tensor 'nope' was not declared");
    w.write_tensor_part("q", std::span(q4k.data(), 100));
    EXPECT_ERROR(w.write_tensor_part("f", f32), "tensor 'q' is incomplete (100 of 288 bytes written)");
    EXPECT_ERROR(w.write_tensor_part("q", std::span(q4k.data(), 189)), "100 written and 189 more given");
    EXPECT_ERROR(w.finish(), "only 0 of 2 tensors written; 'q' is next");
    w.write_tensor_part("q", std::span(q4k.data() + 100, 188));
    EXPECT_ERROR(w.write_tensor("q", q4k), "tensor 'q' written twice");
    // Abandoned: the writer goes away without finish().
  }
  EXPECT_FALSE(fs::exists(path));
  EXPECT_FALSE(fs::exists(path + ".partial")) << "an abandoned file is removed";
}

TEST(GgufWriter, IoFailuresNameThePathAndTheReason) {
  gguf::Writer w;
  w.add_u32("a", 1);
  const std::string missing = tmp("no/such/dir/model.gguf");
  EXPECT_ERROR(w.begin(missing), missing + ": cannot create " + missing + ".partial: No such file or directory");
  gguf::Writer w2;
  EXPECT_ERROR(w2.begin("/proc/qmvlab-model.gguf"), "/proc/qmvlab-model.gguf: cannot create");
  EXPECT_ERROR(gguf::Writer(48), "alignment 48 is not a power of two");
  // A full disk: the partial file is a link to /dev/full, where every write fails.
  const std::string full = tmp("full.gguf");
  fs::remove(full + ".partial");
  fs::create_symlink("/dev/full", full + ".partial");
  {
    gguf::Writer w3;
    w3.add_tensor("t", {1 << 16}, 0);
    const std::vector<std::uint8_t> bytes(4 << 16, 0x3c);
    EXPECT_ERROR({
      w3.begin(full);
      w3.write_tensor("t", bytes);
    }, full + ": write failed after 0 bytes: No space left on device");
  }
  EXPECT_FALSE(fs::exists(full));
  EXPECT_FALSE(fs::is_symlink(full + ".partial")) << "the abandoned partial file is removed";
}

// ---------------------------------------------------------------------------------
// Plans: types per tensor as llama.cpp's quantizer assigns them.

SyntheticSpec spec_of(const std::string& preset, const std::string& mix, const std::string& arch = "", int layers = 0,
                      int vocab = 0) {
  SyntheticSpec s;
  s.preset = preset;
  s.mix = mix;
  s.arch = arch;
  if (layers) s.layers = layers;
  if (vocab) s.vocab = vocab;
  return s;
}

const SyntheticTensor& find(const SyntheticPlan& p, const std::string& name) {
  for (const auto& t : p.tensors)
    if (t.name == name) return t;
  throw std::runtime_error("no tensor " + name);
}

TEST(SyntheticPlan, Q4KMGivesMoreBitsToTheLayersLlamaCppDoes) {
  // Layers with Q6_K attn_v / ffn_down, worked out by hand from llama.cpp's rule: the
  // first n/8 and last n/8 (rounded down), and every third from n/8 + 2.
  const std::map<std::string, std::set<int>> more_bits = {
      {"llama-2-7b", {0, 1, 2, 3, 6, 9, 12, 15, 18, 21, 24, 27, 28, 29, 30, 31}},  // 32 layers
      {"tinyllama-1.1b", {0, 1, 4, 7, 10, 13, 16, 19, 20, 21}},                    // 22 layers
      {"qwen3-0.6b", {0, 1, 2, 5, 8, 11, 14, 17, 20, 23, 24, 25, 26, 27}},          // 28 layers
  };
  for (const auto& [preset, layers] : more_bits) {
    const SyntheticPlan p = plan_synthetic_model(spec_of(preset, "q4_K_m"));
    for (int i = 0; i < p.shape.n_layers; ++i) {
      const std::string b = "blk." + std::to_string(i) + ".";
      const WeightType want = layers.count(i) ? WeightType::Q6_K : WeightType::Q4_K;
      EXPECT_EQ(find(p, b + "attn_v.weight").type, want) << preset << " " << b;
      EXPECT_EQ(find(p, b + "ffn_down.weight").type, want) << preset << " " << b;
      for (const char* other : {"attn_q", "attn_k", "attn_output", "ffn_gate", "ffn_up"})
        EXPECT_EQ(find(p, b + other + ".weight").type, WeightType::Q4_K) << preset << " " << b << other;
      EXPECT_EQ(find(p, b + "attn_norm.weight").type, WeightType::F32);
    }
    EXPECT_EQ(p.file_type, 15u);  // LLAMA_FTYPE_MOSTLY_Q4_K_M
    if (p.shape.tied) {
      // The lm_head is token_embd: Q6_K as llama.cpp gives the output.
      EXPECT_EQ(find(p, "token_embd.weight").type, WeightType::Q6_K);
    } else {
      EXPECT_EQ(find(p, "token_embd.weight").type, WeightType::Q4_K);
      EXPECT_EQ(find(p, "output.weight").type, WeightType::Q6_K);
    }
  }
}

TEST(SyntheticPlan, RowLengthsThatDoNotFitFallBackAsLlamaCpp) {
  // Qwen2.5-0.5B: width 896 = 3.5 x 256, so every matrix reading the width falls back;
  // ffn_down reads 4864 = 19 x 256 and keeps its K-quant.
  const SyntheticPlan p = plan_synthetic_model(spec_of("qwen2.5-0.5b", "q4_K_m"));
  for (const char* m : {"attn_q", "attn_k", "attn_output", "ffn_gate", "ffn_up"})
    EXPECT_EQ(find(p, std::string("blk.5.") + m + ".weight").type, WeightType::Q5_0) << m;
  EXPECT_EQ(find(p, "blk.0.attn_v.weight").type, WeightType::Q8_0);  // Q6_K layer
  EXPECT_EQ(find(p, "blk.4.attn_v.weight").type, WeightType::Q5_0);  // Q4_K layer
  EXPECT_EQ(find(p, "blk.0.ffn_down.weight").type, WeightType::Q6_K);
  EXPECT_EQ(find(p, "blk.4.ffn_down.weight").type, WeightType::Q4_K);
  EXPECT_EQ(find(p, "token_embd.weight").type, WeightType::Q8_0);  // tied: Q6_K -> Q8_0
  EXPECT_EQ(find(p, "blk.3.attn_q.bias").type, WeightType::F32);
  const auto lines = p.fallbacks();
  ASSERT_FALSE(lines.empty());
  bool named = false;
  for (const auto& l : lines) named |= l.find("row length 896") != std::string::npos && l.find("q4_K -> q5_0") != std::string::npos;
  EXPECT_TRUE(named) << lines.front();
  // The other uniform K-quants.
  EXPECT_EQ(find(plan_synthetic_model(spec_of("qwen2.5-0.5b", "q5_K")), "blk.1.attn_q.weight").type, WeightType::Q5_1);
  EXPECT_EQ(find(plan_synthetic_model(spec_of("qwen2.5-0.5b", "q6_K")), "blk.1.ffn_up.weight").type, WeightType::Q8_0);
  // Not even a multiple of 32: F16, for every quantized type.
  for (WeightType t : {WeightType::Q4_K, WeightType::Q5_K, WeightType::Q6_K, WeightType::Q4_0, WeightType::Q8_0})
    EXPECT_EQ(fallback_type(t, 48 + 256), WeightType::F16) << to_string(t);
  EXPECT_EQ(fallback_type(WeightType::Q8_0, 96), WeightType::Q8_0);
  EXPECT_EQ(fallback_type(WeightType::BF16, 7), WeightType::BF16);
  // The full presets' other widths are multiples of 256: no fallback at all.
  for (const char* preset : {"toy", "tinyllama-1.1b", "llama-2-7b", "qwen3-0.6b"})
    EXPECT_TRUE(plan_synthetic_model(spec_of(preset, "q4_K_m")).fallbacks().empty()) << preset;
}

TEST(SyntheticPlan, PresetsHaveTheRealModelsShapes) {
  struct Want {
    const char* preset;
    const char* arch;
    int layers, embd, ff, heads, kv, head_dim, vocab, context;
    bool tied;
    double params_billions;  // as published, within 5%
  };
  const Want wants[] = {
      {"tinyllama-1.1b", "llama", 22, 2048, 5632, 32, 4, 64, 32000, 2048, false, 1.10},
      {"llama-2-7b", "llama", 32, 4096, 11008, 32, 32, 128, 32000, 4096, false, 6.74},
      {"qwen2.5-0.5b", "qwen2", 24, 896, 4864, 14, 2, 64, 151936, 32768, true, 0.494},
      {"qwen3-0.6b", "qwen3", 28, 1024, 3072, 16, 8, 128, 151936, 40960, true, 0.596},
  };
  for (const Want& w : wants) {
    const SyntheticPlan p = plan_synthetic_model(spec_of(w.preset, "f16"));
    const SyntheticShape& s = p.shape;
    EXPECT_EQ(s.arch, w.arch);
    EXPECT_EQ(std::vector<int>({s.n_layers, s.n_embd, s.n_ff, s.n_head, s.n_head_kv, s.head_dim, s.vocab, s.context}),
              std::vector<int>({w.layers, w.embd, w.ff, w.heads, w.kv, w.head_dim, w.vocab, w.context}))
        << w.preset;
    EXPECT_EQ(s.tied, w.tied) << w.preset;
    EXPECT_NEAR(static_cast<double>(p.params) * 1e-9, w.params_billions, 0.05 * w.params_billions) << w.preset;
    // F16: two bytes a value, four for the (F32) vectors.
    std::uint64_t bytes = 0;
    for (const auto& t : p.tensors) bytes += t.dims.size() == 1 ? 4 * t.dims[0] : 2 * t.dims[0] * t.dims[1];
    EXPECT_EQ(p.tensor_bytes, bytes) << w.preset;
  }
}

// ---------------------------------------------------------------------------------
// Files: every preset, architecture and mix through read_config and bind_weights.

// Writes the model, checks its config and every tensor against the plan, returns the file.
gguf::File make_and_check(const SyntheticSpec& spec, const std::string& path) {
  const MakeModelResult r = make_model(spec, path);
  EXPECT_EQ(fs::file_size(path), r.file_bytes);
  EXPECT_EQ(synthetic_file_size(r.plan), r.file_bytes) << "the dry run's size is exact";
  gguf::File f = gguf::File::open(path);
  const SyntheticShape& s = r.plan.shape;
  const ModelConfig c = read_config(f);
  EXPECT_EQ(c.arch, s.arch);
  EXPECT_EQ(c.name, r.plan.name);
  EXPECT_EQ(std::vector<int>({c.n_layers, c.n_embd, c.n_ff, c.n_head, c.n_head_kv, c.head_dim, c.rope_dim,
                              c.vocab_size, c.context_length}),
            std::vector<int>({s.n_layers, s.n_embd, s.n_ff, s.n_head, s.n_head_kv, s.head_dim, s.head_dim, s.vocab,
                              s.context}))
      << r.plan.name;
  EXPECT_EQ(c.rope_freq_base, s.rope_freq_base);
  EXPECT_EQ(c.rms_eps, s.rms_eps);
  EXPECT_EQ(c.tied_embeddings, s.tied);
  EXPECT_EQ(c.qkv_bias, s.arch == "qwen2");
  EXPECT_EQ(c.qk_norm, s.arch == "qwen3");
  const ModelWeights w = bind_weights(f, c);  // throws on a missing or misshapen tensor
  EXPECT_EQ(w.layers.size(), static_cast<std::size_t>(s.n_layers));
  EXPECT_EQ(f.tensors().size(), r.plan.tensors.size());
  for (const auto& t : r.plan.tensors) {
    const gguf::Tensor* ft = f.find_tensor(t.name);
    if (!ft) {
      ADD_FAILURE() << t.name << " missing";
      continue;
    }
    EXPECT_EQ(ft->dims, t.dims) << t.name;
    WeightType written{};
    EXPECT_TRUE(parse_weight_type(ft->type->name, written)) << ft->type->name;
    EXPECT_EQ(written, t.type) << t.name;
  }
  EXPECT_EQ(f.get_uint("general.file_type"), r.plan.file_type);
  return f;
}

TEST(SyntheticModel, ToyInEveryArchitectureAndMixIsAcceptedByTheRunner) {
  for (const char* arch : {"llama", "qwen2", "qwen3"}) {
    for (const std::string& mix : synthetic_mixes()) {
      SyntheticSpec spec = spec_of("toy", mix, arch);
      spec.tied = mix.size() % 2 == 0;  // both ways across the mixes
      const std::string path = tmp(std::string("toy-") + arch + "-" + mix + ".gguf");
      make_and_check(spec, path);
      fs::remove(path);
    }
  }
}

TEST(SyntheticModel, EveryPresetInEveryArchitectureWithOneLayer) {
  // One layer and the smallest vocabulary keep the big presets small; a mix per
  // case, so that between them they cover quantized and float types.
  const std::vector<std::string> mixes = synthetic_mixes();
  int k = 0;
  for (const std::string& preset : synthetic_presets()) {
    for (const char* arch : {"llama", "qwen2", "qwen3"}) {
      // The 7B layer is 200M weights: a cheap type there.
      const std::string mix = preset == "llama-2-7b" ? "q4_0" : mixes[static_cast<std::size_t>(k++) % mixes.size()];
      const std::string path = tmp(preset + "-" + arch + ".gguf");
      make_and_check(spec_of(preset, mix, arch, 1, 258), path);
      fs::remove(path);
      if (preset == "llama-2-7b") break;  // its other architectures: plan only (below)
    }
  }
  for (const char* arch : {"qwen2", "qwen3"}) {
    const SyntheticPlan p = plan_synthetic_model(spec_of("llama-2-7b", "q4_K_m", arch, 2));
    EXPECT_EQ(find(p, "blk.1.attn_k.weight").dims, (std::vector<std::uint64_t>{4096, 4096}));
    EXPECT_EQ(std::string(arch) == "qwen2", std::any_of(p.tensors.begin(), p.tensors.end(),
                                                        [](const auto& t) { return t.name == "blk.1.attn_v.bias"; }));
  }
}

TEST(SyntheticModel, OverridesReachTheFile) {
  SyntheticSpec spec = spec_of("qwen3-0.6b", "q8_0", "", 3, 1000);
  spec.context = 4096;
  spec.tied = false;
  const std::string path = tmp("overrides.gguf");
  const gguf::File f = make_and_check(spec, path);
  const ModelConfig c = read_config(f);
  EXPECT_EQ(c.n_layers, 3);
  EXPECT_EQ(c.vocab_size, 1000);
  EXPECT_EQ(c.context_length, 4096);
  EXPECT_EQ(c.head_dim, 128);  // qwen3 keeps its own head size: key_length in the file
  EXPECT_EQ(f.get_uint("qwen3.attention.key_length"), 128u);
  EXPECT_FALSE(c.tied_embeddings);
  fs::remove(path);
}

TEST(SyntheticModel, BadSpecsAreNamed) {
  EXPECT_ERROR(plan_synthetic_model(spec_of("gpt-5", "q4_K_m")), "unknown preset 'gpt-5' (presets: toy, ");
  EXPECT_ERROR(plan_synthetic_model(spec_of("toy", "q3_K")), "unknown mix 'q3_K' (mixes: q4_K_m, f32,");
  EXPECT_ERROR(plan_synthetic_model(spec_of("toy", "q4_K_m", "gpt2")), "unknown architecture 'gpt2'");
  EXPECT_ERROR(plan_synthetic_model(spec_of("toy", "q4_K_m", "", -1)), "layer count -1 is out of range");
  EXPECT_ERROR(plan_synthetic_model(spec_of("toy", "q4_K_m", "", 0, 257)), "vocabulary size 257 is out of range");
  EXPECT_ERROR(make_model(spec_of("toy", "f32"), tmp("no/such/dir/x.gguf")), "No such file or directory");
}

// ---------------------------------------------------------------------------------
// Values.

std::vector<float> dequantized(const gguf::Tensor& t) {
  WeightType type{};
  if (!parse_weight_type(t.type->name, type)) throw std::runtime_error("type " + std::string(t.type->name));
  std::vector<float> out(t.elements);
  dequantize_row(type, t.data, out.data(), static_cast<std::int64_t>(t.elements));
  return out;
}

void mean_std(const std::vector<float>& v, double& mean, double& std) {
  double s = 0, ss = 0;
  for (float x : v) s += x;
  mean = s / static_cast<double>(v.size());
  for (float x : v) ss += (x - mean) * (x - mean);
  std = std::sqrt(ss / static_cast<double>(v.size()));
}

TEST(SyntheticModel, ValuesFollowTheDeclaredDistributions) {
  SyntheticSpec spec = spec_of("toy", "f32", "qwen2", 2);
  spec.tied = false;
  spec.seed = qmv::testing::fresh_seed();
  const std::string path = tmp("values.gguf");
  make_model(spec, path);
  const gguf::File f = gguf::File::open(path);
  for (const gguf::Tensor& t : f.tensors()) {
    const std::vector<float> v = dequantized(t);
    double mean = 0, std = 0;
    mean_std(v, mean, std);
    const bool norm = t.name.find("norm") != std::string::npos, bias = t.name.ends_with(".bias");
    double want_mean = 0, want_std = 1.0 / std::sqrt(static_cast<double>(t.dims[0]));
    if (norm) want_mean = 1.0, want_std = 0.1;
    if (bias) want_std = 0.1;
    // The sample std of n normal values has a relative error of about 1/sqrt(2n); allow five of
    // those, so a small tensor (a 32-value bias) does not fail by chance.
    const double std_tolerance = 5.0 / std::sqrt(2.0 * static_cast<double>(v.size()));
    EXPECT_NEAR(std, want_std, std_tolerance * want_std) << t.name << " (" << v.size() << " values)";
    EXPECT_NEAR(mean, want_mean, 5 * want_std / std::sqrt(static_cast<double>(v.size()))) << t.name;
    if (norm) {
      EXPECT_GT(*std::min_element(v.begin(), v.end()), 0.0f) << t.name;
    }
    // Rows differ from one another (no repeated stream).
    if (t.dims.size() == 2) {
      const auto row1 = v.begin() + static_cast<std::ptrdiff_t>(t.dims[0]);
      EXPECT_NE(std::vector<float>(v.begin(), v.begin() + 8), std::vector<float>(row1, row1 + 8)) << t.name;
    }
  }
  fs::remove(path);
}

TEST(SyntheticModel, SeedsAreDeterministicAndIndependentOfThreads) {
  SyntheticSpec spec = spec_of("toy", "q4_K_m", "qwen3");
  spec.seed = qmv::testing::fresh_seed();
  const std::string a = tmp("seed-a.gguf"), b = tmp("seed-b.gguf"), c = tmp("seed-c.gguf");
  make_model(spec, a);
  const int threads = omp_get_max_threads();
  omp_set_num_threads(threads > 1 ? 1 : 3);
  make_model(spec, b);
  omp_set_num_threads(threads);
  spec.seed += 1;
  make_model(spec, c);
  EXPECT_EQ(read_bytes(a), read_bytes(b)) << "same seed, other thread count";
  const gguf::File fa = gguf::File::open(a), fc = gguf::File::open(c);
  for (const gguf::Tensor& t : fa.tensors()) {
    const gguf::Tensor* u = fc.find_tensor(t.name);
    ASSERT_NE(u, nullptr);
    ASSERT_EQ(t.bytes, u->bytes);
    EXPECT_NE(std::memcmp(t.data, u->data, t.bytes), 0) << t.name << " is the same under another seed";
  }
  for (const auto& p : {a, b, c}) fs::remove(p);
}

// ---------------------------------------------------------------------------------
// The tokenizer.

std::string random_text(std::mt19937_64& rng) {
  static const char* pieces[] = {"the", " library", "river", " of", ",", ".", " ", "  ", "\n", "\t", "42", " 7",
                                 "caf\xC3\xA9", "\xE6\x97\xA5\xE6\x9C\xAC", "\xF0\x9F\x98\x80", "<|eos|>", "don't",
                                 "Q", "zebra", "!?", "\xC4\xA0"};
  std::string s;
  const int n = static_cast<int>(rng() % 40);
  for (int i = 0; i < n; ++i) {
    if (rng() % 3 == 0) {
      s += static_cast<char>(0x20 + rng() % 95);  // any printable ASCII
    } else {
      s += pieces[rng() % std::size(pieces)];
    }
  }
  return s;
}

Tokenizer tokenizer_of(const SyntheticVocab& v, std::vector<std::uint8_t>& storage) {
  qmv::testing::GgufWriter w;
  w.add_string("tokenizer.ggml.model", "gpt2");
  w.add_string("tokenizer.ggml.pre", "gpt2");
  w.add_string_array("tokenizer.ggml.tokens", v.tokens);
  w.add_i32_array("tokenizer.ggml.token_type", v.types);
  w.add_string_array("tokenizer.ggml.merges", v.merges);
  w.add_u32("tokenizer.ggml.bos_token_id", static_cast<std::uint32_t>(v.bos));
  w.add_u32("tokenizer.ggml.eos_token_id", static_cast<std::uint32_t>(v.eos));
  storage = w.bytes();
  return Tokenizer::from_gguf(gguf::File::parse(storage));
}

TEST(SyntheticVocab, EveryTokenIsReachableAndTextRoundTrips) {
  std::mt19937_64 rng(qmv::testing::fresh_seed());
  for (int size : {258, 512, 5000 + static_cast<int>(rng() % 20000)}) {
    const SyntheticVocab v = synthetic_vocab(size);
    ASSERT_EQ(v.tokens.size(), static_cast<std::size_t>(size));
    ASSERT_EQ(v.types.size(), v.tokens.size());
    EXPECT_EQ(v.merges.size(), static_cast<std::size_t>(size - 258)) << "one merge per merged token";
    EXPECT_EQ(v.tokens[256], "<|bos|>");
    EXPECT_EQ(v.tokens[257], "<|eos|>");
    EXPECT_EQ(v.types[256], 3);
    EXPECT_EQ(v.types[257], 3);
    EXPECT_EQ(std::set<std::string>(v.tokens.begin(), v.tokens.end()).size(), v.tokens.size()) << "duplicates";
    if (size >= 512) {
      EXPECT_GT(v.learned, 100) << "merges learned from the sample text";
    }
    std::vector<std::uint8_t> storage;
    const Tokenizer t = tokenizer_of(v, storage);
    ASSERT_EQ(t.vocab_size(), size);
    // Each byte token is its byte, in GPT-2's order: '!' first, a space is 'Ġ'.
    std::set<std::string> bytes;
    for (int id = 0; id < 256; ++id) bytes.insert(t.decode(id));
    EXPECT_EQ(bytes.size(), 256u);
    EXPECT_EQ(t.decode(0), "!");
    EXPECT_EQ(v.tokens[static_cast<std::size_t>(t.encode(" ", false).at(0))], "\xC4\xA0");
    // Every merged token is what the tokenizer makes of its own text.
    for (int id = 258; id < size; ++id) {
      const std::string text = t.decode(id);
      ASSERT_EQ(t.encode(text, false), std::vector<int>{id}) << "token " << id << " '" << text << "'";
    }
    for (int k = 0; k < 200; ++k) {
      const std::string text = random_text(rng);
      const std::vector<int> ids = t.encode(text, true);
      ASSERT_FALSE(ids.empty());
      EXPECT_EQ(ids.front(), t.bos());
      EXPECT_EQ(t.decode(std::vector<int>(ids.begin() + 1, ids.end())), text);
    }
  }
  EXPECT_ERROR(synthetic_vocab(257), "too small");
}

TEST(SyntheticModel, FileTokenizerIsTheVocabulary) {
  const std::string path = tmp("tok.gguf");
  make_model(spec_of("toy", "q8_0", "", 1, 700), path);
  const gguf::File f = gguf::File::open(path);
  const Tokenizer t = Tokenizer::from_gguf(f);
  EXPECT_EQ(t.vocab_size(), 700);
  EXPECT_EQ(t.bos(), 256);
  EXPECT_EQ(t.eos(), 257);
  EXPECT_EQ(f.get_string("tokenizer.ggml.pre"), "gpt-2");
  EXPECT_EQ(f.find("tokenizer.ggml.add_bos_token")->u, 1u);
  const std::string text = "The river town woke slowly.<|eos|>";
  const auto ids = t.encode(text, true);
  EXPECT_EQ(ids.front(), 256);
  EXPECT_EQ(ids.back(), 257);
  EXPECT_LT(ids.size(), text.size() / 2) << "learned merges make words few tokens";
  EXPECT_EQ(t.decode(std::vector<int>(ids.begin() + 1, ids.end())), text);
  fs::remove(path);
}

// ---------------------------------------------------------------------------------
// The command line.

using qmv::testing::CliRun;
using qmv::testing::qmvlab;

void expect_cli_error(const std::string& args, const std::string& message) {
  const CliRun r = qmvlab(args);
  EXPECT_EQ(r.code, 2) << args << "\n" << r.output;
  EXPECT_NE(r.output.find(message), std::string::npos) << args << "\n" << r.output;
  EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << "one line:\n" << r.output;
}

TEST(MakeModelCli, ErrorsAreOneLineAndExitTwo) {
  const std::string out = " --out " + tmp("cli-error.gguf");
  expect_cli_error("make-model --preset gpt-5 --mix q4_K_m" + out, "qmvlab: unknown preset 'gpt-5' (presets: toy,");
  expect_cli_error("make-model --preset toy --mix q2_K" + out, "qmvlab: unknown mix 'q2_K' (mixes: q4_K_m,");
  expect_cli_error("make-model --preset toy --mix q4_K_m --arch mamba" + out, "qmvlab: unknown architecture 'mamba'");
  expect_cli_error("make-model --preset toy --mix q4_K_m --vocab 100" + out, "vocabulary size 100 is out of range");
  expect_cli_error("make-model --preset toy --mix q4_K_m --layers 0" + out, "layer count 0 is out of range");
  expect_cli_error("make-model --preset toy --mix q4_K_m --out " + tmp("no/such/dir/m.gguf"),
                   "No such file or directory");
  EXPECT_EQ(qmvlab("make-model --preset toy --mix q4_K_m --tied --untied" + out).code, 2);
  EXPECT_EQ(qmvlab("make-model --preset toy --mix q4_K_m").code, 2) << "--out is required";
  EXPECT_FALSE(fs::exists(tmp("cli-error.gguf")));
}

TEST(MakeModelCli, HelpListsPresetsAndMixesAndARunSummarizes) {
  const CliRun help = qmvlab("make-model --help");
  EXPECT_EQ(help.code, 0);
  for (const auto& name : synthetic_presets()) EXPECT_NE(help.output.find(name), std::string::npos) << name;
  for (const auto& name : synthetic_mixes()) EXPECT_NE(help.output.find(name), std::string::npos) << name;

  const std::string path = tmp("cli.gguf");
  const CliRun r = qmvlab("make-model --preset qwen2.5-0.5b --mix q4_K_m --layers 2 --vocab 300 --untied --seed 7 --out " + path);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("synthetic qwen2.5-0.5b q4_K_m seed 7"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("fallback: "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("wrote " + path), std::string::npos) << r.output;
  const gguf::File f = gguf::File::open(path);
  EXPECT_EQ(read_config(f).n_layers, 2);
  EXPECT_NE(f.find_tensor("output.weight"), nullptr);
  fs::remove(path);

  const CliRun dry = qmvlab("make-model --preset llama-2-7b --mix q4_K_m --dry-run --out " + path);
  ASSERT_EQ(dry.code, 0) << dry.output;
  EXPECT_NE(dry.output.find("6.738 B parameters"), std::string::npos) << dry.output;
  EXPECT_FALSE(fs::exists(path));
}

}  // namespace
}  // namespace qmv
