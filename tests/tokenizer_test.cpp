#include "model/tokenizer.h"

#include <gtest/gtest.h>

#include "tests/gguf_writer.h"

namespace qmv {
namespace {

// A byte-level BPE vocabulary small enough to reason about: every printable ASCII
// byte, 'Ġ' (space), two merges and one control token.
struct TinyBpe {
  std::vector<std::uint8_t> bytes;
  gguf::File file;
  TinyBpe(const std::string& model = "gpt2", const std::string& pre = "smollm")
      : bytes(make(model, pre)), file(gguf::File::parse(bytes)) {}
  static std::vector<std::uint8_t> make(const std::string& model, const std::string& pre) {
    std::vector<std::string> tokens = {"<|end|>"};
    std::vector<std::int32_t> types = {3};
    for (int c = 0x21; c <= 0x7E; ++c) {
      tokens.emplace_back(1, static_cast<char>(c));
      types.push_back(1);
    }
    for (const char* t : {"\xC4\xA0", "l" "l", "\xC4\xA0" "h", "he", "hell", "\xC4\xA0" "hell"}) {
      tokens.emplace_back(t);
      types.push_back(1);
    }
    qmv::testing::GgufWriter w;
    w.add_string("tokenizer.ggml.model", model);
    w.add_string("tokenizer.ggml.pre", pre);
    w.add_string_array("tokenizer.ggml.tokens", tokens);
    w.add_i32_array("tokenizer.ggml.token_type", types);
    // Ranks: "l l" first, then "h e", then "he ll", then "Ġ h", "Ġ hell" is never built from "Ġh".
    w.add_string_array("tokenizer.ggml.merges", {"l l", "h e", "he ll", "\xC4\xA0 h", "\xC4\xA0 hell"});
    w.add_u32("tokenizer.ggml.bos_token_id", 0);
    w.add_u32("tokenizer.ggml.eos_token_id", 0);
    return w.bytes();
  }
};

int id_of(const Tokenizer& t, const std::string& piece) {
  for (int i = 0; i < t.vocab_size(); ++i)
    if (t.decode(i) == piece) return i;
  return -1;
}

TEST(Tokenizer, MergesApplyByRankAndSpecialTokensMatchWhole) {
  const TinyBpe m;
  const Tokenizer t = Tokenizer::from_gguf(m.file);
  // "hello": l+l (rank 0), h+e (1), he+ll (2) -> "hell", "o"
  EXPECT_EQ(t.encode("hello", false), (std::vector<int>{id_of(t, "hell"), id_of(t, "o")}));
  // " hello": the space joins the word (GPT-2 split); "Ġ hell" (rank 4) after the rest.
  EXPECT_EQ(t.encode(" hello", false), (std::vector<int>{id_of(t, " hell"), id_of(t, "o")}));
  // Digits are split one by one (smollm), a control token is one token.
  EXPECT_EQ(t.encode("12<|end|>x", true),
            (std::vector<int>{0, id_of(t, "1"), id_of(t, "2"), 0, id_of(t, "x")}));
  for (const std::string s : {"hello world 42!", "  a  b ", ""}) EXPECT_EQ(t.decode(t.encode(s, false)), s);
  // A byte the vocabulary cannot spell (this one has no tab) is an error, not a guess.
  EXPECT_THROW(t.encode("a\tb", false), TokenizerError);
}

TEST(Tokenizer, UnsupportedModelsAreNamed) {
  const TinyBpe spm("llama");
  try {
    Tokenizer::from_gguf(spm.file);
    FAIL();
  } catch (const TokenizerError& e) {
    EXPECT_NE(std::string(e.what()).find("model 'llama' is not supported yet"), std::string::npos) << e.what();
  }
  const TinyBpe odd("gpt2", "some-new-pre");
  EXPECT_THROW(Tokenizer::from_gguf(odd.file), TokenizerError);
  const TinyBpe m;
  const Tokenizer t = Tokenizer::from_gguf(m.file);
  EXPECT_THROW(t.decode(t.vocab_size()), TokenizerError);
}

}  // namespace
}  // namespace qmv
