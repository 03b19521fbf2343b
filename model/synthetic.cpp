#include "model/synthetic.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <cstring>
#include <map>
#include <numbers>
#include <random>
#include <tuple>
#include <unordered_map>
#include <unordered_set>

#include "model/gguf.h"
#include "model/gguf_writer.h"
#include "model/ops.h"
#include "model/tokenizer.h"

namespace qmv {
namespace {

template <class... Args>
[[noreturn]] void fail(fmt::format_string<Args...> f, Args&&... args) {
  throw SyntheticError(fmt::format(f, std::forward<Args>(args)...));
}

std::string join(const std::vector<std::string>& v, const char* sep = ", ") {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : sep) + x;
  return s;
}

// ---------------------------------------------------------------------------------
// Presets: the shapes of real models (their published configs).

struct Preset {
  const char* name;
  SyntheticShape shape;
};

SyntheticShape shape(const char* arch, int layers, int embd, int ff, int heads, int kv_heads, int head_dim, int vocab,
                     int context, float rope_base, float eps, bool tied) {
  SyntheticShape s;
  s.arch = arch;
  s.n_layers = layers;
  s.n_embd = embd;
  s.n_ff = ff;
  s.n_head = heads;
  s.n_head_kv = kv_heads;
  s.head_dim = head_dim;
  s.vocab = vocab;
  s.context = context;
  s.rope_freq_base = rope_base;
  s.rms_eps = eps;
  s.tied = tied;
  return s;
}

const std::vector<Preset>& presets() {
  static const std::vector<Preset> p = {
      {"toy", shape("llama", 2, 256, 512, 4, 2, 64, 512, 256, 10000.0f, 1e-5f, true)},
      {"tinyllama-1.1b", shape("llama", 22, 2048, 5632, 32, 4, 64, 32000, 2048, 10000.0f, 1e-5f, false)},
      {"llama-2-7b", shape("llama", 32, 4096, 11008, 32, 32, 128, 32000, 4096, 10000.0f, 1e-5f, false)},
      {"qwen2.5-0.5b", shape("qwen2", 24, 896, 4864, 14, 2, 64, 151936, 32768, 1e6f, 1e-6f, true)},
      // Qwen3 sets the head size (128) apart from width / heads (64).
      {"qwen3-0.6b", shape("qwen3", 28, 1024, 3072, 16, 8, 128, 151936, 40960, 1e6f, 1e-6f, true)},
  };
  return p;
}

constexpr const char* kArchs[] = {"llama", "qwen2", "qwen3"};
constexpr const char* kQ4KM = "q4_K_m";
constexpr WeightType kMixTypes[] = {WeightType::F32,  WeightType::F16,  WeightType::BF16, WeightType::Q8_0,
                                    WeightType::Q4_0, WeightType::Q4_1, WeightType::Q5_0, WeightType::Q5_1,
                                    WeightType::Q4_K, WeightType::Q5_K, WeightType::Q6_K};

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
         });
}

// llama_ftype of a mix. The uniform K-quant mixes are named after the nearest
// llama.cpp file type (Q4_K_S, Q5_K_S, Q6_K).
std::uint32_t file_type_of(const std::string& mix) {
  if (mix == kQ4KM) return 15;
  WeightType t{};
  parse_weight_type(mix, t);
  switch (t) {
    case WeightType::F32: return 0;
    case WeightType::F16: return 1;
    case WeightType::Q4_0: return 2;
    case WeightType::Q4_1: return 3;
    case WeightType::Q8_0: return 7;
    case WeightType::Q5_0: return 8;
    case WeightType::Q5_1: return 9;
    case WeightType::Q4_K: return 14;
    case WeightType::Q5_K: return 16;
    case WeightType::Q6_K: return 18;
    case WeightType::BF16: return 32;
  }
  return 0;
}

