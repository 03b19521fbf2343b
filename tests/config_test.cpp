#include "model/config.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <set>

#include "tests/tiny_model.h"

namespace qmv {
namespace {

using qmv::testing::TinySpec;
using qmv::testing::tiny_model;

std::string error_of(const TinySpec& s) {
  const auto bytes = tiny_model(s);
  try {
    const auto f = gguf::File::parse(bytes);
    bind_weights(f, read_config(f));
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

TEST(ModelConfig, EachArchitectureBindsItsWeights) {
  for (const char* arch : {"llama", "qwen2", "qwen3"}) {
    TinySpec s;
    s.arch = arch;
    if (s.arch == "qwen3") s.key_length = 32;  // qwen3: heads wider than embd / heads
    s.tied = s.arch != "qwen2";
    const auto bytes = tiny_model(s);
    const auto f = gguf::File::parse(bytes);
    const ModelConfig c = read_config(f);
    EXPECT_EQ(c.arch, arch);
    EXPECT_EQ(c.n_layers, 2);
    EXPECT_EQ(c.head_dim, s.key_length ? 32 : 16);
    EXPECT_EQ(c.rope, s.arch == "llama" ? RopeStyle::Interleaved : RopeStyle::Halves);
    EXPECT_EQ(c.qkv_bias, s.arch == "qwen2");
    EXPECT_EQ(c.qk_norm, s.arch == "qwen3");
    EXPECT_EQ(c.tied_embeddings, s.tied);
    EXPECT_FLOAT_EQ(c.rope_freq_base, 1e6f);
    const ModelWeights w = bind_weights(f, c);
    ASSERT_EQ(w.layers.size(), 2u);
    EXPECT_EQ(w.output == w.token_embd, s.tied);
    EXPECT_EQ(w.layers[1].bq != nullptr, s.arch == "qwen2");
    EXPECT_EQ(w.layers[1].q_norm != nullptr, s.arch == "qwen3");
  }
}

TEST(ModelConfig, ProblemsAreNamed) {
  TinySpec s;
  s.skip = {"blk.1.ffn_up.weight"};
  EXPECT_NE(error_of(s).find("missing tensor 'blk.1.ffn_up.weight'"), std::string::npos) << error_of(s);
  s = {};
  s.reshape = [](const std::string& n, std::vector<std::uint64_t>& d) {
    if (n == "blk.0.attn_k.weight") d = {64, 64};
  };
  EXPECT_NE(error_of(s).find("tensor 'blk.0.attn_k.weight' has shape 64x64, expected 64x32"), std::string::npos)
      << error_of(s);
  s = {};
  s.arch = "gpt2";
  EXPECT_NE(error_of(s).find("unsupported architecture 'gpt2'"), std::string::npos) << error_of(s);
  s = {};
  s.kv_heads = 3;
  EXPECT_NE(error_of(s).find("cannot share 3 key/value heads"), std::string::npos) << error_of(s);
  s = {};
  s.arch = "qwen2";
  s.skip = {"blk.0.attn_v.bias"};
  EXPECT_NE(error_of(s).find("missing tensor 'blk.0.attn_v.bias'"), std::string::npos) << error_of(s);
}

TEST(ModelConfig, RealModel) {
  const std::string path = std::string(QMV_SOURCE_DIR) + "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "no real model: run scripts/get-model.sh";
  const auto f = gguf::File::open(path);
  const ModelConfig c = read_config(f);
  EXPECT_EQ(c.arch, "llama");
  EXPECT_EQ(c.n_layers, 30);
  EXPECT_EQ(c.n_embd, 576);
  EXPECT_EQ(c.n_ff, 1536);
  EXPECT_EQ(c.n_head, 9);
  EXPECT_EQ(c.n_head_kv, 3);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.vocab_size, 49152);
  EXPECT_TRUE(c.tied_embeddings);
  EXPECT_FLOAT_EQ(c.rope_freq_base, 100000.0f);
  const ModelWeights w = bind_weights(f, c);
  EXPECT_STREQ(w.output->type->name, "Q8_0");
  EXPECT_STREQ(w.layers[29].ffn_down->type->name, "Q4_1");
}

}  // namespace
}  // namespace qmv
