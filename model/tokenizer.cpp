#include "model/tokenizer.h"

#include <unicode/regex.h>
#include <unicode/utext.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <optional>
#include <functional>
#include <queue>
#include <memory>

namespace qmv {

// A reversible map: every byte string is a string of visible characters (a space is
// 'Ġ', U+0120).
ByteLevelAlphabet::ByteLevelAlphabet() {
  int extra = 0;
  for (int b = 0; b < 256; ++b) {
    const int cp = printable(static_cast<unsigned char>(b)) ? b : 256 + extra++;
    std::string s;
    if (cp < 0x80) {
      s += static_cast<char>(cp);
    } else {
      s += static_cast<char>(0xC0 | (cp >> 6));
      s += static_cast<char>(0x80 | (cp & 0x3F));
    }
    text[b] = s;
    to_byte[s] = b;
  }
}

const ByteLevelAlphabet& byte_level_alphabet() {
  static const ByteLevelAlphabet m;
  return m;
}

namespace {

// Length of the UTF-8 sequence starting with lead byte c (1 for invalid bytes).
std::size_t utf8_len(unsigned char c) {
  if (c >= 0xF0) return 4;
  if (c >= 0xE0) return 3;
  if (c >= 0xC0) return 2;
  return 1;
}

// Splits each piece by `pattern`: matches and the text between them become pieces,
// in order (the convention of llama.cpp's pre-tokenizer lists).
std::vector<std::string> regex_split(const std::vector<std::string>& pieces, const std::string& pattern) {
  UErrorCode status = U_ZERO_ERROR;
  UParseError parse_error;
  std::unique_ptr<icu::RegexPattern> re(
      icu::RegexPattern::compile(icu::UnicodeString::fromUTF8(pattern), 0, parse_error, status));
  if (U_FAILURE(status)) throw TokenizerError("tokenizer: bad pre-tokenizer regex: " + pattern);
  std::unique_ptr<icu::RegexMatcher> m(re->matcher(status));
  std::vector<std::string> out;
  for (const std::string& piece : pieces) {
    // A UTF-8 UText makes match positions byte offsets into `piece`.
    UText* text = utext_openUTF8(nullptr, piece.data(), static_cast<std::int64_t>(piece.size()), &status);
    m->reset(text);
    std::int64_t last = 0;
    while (m->find()) {
      const std::int64_t s = m->start64(status), e = m->end64(status);
      if (s > last) out.emplace_back(piece.substr(static_cast<std::size_t>(last), static_cast<std::size_t>(s - last)));
      if (e > s) out.emplace_back(piece.substr(static_cast<std::size_t>(s), static_cast<std::size_t>(e - s)));
      last = e;
    }
    if (last < static_cast<std::int64_t>(piece.size())) out.emplace_back(piece.substr(static_cast<std::size_t>(last)));
    utext_close(text);
    if (U_FAILURE(status)) throw TokenizerError("tokenizer: regex failure on the input");
  }
  return out;
}

const char* kGpt2Split = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)";

// tokenizer.ggml.token_type values.
enum TokenType : int { kUndefined = 0, kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6 };

// SentencePiece writes a space as U+2581 so that pieces can carry it visibly.
constexpr std::string_view kEscapedSpace = "\xE2\x96\x81";

// "<0xXX>" -> the byte XX; -1 for any other text.
int parse_byte_piece(std::string_view s) {
  if (s.size() != 6 || s.substr(0, 3) != "<0x" || s[5] != '>') return -1;
  int value = 0;
  for (char c : s.substr(3, 2)) {
    const int digit = (c >= '0' && c <= '9') ? c - '0'
                      : (c >= 'A' && c <= 'F') ? c - 'A' + 10
                      : (c >= 'a' && c <= 'f') ? c - 'a' + 10 : -1;
    if (digit < 0) return -1;
    value = value * 16 + digit;
  }
  return value;
}

std::optional<bool> get_bool(const gguf::File& f, const std::string& key) {
  const gguf::Value* v = f.find(key);
  if (!v) return std::nullopt;
  if (v->type != gguf::ValueType::BOOL)
    throw TokenizerError("tokenizer: '" + key + "' is " + std::string(gguf::to_string(v->type)) + ", expected bool");
  return v->u != 0;
}

const gguf::Value* find_array(const gguf::File& f, const std::string& key, bool want_strings) {
  const gguf::Value* v = f.find(key);
  if (!v) return nullptr;
  if (v->type != gguf::ValueType::ARRAY || (v->elem_type == gguf::ValueType::STRING) != want_strings)
    throw TokenizerError("tokenizer: '" + key + "' is not " + (want_strings ? "a string" : "a numeric") + " array");
  return v;
}

// A symbol of a piece of text being merged: a span of the text, linked to its
// neighbours; a merged-away symbol keeps length 0. Symbols are contiguous in the text,
// so a merged symbol spans both of its parts.
struct MergeSymbol {
  std::size_t start, len;
  int prev, next;
};

// Merges adjacent symbols, the best candidate pair first (`better` on the keys that
// `key_of(left, right)` gives, std::nullopt for a pair that does not merge), the
// leftmost among equals. Candidates wait in a queue, and one whose symbols changed since
// it was queued is stale and skipped: n symbols take O(n log n), where rescanning every
// pair after each merge is quadratic.
template <class Key, class Better, class KeyOf>
void merge_symbols(std::vector<MergeSymbol>& sym, Better better, KeyOf key_of) {
  struct Candidate {
    Key key;
    int left, right;
    std::size_t len;
  };
  const auto worse = [&](const Candidate& a, const Candidate& b) {
    return better(b.key, a.key) || (!better(a.key, b.key) && a.left > b.left);
  };
  std::priority_queue<Candidate, std::vector<Candidate>, decltype(worse)> queue(worse);
  const auto consider = [&](int left) {
    if (left < 0 || sym[static_cast<std::size_t>(left)].next < 0) return;
    const MergeSymbol& l = sym[static_cast<std::size_t>(left)];
    const MergeSymbol& r = sym[static_cast<std::size_t>(l.next)];
    if (const std::optional<Key> key = key_of(l, r)) queue.push({*key, left, l.next, l.len + r.len});
  };
  for (int i = 0; i + 1 < static_cast<int>(sym.size()); ++i) consider(i);
  while (!queue.empty()) {
    const Candidate c = queue.top();
    queue.pop();
    MergeSymbol& l = sym[static_cast<std::size_t>(c.left)];
    if (l.len == 0 || l.next != c.right) continue;
    MergeSymbol& r = sym[static_cast<std::size_t>(c.right)];
    if (l.len + r.len != c.len) continue;
    l.len += r.len;
    r.len = 0;
    l.next = r.next;
    if (l.next >= 0) sym[static_cast<std::size_t>(l.next)].prev = c.left;
    consider(l.prev);
    consider(c.left);
  }
}

}  // namespace