// The ggml type id of a weight type, found by name in the reader's type table.
std::uint32_t ggml_type_id(WeightType t) {
  for (std::uint32_t id = 0; id < 64; ++id)
    if (const gguf::TypeInfo* info = gguf::type_info(id); info && iequals(info->name, to_string(t))) return id;
  fail("internal: no ggml type id for {}", to_string(t));
}

void check_range(const char* what, int v, int lo, int hi) {
  if (v < lo || v > hi) fail("{} {} is out of range ({} to {})", what, v, lo, hi);
}

SyntheticShape resolve_shape(const SyntheticSpec& spec) {
  const auto p = std::find_if(presets().begin(), presets().end(), [&](const Preset& x) { return spec.preset == x.name; });
  if (p == presets().end()) fail("unknown preset '{}' (presets: {})", spec.preset, join(synthetic_presets()));
  SyntheticShape s = p->shape;
  s.preset = p->name;
  if (!spec.arch.empty()) {
    if (std::none_of(std::begin(kArchs), std::end(kArchs), [&](const char* a) { return spec.arch == a; }))
      fail("unknown architecture '{}' (architectures: llama, qwen2, qwen3)", spec.arch);
    s.arch = spec.arch;
  }
  s.n_layers = spec.layers.value_or(s.n_layers);
  s.vocab = spec.vocab.value_or(s.vocab);
  s.context = spec.context.value_or(s.context);
  if (spec.tied) s.tied = *spec.tied;
  check_range("layer count", s.n_layers, 1, 1024);
  check_range("vocabulary size", s.vocab, 258, 1 << 20);  // 256 bytes + <|bos|> + <|eos|>
  check_range("context length", s.context, 1, 1 << 24);
  s.qkv_bias = s.arch == "qwen2";
  s.qk_norm = s.arch == "qwen3";
  return s;
}

}  // namespace

// ---------------------------------------------------------------------------------
// Tensor types.

bool q4_K_m_more_bits(int layer, int n_layers) {
  return layer < n_layers / 8 || layer >= 7 * n_layers / 8 || (layer - n_layers / 8) % 3 == 2;
}

WeightType fallback_type(WeightType wanted, std::uint64_t row_length) {
  if (row_length % static_cast<std::uint64_t>(block_values(wanted)) == 0) return wanted;
  WeightType t = WeightType::F16;
  switch (wanted) {
    case WeightType::Q4_K: t = WeightType::Q5_0; break;
    case WeightType::Q5_K: t = WeightType::Q5_1; break;
    case WeightType::Q6_K: t = WeightType::Q8_0; break;
    default: break;
  }
  return row_length % static_cast<std::uint64_t>(block_values(t)) == 0 ? t : WeightType::F16;
}

const std::vector<std::string>& synthetic_presets() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (const auto& p : presets()) v.emplace_back(p.name);
    return v;
  }();
  return names;
}

const std::vector<std::string>& synthetic_mixes() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v = {kQ4KM};
    for (WeightType t : kMixTypes) v.emplace_back(to_string(t));
    return v;
  }();
  return names;
}

std::vector<std::string> SyntheticPlan::fallbacks() const {
  // (wanted, used, row length) -> kinds, count
  std::map<std::tuple<std::string, std::string, std::uint64_t>, std::pair<std::vector<std::string>, int>> groups;
  for (const auto& t : tensors) {
    if (t.type == t.wanted) continue;
    auto& g = groups[{std::string(to_string(t.wanted)), std::string(to_string(t.type)), t.dims[0]}];
    if (std::find(g.first.begin(), g.first.end(), t.kind) == g.first.end()) g.first.push_back(t.kind);
    ++g.second;
  }
  std::vector<std::string> out;
  for (const auto& [key, g] : groups) {
    const auto& [wanted, used, row] = key;
    out.push_back(fmt::format("{} (row length {}, not a multiple of {}'s block): {} -> {}, {} tensor{}", join(g.first),
                              row, wanted, wanted, used, g.second, g.second == 1 ? "" : "s"));
  }
  return out;
}

