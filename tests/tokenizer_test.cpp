#include "model/tokenizer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <random>

#include "tests/gguf_writer.h"
#include "tests/test_seed.h"

namespace qmv {
namespace {

// A byte-level BPE vocabulary small enough to reason about: every printable ASCII
// byte, 'Ġ' (space), two merges and one control token.
struct TinyBpe {
  std::vector<std::uint8_t> bytes;
  gguf::File file;
  TinyBpe(const std::string& model = "gpt2", const std::string& pre = "smollm", bool add_bos = false)
      : bytes(make(model, pre, add_bos)), file(gguf::File::parse(bytes)) {}
  static std::vector<std::uint8_t> make(const std::string& model, const std::string& pre, bool add_bos) {
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
    if (add_bos) w.add_bool("tokenizer.ggml.add_bos_token", true);
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

// A deliberately naive byte-level BPE for one word: rescan every adjacent pair after
// each merge, the lowest rank first, the leftmost among equals.
std::vector<int> naive_gpt2_word(const Tokenizer& t, const std::vector<std::string>& merges, const std::string& word) {
  std::vector<std::string> sym;
  for (unsigned char b : word) sym.push_back(b == ' ' ? "\xC4\xA0" : std::string(1, static_cast<char>(b)));
  for (;;) {
    int best = -1;
    std::size_t best_rank = merges.size();
    for (std::size_t i = 0; i + 1 < sym.size(); ++i) {
      const auto it = std::find(merges.begin(), merges.end(), sym[i] + " " + sym[i + 1]);
      const auto rank = static_cast<std::size_t>(it - merges.begin());
      if (it != merges.end() && rank < best_rank) best = static_cast<int>(i), best_rank = rank;
    }
    if (best < 0) break;
    sym[static_cast<std::size_t>(best)] += sym[static_cast<std::size_t>(best) + 1];
    sym.erase(sym.begin() + best + 1);
  }
  std::vector<int> out;
  for (const std::string& s : sym) out.push_back(id_of(t, s == "\xC4\xA0" ? " " : s == "\xC4\xA0" "h" ? " h"
                                                          : s == "\xC4\xA0" "hell" ? " hell" : s));
  return out;
}

// Random words of letters that merge, with many equal pairs: the queue-driven merge is
// the naive one; a word of 300,000 bytes (one pre-token) comes back whole.
TEST(Tokenizer, RandomWordsMergeAsTheNaiveEncoderAndLongWordsRoundTrip) {
  const TinyBpe m;
  const Tokenizer t = Tokenizer::from_gguf(m.file);
  const std::vector<std::string> merges = {"l l", "h e", "he ll", "\xC4\xA0 h", "\xC4\xA0 hell"};
  const unsigned seed = qmv::testing::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  const std::string letters = "hellllo";
  for (int n = 0; n < 300; ++n) {
    std::string word = std::uniform_int_distribution<int>(0, 1)(rng) ? " " : "";
    const int len = std::uniform_int_distribution<int>(1, 40)(rng);
    for (int i = 0; i < len; ++i) word += letters[std::uniform_int_distribution<std::size_t>(0, letters.size() - 1)(rng)];
    EXPECT_EQ(t.encode(word, false), naive_gpt2_word(t, merges, word)) << "'" << word << "'";
  }
  std::string huge;
  while (huge.size() < 300000) huge += letters[std::uniform_int_distribution<std::size_t>(0, letters.size() - 1)(rng)];
  const std::vector<int> ids = t.encode(huge, false);
  EXPECT_LT(ids.size(), huge.size());  // merges happened
  EXPECT_EQ(t.decode(ids), huge);
}

TEST(Tokenizer, UnsupportedModelsAreNamed) {
  const TinyBpe t5("t5");
  try {
    Tokenizer::from_gguf(t5.file);
    FAIL();
  } catch (const TokenizerError& e) {
    EXPECT_NE(std::string(e.what()).find("model 't5' is not supported"), std::string::npos) << e.what();
  }
  const TinyBpe odd("gpt2", "some-new-pre");
  EXPECT_THROW(Tokenizer::from_gguf(odd.file), TokenizerError);
  const TinyBpe m;
  const Tokenizer t = Tokenizer::from_gguf(m.file);
  EXPECT_THROW(t.decode(t.vocab_size()), TokenizerError);
}

TEST(Tokenizer, Gpt2ReportsItsModelAndBosSetting) {
  const TinyBpe plain;
  const Tokenizer t = Tokenizer::from_gguf(plain.file);
  EXPECT_EQ(t.model(), "gpt2");
  EXPECT_FALSE(t.add_bos_default());  // gpt2 vocabularies add no BOS unless they say so
  EXPECT_FALSE(t.add_space_prefix());
  const TinyBpe with_bos("gpt2", "smollm", true);
  EXPECT_TRUE(Tokenizer::from_gguf(with_bos.file).add_bos_default());
}

// ---------------------------------------------------------------------------------------
// SentencePiece-style (`llama`) vocabularies.

const std::string kSp = "\xE2\x96\x81";  // "▁", SentencePiece's space

// A hand-made llama vocabulary laid out like Llama 2's: <unk> <s> </s>, the 256 byte
// tokens, then scored pieces. The scores are chosen so that each test string below
// exercises one rule: a later pair with a higher score wins over an earlier one, equal
// scores go leftmost, merges build on merges.
struct SpmVocab {
  std::vector<std::string> tokens;
  std::vector<std::int32_t> types;
  std::vector<float> scores;
  bool write_ids = true;

  void add(const std::string& piece, float score, int type = 1) {
    tokens.push_back(piece);
    scores.push_back(score);
    types.push_back(type);
  }
  int id(const std::string& piece) const {
    const auto it = std::find(tokens.begin(), tokens.end(), piece);
    return it == tokens.end() ? -1 : static_cast<int>(it - tokens.begin());
  }
  static SpmVocab standard(bool byte_tokens = true) {
    SpmVocab v;
    v.add("<unk>", 0, 2);
    v.add("<s>", 0, 3);
    v.add("</s>", 0, 3);
    if (byte_tokens) {
      for (int b = 0; b < 256; ++b) {
        char name[8];
        std::snprintf(name, sizeof name, "<0x%02X>", b);
        v.add(name, 0, 6);
      }
    }
    float single = -50;  // single characters: never the result of a merge
    for (const std::string& c : {kSp, std::string("a"), std::string("b"), std::string("c"), std::string("d"),
                                std::string("e"), std::string("h"), std::string("l"), std::string("o"),
                                std::string("r"), std::string("w"), std::string("x"), std::string("\xC3\xA9")})
      v.add(c, single--);
    v.add("ab", -5);
    v.add("bc", -1);
    v.add("aa", -2);
    v.add("he", -1);
    v.add("ll", -2);
    v.add("lo", -2);  // ties with "ll"
    v.add("hell", -3);
    v.add(kSp + "hell", -4);
    v.add(kSp + kSp, -6);
    v.add("[INST]", 0, 4);
    return v;
  }
};

// GGUF bytes for a vocabulary; `extra` adds (or replaces, with write_ids off) metadata.
std::vector<std::uint8_t> spm_gguf(const SpmVocab& v,
                                   const std::function<void(qmv::testing::GgufWriter&)>& extra = {}) {
  qmv::testing::GgufWriter w;
  w.add_string("tokenizer.ggml.model", "llama");
  w.add_string_array("tokenizer.ggml.tokens", v.tokens);
  if (!v.scores.empty()) w.add_f32_array("tokenizer.ggml.scores", v.scores);
  if (!v.types.empty()) w.add_i32_array("tokenizer.ggml.token_type", v.types);
  if (v.write_ids) {
    w.add_u32("tokenizer.ggml.bos_token_id", 1);
    w.add_u32("tokenizer.ggml.eos_token_id", 2);
    w.add_u32("tokenizer.ggml.unknown_token_id", 0);
  }
  if (extra) extra(w);
  return w.bytes();
}

struct SpmFile {
  std::vector<std::uint8_t> bytes;
  gguf::File file;
  explicit SpmFile(std::vector<std::uint8_t> b) : bytes(std::move(b)), file(gguf::File::parse(bytes)) {}
  Tokenizer tokenizer() const { return Tokenizer::from_gguf(file); }
};

// The error from_gguf gives for this file ("" when it loads).
std::string load_error(const SpmFile& f) {
  try {
    Tokenizer::from_gguf(f.file);
    return "";
  } catch (const TokenizerError& e) {
    return e.what();
  }
}

std::vector<int> ids(const SpmVocab& v, const std::vector<std::string>& pieces) {
  std::vector<int> out;
  for (const auto& p : pieces) {
    out.push_back(v.id(p));
    EXPECT_GE(out.back(), 0) << "no piece '" << p << "' in the test vocabulary";
  }
  return out;
}

TEST(SpmTokenizer, MergesByScoreTiesLeftmostAndBuildsOnMerges) {
  const SpmVocab v = SpmVocab::standard();
  const Tokenizer t = SpmFile(spm_gguf(v)).tokenizer();
  EXPECT_EQ(t.model(), "llama");
  // "▁abc": "bc" (-1) beats the earlier "ab" (-5); "▁a" and "abc" are not pieces.
  EXPECT_EQ(t.encode("abc", false), ids(v, {kSp, "a", "bc"}));
  // "▁aaa": two "aa" pairs with one score: the leftmost merges; "aaa" is no piece.
  EXPECT_EQ(t.encode("aaa", false), ids(v, {kSp, "aa", "a"}));
  EXPECT_EQ(t.encode("aaaa", false), ids(v, {kSp, "aa", "aa"}));
  // "▁hello": he (-1), then ll over lo (tie, leftmost), then hell (-3), then ▁hell (-4).
  EXPECT_EQ(t.encode("hello", false), ids(v, {kSp + "hell", "o"}));
  EXPECT_EQ(t.encode("hello world", false), ids(v, {kSp + "hell", "o", kSp, "w", "o", "r", "l", "d"}));
  // A leading space: "▁▁hello"; ▁hell (-4) beats ▁▁ (-6), so the prefix stays alone.
  EXPECT_EQ(t.encode(" hello", false), ids(v, {kSp, kSp + "hell", "o"}));
  EXPECT_EQ(t.encode("x  ", false), ids(v, {kSp, "x", kSp + kSp}));
  // A two-byte character the vocabulary has is one token.
  EXPECT_EQ(t.encode("\xC3\xA9", false), ids(v, {kSp, "\xC3\xA9"}));
  EXPECT_EQ(t.encode("", false), std::vector<int>{});
  EXPECT_EQ(t.encode("", true), std::vector<int>{1});
}

TEST(SpmTokenizer, ByteFallbackForCharactersOutsideTheVocabulary) {
  const SpmVocab v = SpmVocab::standard();
  const Tokenizer t = SpmFile(spm_gguf(v)).tokenizer();
  // U+1F600 is F0 9F 98 80: four byte tokens after the prefix.
  EXPECT_EQ(t.encode("\xF0\x9F\x98\x80", false), ids(v, {kSp, "<0xF0>", "<0x9F>", "<0x98>", "<0x80>"}));
  EXPECT_EQ(t.encode("a\nb", false), ids(v, {kSp, "a", "<0x0A>", "b"}));
  EXPECT_EQ(t.encode("\t", false), ids(v, {kSp, "<0x09>"}));
  // 日 (E6 97 A5) between pieces the vocabulary has.
  EXPECT_EQ(t.encode("a\xE6\x97\xA5" "b", false), ids(v, {kSp, "a", "<0xE6>", "<0x97>", "<0xA5>", "b"}));
  // A stray continuation byte is a character of its own, spelled as that byte.
  EXPECT_EQ(t.encode("a\x80", false), ids(v, {kSp, "a", "<0x80>"}));
  // Without token_type the <0xXX> texts are the byte tokens (and nothing is special).
  SpmVocab untyped = v;
  untyped.types.clear();
  const Tokenizer ut = SpmFile(spm_gguf(untyped)).tokenizer();
  EXPECT_EQ(ut.encode("a\nb", false), ids(v, {kSp, "a", "<0x0A>", "b"}));
  EXPECT_EQ(ut.decode(ut.encode("a\nb", false)), "a\nb");

  // Without byte tokens a character the vocabulary lacks is the unknown token.
  const SpmVocab nb = SpmVocab::standard(false);
  const Tokenizer u = SpmFile(spm_gguf(nb)).tokenizer();
  EXPECT_EQ(u.encode("a\xF0\x9F\x98\x80" "b", false), ids(nb, {kSp, "a", "<unk>", "b"}));
  // Metadata without ids gets llama.cpp's defaults: unknown 0, BOS 1, EOS 2.
  SpmVocab no_ids = nb;
  no_ids.write_ids = false;
  const Tokenizer d = SpmFile(spm_gguf(no_ids)).tokenizer();
  EXPECT_EQ(d.unknown(), 0);
  EXPECT_EQ(d.bos(), 1);
  EXPECT_EQ(d.eos(), 2);
}

TEST(SpmTokenizer, SpecialTokensMatchWholeAndEachTextRunGetsTheSpacePrefix) {
  const SpmVocab v = SpmVocab::standard();
  const Tokenizer t = SpmFile(spm_gguf(v)).tokenizer();
  // As llama.cpp: the "▁" prefix goes before every run of text, also after a special.
  EXPECT_EQ(t.encode("<s>hello</s>", false), ids(v, {"<s>", kSp + "hell", "o", "</s>"}));
  EXPECT_EQ(t.encode("[INST]abc[INST]", false), ids(v, {"[INST]", kSp, "a", "bc", "[INST]"}));
  EXPECT_EQ(t.encode("hello<unk>", false), ids(v, {kSp + "hell", "o", "<unk>"}));
  EXPECT_EQ(t.encode("hello", true, true), ids(v, {"<s>", kSp + "hell", "o", "</s>"}));
  // Text that only looks like a byte token is text.
  EXPECT_EQ(t.encode("<0x41>", false), ids(v, {kSp, "<0x3C>", "<0x30>", "x", "<0x34>", "<0x31>", "<0x3E>"}));
}

TEST(SpmTokenizer, DecodeUnescapesSpacesBytesAndDropsTheInsertedPrefix) {
  const SpmVocab v = SpmVocab::standard();
  const Tokenizer t = SpmFile(spm_gguf(v)).tokenizer();
  // One token at a time (streaming): the space stays.
  EXPECT_EQ(t.decode(v.id(kSp + "hell")), " hell");
  EXPECT_EQ(t.decode(v.id("<0x0A>")), "\n");
  EXPECT_EQ(t.decode(v.id("<0xF0>")), "\xF0");
  EXPECT_EQ(t.decode(1), "<s>");
  EXPECT_EQ(t.decode(v.id("[INST]")), "[INST]");
  EXPECT_EQ(t.decode(0), "<unk>");
  // A sequence: the prefix encode added at the start of each text run goes again.
  EXPECT_EQ(t.decode(ids(v, {kSp + "hell", "o"})), "hello");
  EXPECT_EQ(t.decode(ids(v, {kSp, kSp + "hell", "o"})), " hello");
  EXPECT_EQ(t.decode(ids(v, {"<s>", kSp + "hell", "o", "[INST]", kSp, "a"})), "<s>hello[INST]a");
  // A sequence that starts mid-text (no leading space) loses nothing.
  EXPECT_EQ(t.decode(ids(v, {"o", kSp + "hell"})), "o hell");
  EXPECT_EQ(t.decode(std::vector<int>{}), "");
}

TEST(SpmTokenizer, WithoutSpacePrefix) {
  const SpmVocab v = SpmVocab::standard();
  const Tokenizer t = SpmFile(spm_gguf(v, [](auto& w) {
                        w.add_bool("tokenizer.ggml.add_space_prefix", false);
                        w.add_bool("tokenizer.ggml.add_bos_token", false);
                      })).tokenizer();
  EXPECT_FALSE(t.add_space_prefix());
  EXPECT_FALSE(t.add_bos_default());
  EXPECT_EQ(t.encode("hello", false), ids(v, {"hell", "o"}));
  EXPECT_EQ(t.encode(" hello", false), ids(v, {kSp + "hell", "o"}));
  EXPECT_EQ(t.decode(t.encode(" hello", false)), " hello");  // nothing was added, nothing removed
  // Metadata defaults for a llama vocabulary: BOS on, space prefix on, EOS off.
  const Tokenizer d = SpmFile(spm_gguf(v)).tokenizer();
  EXPECT_TRUE(d.add_bos_default());
  EXPECT_TRUE(d.add_space_prefix());
  EXPECT_FALSE(d.add_eos_default());
}

// A second, deliberately naive encoder for a run of plain text: rescan every adjacent
// pair after each merge, take the best score, the leftmost among equals.
std::vector<int> naive_spm(const SpmVocab& v, const std::string& text) {
  std::string escaped = kSp;
  for (char c : text) escaped += c == ' ' ? kSp : std::string(1, c);
  std::vector<std::string> sym;
  for (std::size_t i = 0; i < escaped.size();) {
    const auto lead = static_cast<unsigned char>(escaped[i]);
    const std::size_t n = std::min<std::size_t>(lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1,
                                                escaped.size() - i);
    sym.push_back(escaped.substr(i, n));
    i += n;
  }
  for (;;) {
    int best = -1;
    float best_score = 0;
    for (std::size_t i = 0; i + 1 < sym.size(); ++i) {
      const int id = v.id(sym[i] + sym[i + 1]);
      if (id >= 0 && (best < 0 || v.scores[static_cast<std::size_t>(id)] > best_score)) {
        best = static_cast<int>(i);
        best_score = v.scores[static_cast<std::size_t>(id)];
      }
    }
    if (best < 0) break;
    sym[static_cast<std::size_t>(best)] += sym[static_cast<std::size_t>(best) + 1];
    sym.erase(sym.begin() + best + 1);
  }
  std::vector<int> out;
  for (const auto& s : sym) {
    if (v.id(s) >= 0) {
      out.push_back(v.id(s));
      continue;
    }
    for (unsigned char b : s) {
      char name[8];
      std::snprintf(name, sizeof name, "<0x%02X>", b);
      out.push_back(v.id(name));
    }
  }
  return out;
}

TEST(SpmTokenizer, RandomTextMatchesANaiveEncoderAndRoundTrips) {
  const SpmVocab v = SpmVocab::standard();
  const Tokenizer t = SpmFile(spm_gguf(v)).tokenizer();
  const unsigned seed = qmv::testing::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  // Mostly characters that merge (with many equal-score pairs), some that need bytes.
  const std::vector<std::string> plain = {"a", "a", "b", "c", "h", "e", "l", "l", "o", " ", " ", "x",
                                          "\xC3\xA9", "\n", "\t", "\xE6\x97\xA5", "\xF0\x9F\x98\x80", "1", "."};
  const std::vector<std::string> specials = {"<s>", "</s>", "[INST]"};
  for (int n = 0; n < 400; ++n) {
    std::string text, with_specials;
    const int len = std::uniform_int_distribution<int>(0, 40)(rng);
    for (int i = 0; i < len; ++i) {
      const std::string& c = plain[std::uniform_int_distribution<std::size_t>(0, plain.size() - 1)(rng)];
      text += c;
      with_specials += c;
      if (std::uniform_int_distribution<int>(0, 15)(rng) == 0)
        with_specials += specials[std::uniform_int_distribution<std::size_t>(0, specials.size() - 1)(rng)];
    }
    // Arbitrary bytes (not UTF-8) come back too, with two exceptions shared with
    // llama.cpp: "▁" itself decodes as a space, and a stray lead byte right before a
    // space takes the first byte of the escaped space into its "character", so the
    // noise has no spaces.
    std::string noise = text;
    for (int i = 0; i < 3; ++i) noise += static_cast<char>(std::uniform_int_distribution<int>(0x21, 255)(rng));
    if (noise.find(kSp) != std::string::npos || noise.find('<') != std::string::npos ||
        noise.find('[') != std::string::npos)
      noise = text;
    if (!text.empty()) {
      EXPECT_EQ(t.encode(text, false), naive_spm(v, text)) << text;
    }
    EXPECT_EQ(t.decode(t.encode(text, false)), text);
    EXPECT_EQ(t.decode(t.encode(noise, false)), noise);
    EXPECT_EQ(t.decode(t.encode(with_specials, true)), "<s>" + with_specials) << with_specials;
  }
}

TEST(SpmTokenizer, BadMetadataIsNamed) {
  const SpmVocab good = SpmVocab::standard();
  auto expect_error = [](const SpmFile& f, const std::string& words) {
    const std::string e = load_error(f);
    EXPECT_NE(e.find(words), std::string::npos) << "error '" << e << "' does not name '" << words << "'";
  };
  SpmVocab v = good;
  v.scores.clear();
  expect_error(SpmFile(spm_gguf(v)), "tokenizer.ggml.scores");
  v = good;
  v.scores.pop_back();
  expect_error(SpmFile(spm_gguf(v)), "'tokenizer.ggml.scores' has " + std::to_string(good.tokens.size() - 1));
  v = good;
  v.types.push_back(1);
  expect_error(SpmFile(spm_gguf(v)), "'tokenizer.ggml.token_type' has " + std::to_string(good.tokens.size() + 1));
  v = good;
  v.types[7] = 9;
  expect_error(SpmFile(spm_gguf(v)), "token 7 has token_type 9");
  v = good;
  v.tokens[5] = "<0xZZ>";
  expect_error(SpmFile(spm_gguf(v)), "token 5 has type byte");
  v = good;
  v.scores[v.id("hell")] = std::nanf("");
  expect_error(SpmFile(spm_gguf(v)), "token " + std::to_string(v.id("hell")) + " has a NaN score");
  v = good;
  v.write_ids = false;
  const auto n = static_cast<std::uint32_t>(good.tokens.size());
  expect_error(SpmFile(spm_gguf(v, [&](auto& w) { w.add_u32("tokenizer.ggml.bos_token_id", n); })),
               "tokenizer.ggml.bos_token_id = " + std::to_string(n) + " is out of range");
  expect_error(SpmFile(spm_gguf(v, [&](auto& w) { w.add_u32("tokenizer.ggml.unknown_token_id", n + 5); })),
               "tokenizer.ggml.unknown_token_id");
  expect_error(SpmFile(spm_gguf(good, [](auto& w) { w.add_u32("tokenizer.ggml.add_bos_token", 1); })),
               "'tokenizer.ggml.add_bos_token' is uint32, expected bool");
  // The good vocabulary itself loads: the errors above come from the changes.
  EXPECT_EQ(load_error(SpmFile(spm_gguf(good))), "");
}

}  // namespace
}  // namespace qmv