Tokenizer Tokenizer::from_gguf(const gguf::File& f) {
  const auto model = f.get_string("tokenizer.ggml.model");
  if (!model) throw TokenizerError("tokenizer: missing 'tokenizer.ggml.model'");
  Tokenizer t;
  t.model_ = *model;
  if (*model == "gpt2") {
    t.kind_ = Model::Gpt2;
  } else if (*model == "llama") {
    t.kind_ = Model::Llama;
  } else {
    throw TokenizerError("tokenizer: model '" + *model + "' is not supported (supported: gpt2, llama)");
  }
  t.pre_ = f.get_string("tokenizer.ggml.pre").value_or("default");

  const gguf::Value* tokens = find_array(f, "tokenizer.ggml.tokens", true);
  if (!tokens) throw TokenizerError("tokenizer: missing string array 'tokenizer.ggml.tokens'");
  if (tokens->count == 0 || tokens->count > INT_MAX)
    throw TokenizerError("tokenizer: 'tokenizer.ggml.tokens' has " + std::to_string(tokens->count) + " entries");
  const std::uint64_t n = tokens->count;
  const gguf::Value* types = find_array(f, "tokenizer.ggml.token_type", false);
  if (types && types->count != n)
    throw TokenizerError("tokenizer: 'tokenizer.ggml.token_type' has " + std::to_string(types->count) +
                         " entries for " + std::to_string(n) + " tokens");

  // Tokens matched whole in the text: control and user-defined ones, and for llama
  // vocabularies also the unknown token, as llama.cpp does when it parses specials.
  const auto matched_whole = [&](int type) {
    return type == kControl || type == kUserDefined || (type == kUnknown && t.kind_ == Model::Llama);
  };
  t.pieces_.reserve(static_cast<std::size_t>(n));
  t.is_special_.assign(static_cast<std::size_t>(n), 0);
  t.is_byte_.assign(static_cast<std::size_t>(n), 0);
  std::vector<int> type_of(static_cast<std::size_t>(n), kNormal);
  for (std::uint64_t i = 0; i < n; ++i) {
    t.pieces_.emplace_back(f.array_string(*tokens, i));
    t.ids_.emplace(t.pieces_.back(), static_cast<int>(i));
    if (!types) continue;
    const double type = f.array_number(*types, i);
    if (!(type >= static_cast<double>(kUndefined) && type <= static_cast<double>(kByte)) || type != std::floor(type)) {
      const bool integral = type == std::floor(type) && std::abs(type) < 1e18;
      throw TokenizerError("tokenizer: token " + std::to_string(i) + " has token_type " +
                           (integral ? std::to_string(static_cast<long long>(type)) : std::to_string(type)) +
                           " (expected 0..6)");
    }
    type_of[i] = static_cast<int>(type);
    if (matched_whole(type_of[i])) {
      t.is_special_[i] = 1;
      if (!t.pieces_.back().empty()) t.specials_.push_back(t.pieces_.back());
    }
  }
  std::sort(t.specials_.begin(), t.specials_.end(), [](const auto& a, const auto& b) { return a.size() > b.size(); });

  // Special ids; a llama vocabulary without them gets llama.cpp's defaults.
  const bool llama = t.kind_ == Model::Llama;
  auto id = [&](const std::string& key, int fallback) {
    const auto v = f.get_uint(key);
    if (v && *v >= n)
      throw TokenizerError("tokenizer: " + key + " = " + std::to_string(*v) + " is out of range (" +
                           std::to_string(n) + " tokens)");
    if (v) return static_cast<int>(*v);
    return fallback < static_cast<int>(n) ? fallback : -1;
  };
  t.bos_ = id("tokenizer.ggml.bos_token_id", llama ? 1 : -1);
  t.eos_ = id("tokenizer.ggml.eos_token_id", llama ? 2 : -1);
  t.unk_ = id("tokenizer.ggml.unknown_token_id", llama ? 0 : -1);
  t.add_bos_ = get_bool(f, "tokenizer.ggml.add_bos_token").value_or(llama);
  t.add_eos_ = get_bool(f, "tokenizer.ggml.add_eos_token").value_or(false);
  if (t.add_bos_ && t.bos_ < 0) throw TokenizerError("tokenizer: 'tokenizer.ggml.add_bos_token' is true but there is no BOS token");
  if (t.add_eos_ && t.eos_ < 0) throw TokenizerError("tokenizer: 'tokenizer.ggml.add_eos_token' is true but there is no EOS token");

  if (llama) {
    t.load_llama(f, type_of, types != nullptr);
  } else {
    t.load_gpt2(f);
  }
  return t;
}