SyntheticPlan plan_synthetic_model(const SyntheticSpec& spec) {
  SyntheticPlan plan;
  plan.shape = resolve_shape(spec);
  const SyntheticShape& s = plan.shape;
  WeightType uniform = WeightType::F32;
  if (iequals(spec.mix, kQ4KM)) {
    plan.mix = kQ4KM;
  } else if (parse_weight_type(spec.mix, uniform) &&
             std::find(std::begin(kMixTypes), std::end(kMixTypes), uniform) != std::end(kMixTypes)) {
    plan.mix = std::string(to_string(uniform));
  } else {
    fail("unknown mix '{}' (mixes: {})", spec.mix, join(synthetic_mixes()));
  }
  const bool q4km = plan.mix == kQ4KM;
  plan.file_type = file_type_of(plan.mix);
  plan.seed = spec.seed;
  const auto& preset_arch = std::find_if(presets().begin(), presets().end(),
                                         [&](const Preset& p) { return s.preset == p.name; })->shape.arch;
  plan.name = fmt::format("synthetic {}{} {} seed {}", s.preset, s.arch == preset_arch ? "" : "-" + s.arch, plan.mix,
                          spec.seed);

  const ModelWidths widths{s.n_embd, static_cast<std::int64_t>(s.n_head) * s.head_dim,
                           static_cast<std::int64_t>(s.n_head_kv) * s.head_dim, s.n_ff, s.vocab};
  const auto e = static_cast<std::uint64_t>(s.n_embd), vocab = static_cast<std::uint64_t>(s.vocab),
             hd = static_cast<std::uint64_t>(s.head_dim);
  const auto q_width = static_cast<std::uint64_t>(widths.q), kv_width = static_cast<std::uint64_t>(widths.kv);
  auto add = [&](std::string name, std::vector<std::uint64_t> dims, std::string kind, int layer) {
    SyntheticTensor t;
    t.name = std::move(name);
    t.dims = std::move(dims);
    t.kind = std::move(kind);
    t.layer = layer;
    if (t.kind == "norm" || t.kind == "bias") {
      t.wanted = WeightType::F32;
    } else if (!q4km) {
      t.wanted = uniform;
    } else if (t.kind == "output" || (t.kind == "token_embd" && s.tied)) {
      // llama.cpp quantizes the lm_head to Q6_K; with tied embeddings that is token_embd.
      t.wanted = WeightType::Q6_K;
    } else if ((t.kind == "attn_v" || t.kind == "ffn_down") && q4_K_m_more_bits(layer, s.n_layers)) {
      t.wanted = WeightType::Q6_K;
    } else {
      t.wanted = WeightType::Q4_K;
    }
    t.type = fallback_type(t.wanted, t.dims[0]);
    std::uint64_t elements = 1;
    for (auto d : t.dims) elements *= d;
    t.bytes = elements / static_cast<std::uint64_t>(block_values(t.type)) * block_bytes(t.type);
    plan.params += elements;
    plan.tensor_bytes += t.bytes;
    plan.tensors.push_back(std::move(t));
  };

  // A matrix's kind is its GGUF name (attn_q, ..., output), in the file in the order a
  // layer runs them, with a layer's norms and biases before the matrices that read them.
  auto add_matrix = [&](const WeightMatvec& m, int layer) {
    add(m.tensor_name(layer), m.dims(widths), std::string(m.tensor), layer);
  };
  add("token_embd.weight", {e, vocab}, "token_embd", -1);
  for (int i = 0; i < s.n_layers; ++i) {
    const std::string p = fmt::format("blk.{}.", i);
    add(p + "attn_norm.weight", {e}, "norm", i);
    for (const WeightMatvec& m : kLayerMatvecs) {
      if (m.op == Op::FfnGate) add(p + "ffn_norm.weight", {e}, "norm", i);
      add_matrix(m, i);
      if (m.op != Op::AttnV) continue;
      if (s.qkv_bias) {
        add(p + "attn_q.bias", {q_width}, "bias", i);
        add(p + "attn_k.bias", {kv_width}, "bias", i);
        add(p + "attn_v.bias", {kv_width}, "bias", i);
      }
      if (s.qk_norm) {
        add(p + "attn_q_norm.weight", {hd}, "norm", i);
        add(p + "attn_k_norm.weight", {hd}, "norm", i);
      }
    }
  }
  add("output_norm.weight", {e}, "norm", -1);
  if (!s.tied) add_matrix(kLmHead, -1);
  return plan;
}