void Tokenizer::load_gpt2(const gguf::File& f) {
  // Pre-tokenizers by the name llama.cpp's converter writes.
  if (pre_ == "smollm" || pre_ == "starcoder" || pre_ == "refact" || pre_ == "command-r" || pre_ == "codeshell" ||
      pre_ == "exaone") {
    split_regexes_ = {"\\p{N}", kGpt2Split};
  } else if (pre_ == "gpt-2" || pre_ == "gpt2" || pre_ == "default" || pre_ == "mpt" || pre_ == "olmo" ||
             pre_ == "jais") {
    split_regexes_ = {kGpt2Split};
  } else {
    throw TokenizerError("tokenizer: pre-tokenizer '" + pre_ + "' is not supported yet");
  }
  const gguf::Value* merges = find_array(f, "tokenizer.ggml.merges", true);
  if (!merges) throw TokenizerError("tokenizer: missing string array 'tokenizer.ggml.merges'");
  for (std::uint64_t i = 0; i < merges->count; ++i)
    merge_rank_.emplace(std::string(f.array_string(*merges, i)), static_cast<int>(i));
}

void Tokenizer::load_llama(const gguf::File& f, const std::vector<int>& type_of, bool typed) {
  const gguf::Value* scores = find_array(f, "tokenizer.ggml.scores", false);
  if (!scores) throw TokenizerError("tokenizer: missing float array 'tokenizer.ggml.scores' (llama merges by score)");
  if (scores->count != pieces_.size())
    throw TokenizerError("tokenizer: 'tokenizer.ggml.scores' has " + std::to_string(scores->count) + " entries for " +
                         std::to_string(pieces_.size()) + " tokens");
  scores_.reserve(pieces_.size());
  for (std::uint64_t i = 0; i < scores->count; ++i) {
    const double s = f.array_number(*scores, i);
    if (std::isnan(s)) throw TokenizerError("tokenizer: token " + std::to_string(i) + " has a NaN score");
    scores_.push_back(static_cast<float>(s));
  }
  add_space_prefix_ = get_bool(f, "tokenizer.ggml.add_space_prefix").value_or(true);

  byte_token_.fill(-1);
  for (std::size_t i = 0; i < pieces_.size(); ++i) {
    const int byte = parse_byte_piece(pieces_[i]);
    if (type_of[i] == kByte && byte < 0)
      throw TokenizerError("tokenizer: token " + std::to_string(i) + " has type byte but its text '" + pieces_[i] +
                           "' is not <0xXX>");
    // Without token types the text is all there is to tell a byte token by.
    if (byte < 0 || (typed && type_of[i] != kByte)) continue;
    is_byte_[i] = 1;
    auto& slot = byte_token_[static_cast<std::size_t>(byte)];
    if (slot < 0) slot = static_cast<int>(i);
    has_byte_tokens_ = true;
  }
}