// ---------------------------------------------------------------------------------
// The tokenizer.

namespace {

// The byte-level alphabet's bytes in the order GPT-2 numbers its byte tokens: the
// printable ones first.
std::array<unsigned char, 256> byte_token_order() {
  std::array<unsigned char, 256> order{};
  int n = 0;
  for (const bool printable : {true, false})
    for (int b = 0; b < 256; ++b)
      if (ByteLevelAlphabet::printable(static_cast<unsigned char>(b)) == printable)
        order[n++] = static_cast<unsigned char>(b);
  return order;
}

// Text the merges are learned from: plain ASCII prose without apostrophes, so that the
// simple splitter below cuts it exactly where the GPT-2 pre-tokenizer does.
constexpr const char* kSampleText =
    "The river town woke slowly on a cold morning in early spring. A baker opened the shutters of her small "
    "shop and set out bread, still warm, on a long wooden table by the window. Across the square, the old "
    "clock on the tower struck seven, and a few people walked past with their heads down against the wind.\n"
    "At the edge of the town there was a station where the morning train stopped for only two minutes. "
    "Most days nobody got off. On this day a young woman stepped down with one bag and a folded map, looked "
    "at the hills behind the houses, and asked the station master where she could find the library.\n"
    "The library was a narrow building of grey stone, with three floors of shelves and a reading room under "
    "the roof. It had been built more than 120 years ago by a merchant who believed that a town without books "
    "would soon forget its own history. The woman had come to read the letters he had left there: 48 boxes of "
    "paper, written in a careful hand, describing the trade in wool, salt and timber along the river.\n"
    "She worked every day from nine in the morning until the light began to fade. She made notes, copied "
    "numbers into a small notebook, and drew a map of the old warehouses, most of which had long since been "
    "turned into homes. In the evenings she walked along the river and tried to imagine the boats, the noise "
    "of the market, and the people who had lived and worked in the same streets.\n"
    "After three weeks she understood something the letters never said directly. The merchant had not been "
    "writing for his partners or his family. He had been writing for whoever would come later and read them, "
    "and he had tried, in his plain and patient way, to explain how a small place on a river could matter to "
    "the rest of the world. When she left, she gave the library a copy of her notes, and the librarian put "
    "them in a new box, number 49, at the end of the shelf.\n";

enum class CharClass { Letter, Digit, Space, Other };
CharClass char_class(char c) {
  if (std::isalpha(static_cast<unsigned char>(c))) return CharClass::Letter;
  if (std::isdigit(static_cast<unsigned char>(c))) return CharClass::Digit;
  if (std::isspace(static_cast<unsigned char>(c))) return CharClass::Space;
  return CharClass::Other;
}

// The GPT-2 split for ASCII text without apostrophes: runs of letters, digits or
// other symbols, each taking one preceding space; whitespace runs otherwise.
std::vector<std::string> split_words(std::string_view text) {
  std::vector<std::string> out;
  std::size_t i = 0;
  while (i < text.size()) {
    std::size_t j = i;
    const CharClass c = char_class(text[i]);
    if (c == CharClass::Space) {
      while (j < text.size() && char_class(text[j]) == CharClass::Space) ++j;
      // A single space before a word joins that word.
      if (j < text.size() && text[j - 1] == ' ') --j;
      if (j == i) {
        const CharClass next = char_class(text[i + 1]);
        j = i + 1;
        while (j < text.size() && char_class(text[j]) == next) ++j;
      }
    } else {
      while (j < text.size() && char_class(text[j]) == c) ++j;
    }
    out.emplace_back(text.substr(i, j - i));
    i = j;
  }
  return out;
}

// Byte-level BPE over token ids, as the GPT-2 tokenizer applies merges: repeatedly
// merge the adjacent pair of lowest rank (the leftmost on a tie).
class MergeTable {
 public:
  static std::uint64_t key(int a, int b) { return (static_cast<std::uint64_t>(a) << 32) | static_cast<std::uint32_t>(b); }
  void add(int a, int b, int result) {
    table_.emplace(key(a, b), std::pair<int, int>{static_cast<int>(table_.size()), result});
  }
  void remove(int a, int b) { table_.erase(key(a, b)); }
  std::vector<int> encode(std::vector<int> sym) const {
    while (sym.size() > 1) {
      int best_rank = -1, best_result = -1;
      std::size_t best = 0;
      for (std::size_t i = 0; i + 1 < sym.size(); ++i) {
        const auto it = table_.find(key(sym[i], sym[i + 1]));
        if (it != table_.end() && (best_rank < 0 || it->second.first < best_rank)) {
          best_rank = it->second.first;
          best_result = it->second.second;
          best = i;
        }
      }
      if (best_rank < 0) break;
      sym[best] = best_result;
      sym.erase(sym.begin() + static_cast<std::ptrdiff_t>(best) + 1);
    }
    return sym;
  }