void Tokenizer::encode_gpt2_word(std::string_view bytes, std::vector<int>& out) const {
  // Symbols: one byte-level character per input byte, merged pairwise by rank, the
  // lowest first.
  std::string text;
  std::vector<MergeSymbol> sym;
  for (unsigned char b : bytes) {
    const std::string& c = byte_level_alphabet().text[b];
    const int index = static_cast<int>(sym.size());
    sym.push_back({text.size(), c.size(), index - 1, index + 1});
    text += c;
  }
  if (sym.empty()) return;
  sym.back().next = -1;
  std::string key;
  merge_symbols<int>(sym, std::less<int>(), [&](const MergeSymbol& l, const MergeSymbol& r) -> std::optional<int> {
    key.assign(text, l.start, l.len);
    key += ' ';
    key.append(text, r.start, r.len);
    const auto it = merge_rank_.find(key);
    if (it == merge_rank_.end()) return std::nullopt;
    return it->second;
  });
  std::vector<std::string> pieces;
  for (int i = 0; i >= 0; i = sym[static_cast<std::size_t>(i)].next)
    pieces.push_back(text.substr(sym[static_cast<std::size_t>(i)].start, sym[static_cast<std::size_t>(i)].len));
  for (const std::string& s : pieces) {
    const auto it = ids_.find(s);
    if (it != ids_.end()) {
      out.push_back(it->second);
      continue;
    }
    // A symbol the vocabulary lacks: its characters one by one (each a byte token).
    for (std::size_t i = 0; i < s.size();) {
      const std::size_t n = utf8_len(static_cast<unsigned char>(s[i]));
      const auto ch = ids_.find(s.substr(i, n));
      if (ch == ids_.end()) throw TokenizerError("tokenizer: the vocabulary lacks a byte token");
      out.push_back(ch->second);
      i += n;
    }
  }
}

void Tokenizer::encode_spm_run(std::string_view run, std::vector<int>& out) const {
  // Escaped text; the prefix makes the first word look like every word after a space.
  std::string text(add_space_prefix_ ? kEscapedSpace : "");
  for (char c : run) {
    if (c == ' ') {
      text += kEscapedSpace;
    } else {
      text += c;
    }
  }
  // Symbols: UTF-8 characters (a stray byte is a character of its own), merged pairwise
  // by the merged piece's score, the highest first.
  std::vector<MergeSymbol> sym;
  for (std::size_t pos = 0; pos < text.size();) {
    const std::size_t len = std::min(utf8_len(static_cast<unsigned char>(text[pos])), text.size() - pos);
    const int index = static_cast<int>(sym.size());
    sym.push_back({pos, len, index - 1, index + 1});
    pos += len;
  }
  if (sym.empty()) return;
  sym.back().next = -1;
  merge_symbols<float>(sym, std::greater<float>(),
                       [&](const MergeSymbol& l, const MergeSymbol& r) -> std::optional<float> {
                         const auto it = ids_.find(text.substr(l.start, l.len + r.len));
                         if (it == ids_.end()) return std::nullopt;
                         return scores_[static_cast<std::size_t>(it->second)];
                       });
  // Merged symbols are pieces by construction; a single character may not be.
  for (int i = 0; i >= 0; i = sym[static_cast<std::size_t>(i)].next) {
    const std::string_view piece = std::string_view(text).substr(sym[static_cast<std::size_t>(i)].start,
                                                                 sym[static_cast<std::size_t>(i)].len);
    const auto it = ids_.find(std::string(piece));
    if (it != ids_.end()) {
      out.push_back(it->second);
    } else {
      spell_unknown(piece, out);
    }
  }
}