 private:
  std::unordered_map<std::uint64_t, std::pair<int, int>> table_;  // pair -> (rank, merged token)
};

struct VocabBuilder {
  const ByteLevelAlphabet& alphabet = byte_level_alphabet();
  SyntheticVocab v;
  std::unordered_map<std::string, int> ids;
  std::vector<std::vector<int>> bytes_of;  // each token's text as byte-token ids
  int byte_id[256] = {};
  MergeTable merges;

  void add_token(const std::string& text, int type, std::vector<int> bytes) {
    ids.emplace(text, static_cast<int>(v.tokens.size()));
    v.tokens.push_back(text);
    v.types.push_back(type);
    bytes_of.push_back(std::move(bytes));
  }

  VocabBuilder() {
    const auto order = byte_token_order();
    for (int k = 0; k < 256; ++k) {
      const int b = order[k];
      byte_id[b] = k;
      add_token(alphabet.text[b], 1, {k});
    }
    add_token("<|bos|>", 3, {});
    add_token("<|eos|>", 3, {});
  }

  // Adds the merge a + b if the result is new and BPE reaches it from its own bytes.
  bool try_merge(int a, int b) {
    const std::string text = v.tokens[static_cast<std::size_t>(a)] + v.tokens[static_cast<std::size_t>(b)];
    if (ids.count(text)) return false;
    const int id = static_cast<int>(v.tokens.size());
    std::vector<int> bytes = bytes_of[static_cast<std::size_t>(a)];
    const auto& rb = bytes_of[static_cast<std::size_t>(b)];
    bytes.insert(bytes.end(), rb.begin(), rb.end());
    merges.add(a, b, id);
    if (merges.encode(bytes) != std::vector<int>{id}) {
      merges.remove(a, b);
      return false;
    }
    v.merges.push_back(v.tokens[static_cast<std::size_t>(a)] + " " + v.tokens[static_cast<std::size_t>(b)]);
    add_token(text, 1, std::move(bytes));
    return true;
  }

  // BPE training on the sample text: merge the most frequent adjacent pair (ties: the
  // smallest ids) until pairs seen twice run out or the vocabulary is full.
  void learn(int vocab_size) {
    std::map<std::string, int> counts;
    for (const std::string& w : split_words(kSampleText)) ++counts[w];
    std::vector<std::pair<std::vector<int>, int>> words;
    for (const auto& [w, n] : counts) {
      std::vector<int> sym;
      for (unsigned char c : w) sym.push_back(byte_id[c]);
      words.emplace_back(std::move(sym), n);
    }
    std::unordered_set<std::uint64_t> refused;
    while (static_cast<int>(v.tokens.size()) < vocab_size) {
      std::map<std::pair<int, int>, int> pairs;
      for (const auto& [sym, n] : words)
        for (std::size_t i = 0; i + 1 < sym.size(); ++i) pairs[{sym[i], sym[i + 1]}] += n;
      std::pair<int, int> best{-1, -1};
      int best_count = 1;
      for (const auto& [p, n] : pairs)
        if (n > best_count && !refused.count(MergeTable::key(p.first, p.second))) {
          best = p;
          best_count = n;
        }
      if (best.first < 0) break;
      if (!try_merge(best.first, best.second)) {
        refused.insert(MergeTable::key(best.first, best.second));
        continue;
      }
      const int merged = static_cast<int>(v.tokens.size()) - 1;
      for (auto& [sym, n] : words) {
        std::vector<int> out;
        for (std::size_t i = 0; i < sym.size(); ++i) {
          if (i + 1 < sym.size() && sym[i] == best.first && sym[i + 1] == best.second) {
            out.push_back(merged);
            ++i;
          } else {
            out.push_back(sym[i]);
          }
        }
        sym = std::move(out);
      }
      ++v.learned;
    }
  }

  // Fills the vocabulary with merges of random letter tokens: a word piece (letters,
  // with or without a leading space) followed by a short run of letters. The result is
  // again one piece for the GPT-2 pre-tokenizer, so the tokenizer can reach it.
  void fill(int vocab_size) {
    const std::string space = alphabet.text[' '];
    auto letters = [](std::string_view s) {
      return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return std::isalpha(static_cast<unsigned char>(c)) != 0; });
    };
    constexpr std::size_t kMaxLeft = 12, kMaxRight = 3;  // tokens of at most 15 bytes
    std::vector<int> left, right;
    auto classify = [&](int id) {
      const std::string& t = v.tokens[static_cast<std::size_t>(id)];
      const bool word = letters(t);
      if (word && t.size() <= kMaxRight) right.push_back(id);
      if (t.size() <= kMaxLeft && (word || (t.starts_with(space) && letters(std::string_view(t).substr(space.size())))))
        left.push_back(id);
    };
    for (int id = 0; id < static_cast<int>(v.tokens.size()); ++id) classify(id);
    std::mt19937_64 rng(0x5eed70c3);  // the vocabulary depends only on its size
    std::uint64_t attempts = 0;
    const std::uint64_t max_attempts = 100 * static_cast<std::uint64_t>(vocab_size) + 100000;
    while (static_cast<int>(v.tokens.size()) < vocab_size) {
      if (++attempts > max_attempts) fail("internal: cannot fill a vocabulary of {} tokens", vocab_size);
      const int a = left[rng() % left.size()], b = right[rng() % right.size()];
      if (try_merge(a, b)) classify(static_cast<int>(v.tokens.size()) - 1);
    }
  }
};

}  // namespace

SyntheticVocab synthetic_vocab(int vocab_size) {
  if (vocab_size < 258) fail("vocabulary size {} is too small (at least 258: 256 bytes, <|bos|>, <|eos|>)", vocab_size);
  VocabBuilder b;
  b.learn(vocab_size);
  b.fill(vocab_size);
  return std::move(b.v);
}

// ---------------------------------------------------------------------------------
// Weights.