void Tokenizer::spell_unknown(std::string_view character, std::vector<int>& out) const {
  if (has_byte_tokens_) {
    for (unsigned char b : character) {
      const int id = byte_token_[b];
      if (id < 0) {
        static const char* hex = "0123456789ABCDEF";
        throw TokenizerError(std::string("tokenizer: the vocabulary has byte tokens but not <0x") + hex[b >> 4] +
                             hex[b & 15] + ">");
      }
      out.push_back(id);
    }
  } else if (unk_ >= 0) {
    out.push_back(unk_);
  } else {
    throw TokenizerError("tokenizer: the vocabulary cannot spell '" + std::string(character) +
                         "' and has neither byte tokens nor an unknown token");
  }
}

std::vector<int> Tokenizer::encode(std::string_view text, bool add_bos, bool add_eos) const {
  std::vector<int> out;
  if (add_bos && bos_ >= 0) out.push_back(bos_);
  // Text runs between special tokens are encoded on their own.
  const auto encode_run = [&](std::string_view run) {
    if (run.empty()) return;
    if (kind_ == Model::Llama) {
      encode_spm_run(run, out);
      return;
    }
    std::vector<std::string> pieces = {std::string(run)};
    for (const std::string& re : split_regexes_) pieces = regex_split(pieces, re);
    for (const std::string& p : pieces) encode_gpt2_word(p, out);
  };
  std::size_t pos = 0, run_start = 0;
  while (pos < text.size()) {
    const auto special = std::find_if(specials_.begin(), specials_.end(),
                                      [&](const std::string& s) { return text.substr(pos, s.size()) == s; });
    if (special == specials_.end()) {
      ++pos;
      continue;
    }
    encode_run(text.substr(run_start, pos - run_start));
    out.push_back(ids_.at(*special));
    pos += special->size();
    run_start = pos;
  }
  encode_run(text.substr(run_start));
  if (add_eos && eos_ >= 0) out.push_back(eos_);
  return out;
}

std::string Tokenizer::decode(int token) const {
  if (token < 0 || token >= vocab_size()) throw TokenizerError("tokenizer: token id " + std::to_string(token) + " out of range");
  const auto id = static_cast<std::size_t>(token);
  const std::string& piece = pieces_[id];
  if (is_special_[id]) return piece;
  if (kind_ == Model::Llama) {
    if (is_byte_[id]) return std::string(1, static_cast<char>(parse_byte_piece(piece)));
    std::string text;
    for (std::size_t i = 0; i < piece.size();) {
      if (piece.compare(i, kEscapedSpace.size(), kEscapedSpace) == 0) {
        text += ' ';
        i += kEscapedSpace.size();
      } else {
        text += piece[i++];
      }
    }
    return text;
  }
  std::string bytes;
  for (std::size_t i = 0; i < piece.size();) {
    const std::size_t n = utf8_len(static_cast<unsigned char>(piece[i]));
    const auto it = byte_level_alphabet().to_byte.find(piece.substr(i, n));
    if (it == byte_level_alphabet().to_byte.end()) {
      bytes += piece.substr(i, n);  // not a byte-level character: keep it as it is
    } else {
      bytes += static_cast<char>(it->second);
    }
    i += n;
  }
  return bytes;
}

std::string Tokenizer::decode(const std::vector<int>& tokens) const {
  std::string s;
  // Where encode began a text run (the start, or after a special token), it put a space.
  bool run_start = true;
  for (int t : tokens) {
    std::string piece = decode(t);
    const auto id = static_cast<std::size_t>(t);
    if (add_space_prefix_ && run_start && !is_special_[id] && !is_byte_[id] && !piece.empty() && piece[0] == ' ')
      piece.erase(0, 1);
    run_start = is_special_[id] != 0;
    s += piece;
  }
  return s;
}

}  // namespace qmv