namespace {

std::uint64_t mix64(std::uint64_t z) {  // splitmix64's finalizer
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

std::uint64_t hash_name(std::string_view s) {  // FNV-1a
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

// Standard normal values from a splitmix64 stream, two at a time (Box-Muller).
class RowNormals {
 public:
  RowNormals(std::uint64_t seed, std::uint64_t tensor, std::uint64_t row)
      : state_(mix64(seed ^ mix64(tensor ^ mix64(row + 0x9e3779b97f4a7c15ull)))) {}
  void fill(float* out, std::int64_t n) {
    std::int64_t i = 0;
    for (; i + 1 < n; i += 2) pair(out[i], out[i + 1]);
    if (i < n) {
      float spare;
      pair(out[i], spare);
    }
  }

 private:
  std::uint64_t state_;
  std::uint64_t next() { return mix64(state_ += 0x9e3779b97f4a7c15ull); }
  void pair(float& a, float& b) {
    const std::uint64_t bits = next();
    // Two 32-bit uniforms; u1 in (0, 1] so the log is finite.
    const double u1 = (static_cast<double>(bits >> 32) + 1.0) * 0x1p-32;
    const double u2 = static_cast<double>(bits & 0xffffffffu) * 0x1p-32;
    const double r = std::sqrt(-2.0 * std::log(u1));
    const double t = 2.0 * std::numbers::pi * u2;
    a = static_cast<float>(r * std::cos(t));
    b = static_cast<float>(r * std::sin(t));
  }
};

// The value distribution of each kind of tensor.
void fill_row(const SyntheticTensor& t, std::uint64_t seed, std::uint64_t row, float* x) {
  const auto n = static_cast<std::int64_t>(t.dims[0]);
  RowNormals(seed, hash_name(t.name), row).fill(x, n);
  if (t.kind == "norm") {
    // Around 1, never near 0: a zero norm weight would silence a channel.
    for (std::int64_t i = 0; i < n; ++i) x[i] = std::clamp(1.0f + 0.1f * x[i], 0.25f, 1.75f);
  } else if (t.kind == "bias") {
    for (std::int64_t i = 0; i < n; ++i) x[i] *= 0.1f;
  } else {
    // Unit-variance inputs give unit-variance outputs, layer after layer; a tied
    // token_embd as lm_head then gives logits of unit spread, like a trained model's
    // few-nat range rather than a one-hot spike.
    const float scale = 1.0f / std::sqrt(static_cast<float>(n));
    for (std::int64_t i = 0; i < n; ++i) x[i] *= scale;
  }
}

void add_metadata(gguf::Writer& w, const SyntheticPlan& plan, const SyntheticVocab& vocab) {
  const SyntheticShape& s = plan.shape;
  const std::string a = s.arch + ".";
  w.add_string("general.architecture", s.arch);
  w.add_string("general.name", plan.name);
  w.add_u32(a + "block_count", static_cast<std::uint32_t>(s.n_layers));
  w.add_u32(a + "context_length", static_cast<std::uint32_t>(s.context));
  w.add_u32(a + "embedding_length", static_cast<std::uint32_t>(s.n_embd));
  w.add_u32(a + "feed_forward_length", static_cast<std::uint32_t>(s.n_ff));
  w.add_u32(a + "attention.head_count", static_cast<std::uint32_t>(s.n_head));
  w.add_u32(a + "attention.head_count_kv", static_cast<std::uint32_t>(s.n_head_kv));
  w.add_f32(a + "rope.freq_base", s.rope_freq_base);
  w.add_f32(a + "attention.layer_norm_rms_epsilon", s.rms_eps);
  // Converters write the head size when the model sets it apart from width / heads
  // (Qwen3 always does).
  if (s.arch == "qwen3" || s.head_dim * s.n_head != s.n_embd) {
    w.add_u32(a + "attention.key_length", static_cast<std::uint32_t>(s.head_dim));
    w.add_u32(a + "attention.value_length", static_cast<std::uint32_t>(s.head_dim));
  }
  if (s.arch == "llama") {  // llama files also carry these; qwen files do not
    w.add_u32(a + "vocab_size", static_cast<std::uint32_t>(s.vocab));
    w.add_u32(a + "rope.dimension_count", static_cast<std::uint32_t>(s.head_dim));
  }
  w.add_u32("general.file_type", plan.file_type);
  w.add_string("tokenizer.ggml.model", "gpt2");
  // GPT-2's pre-tokenizer by the name llama.cpp's vocabulary loader knows it by.
  w.add_string("tokenizer.ggml.pre", "gpt-2");
  w.add_string_array("tokenizer.ggml.tokens", vocab.tokens);
  w.add_i32_array("tokenizer.ggml.token_type", vocab.types);
  w.add_string_array("tokenizer.ggml.merges", vocab.merges);
  w.add_u32("tokenizer.ggml.bos_token_id", static_cast<std::uint32_t>(vocab.bos));
  w.add_u32("tokenizer.ggml.eos_token_id", static_cast<std::uint32_t>(vocab.eos));
  w.add_bool("tokenizer.ggml.add_bos_token", true);
  w.add_u32("general.quantization_version", 2);
}

void declare(gguf::Writer& w, const SyntheticPlan& plan, const SyntheticVocab& vocab) {
  add_metadata(w, plan, vocab);
  for (const auto& t : plan.tensors) w.add_tensor(t.name, t.dims, ggml_type_id(t.type));
}

}  // namespace

std::uint64_t synthetic_file_size(const SyntheticPlan& plan) {
  gguf::Writer w;
  declare(w, plan, synthetic_vocab(plan.shape.vocab));
  return w.file_size();
}

MakeModelResult make_model(const SyntheticSpec& spec, const std::string& path, const MakeModelProgressFn& progress) {
  MakeModelResult result;
  result.plan = plan_synthetic_model(spec);
  const SyntheticPlan& plan = result.plan;
  const SyntheticVocab vocab = synthetic_vocab(plan.shape.vocab);

  gguf::Writer w;
  declare(w, plan, vocab);
  result.file_bytes = w.file_size();
  w.begin(path);

  MakeModelProgress p;
  p.n_tensors = plan.tensors.size();
  p.file_bytes = result.file_bytes;
  p.current = plan.tensors.empty() ? "" : plan.tensors.front().name;
  p.bytes_written = w.bytes_written();
  if (progress) progress(p);
  // Rows are generated and quantized in parallel, a chunk of about 32 MiB at a time.
  constexpr std::uint64_t kChunkBytes = 32u << 20;
  std::vector<std::uint8_t> chunk;
  for (std::size_t k = 0; k < plan.tensors.size(); ++k) {
    const SyntheticTensor& t = plan.tensors[k];
    const auto cols = static_cast<std::int64_t>(t.dims[0]);
    const std::int64_t rows = static_cast<std::int64_t>(t.dims.size() > 1 ? t.dims[1] : 1);
    const std::size_t rb = row_bytes(t.type, cols);
    const std::int64_t rows_per_chunk = std::max<std::int64_t>(1, static_cast<std::int64_t>(kChunkBytes / rb));
    p.current = t.name;
    for (std::int64_t r0 = 0; r0 < rows; r0 += rows_per_chunk) {
      const std::int64_t n = std::min(rows_per_chunk, rows - r0);
      chunk.resize(static_cast<std::size_t>(n) * rb);
      // Threads only where there is enough work to share (not for a norm's one row).
#pragma omp parallel if (n * cols >= (1 << 16))
      {
        std::vector<float> x(static_cast<std::size_t>(cols));
#pragma omp for schedule(dynamic, 4)
        for (std::int64_t r = 0; r < n; ++r) {
          fill_row(t, plan.seed, static_cast<std::uint64_t>(r0 + r), x.data());
          quantize_row(t.type, x.data(), chunk.data() + static_cast<std::size_t>(r) * rb, cols);
        }
      }
      w.write_tensor_part(t.name, chunk);
      p.bytes_written = w.bytes_written();
      if (progress) progress(p);
    }
    p.tensor = k + 1;
  }
  w.finish();
  p.bytes_written = w.bytes_written();
  if (progress) progress(p);
  return result;
}

}  // namespace qmv
