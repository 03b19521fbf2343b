#include "model/tokenizer.h"

#include <unicode/regex.h>
#include <unicode/utext.h>

#include <algorithm>
#include <memory>

namespace qmv {
namespace {

// GPT-2's reversible map from bytes to printable code points: printable Latin-1
// bytes map to themselves, the rest to U+0100 onwards, so every byte string is a
// string of visible characters (a space is 'Ġ', U+0120).
struct ByteMap {
  std::string to_unicode[256];                 // byte -> UTF-8 of its code point
  std::unordered_map<std::string, int> to_byte;  // UTF-8 of a code point -> byte
  ByteMap() {
    int extra = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      const int cp = printable ? b : 256 + extra++;
      std::string s;
      if (cp < 0x80) {
        s += static_cast<char>(cp);
      } else {
        s += static_cast<char>(0xC0 | (cp >> 6));
        s += static_cast<char>(0x80 | (cp & 0x3F));
      }
      to_unicode[b] = s;
      to_byte[s] = b;
    }
  }
};

const ByteMap& byte_map() {
  static const ByteMap m;
  return m;
}

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

}  // namespace

Tokenizer Tokenizer::from_gguf(const gguf::File& f) {
  const auto model = f.get_string("tokenizer.ggml.model");
  if (!model) throw TokenizerError("tokenizer: missing 'tokenizer.ggml.model'");
  if (*model != "gpt2")
    throw TokenizerError("tokenizer: model '" + *model + "' is not supported yet (supported: gpt2)");
  Tokenizer t;
  t.pre_ = f.get_string("tokenizer.ggml.pre").value_or("default");
  // Pre-tokenizers by the name llama.cpp's converter writes.
  if (t.pre_ == "smollm" || t.pre_ == "starcoder" || t.pre_ == "refact" || t.pre_ == "command-r" ||
      t.pre_ == "codeshell" || t.pre_ == "exaone") {
    t.split_regexes_ = {"\\p{N}", kGpt2Split};
  } else if (t.pre_ == "gpt2" || t.pre_ == "default" || t.pre_ == "mpt" || t.pre_ == "olmo" || t.pre_ == "jais") {
    t.split_regexes_ = {kGpt2Split};
  } else {
    throw TokenizerError("tokenizer: pre-tokenizer '" + t.pre_ + "' is not supported yet");
  }
  const gguf::Value* tokens = f.find("tokenizer.ggml.tokens");
  const gguf::Value* merges = f.find("tokenizer.ggml.merges");
  if (!tokens || tokens->type != gguf::ValueType::ARRAY || tokens->elem_type != gguf::ValueType::STRING)
    throw TokenizerError("tokenizer: missing string array 'tokenizer.ggml.tokens'");
  if (!merges || merges->type != gguf::ValueType::ARRAY || merges->elem_type != gguf::ValueType::STRING)
    throw TokenizerError("tokenizer: missing string array 'tokenizer.ggml.merges'");
  const gguf::Value* types = f.find("tokenizer.ggml.token_type");
  t.pieces_.reserve(static_cast<std::size_t>(tokens->count));
  for (std::uint64_t i = 0; i < tokens->count; ++i) {
    t.pieces_.emplace_back(f.array_string(*tokens, i));
    t.ids_.emplace(t.pieces_.back(), static_cast<int>(i));
    // Control (3) and user-defined (4) tokens are matched as whole strings.
    if (types && types->count == tokens->count) {
      const auto type = static_cast<int>(f.array_number(*types, i));
      if ((type == 3 || type == 4) && !t.pieces_.back().empty()) t.specials_.push_back(t.pieces_.back());
    }
  }
  std::sort(t.specials_.begin(), t.specials_.end(), [](const auto& a, const auto& b) { return a.size() > b.size(); });
  for (std::uint64_t i = 0; i < merges->count; ++i)
    t.merge_rank_.emplace(std::string(f.array_string(*merges, i)), static_cast<int>(i));
  auto id = [&](const char* key) {
    const auto v = f.get_uint(key);
    if (v && *v >= tokens->count) throw TokenizerError(std::string("tokenizer: ") + key + " is out of range");
    return v ? static_cast<int>(*v) : -1;
  };
  t.bos_ = id("tokenizer.ggml.bos_token_id");
  t.eos_ = id("tokenizer.ggml.eos_token_id");
  return t;
}

void Tokenizer::encode_word(std::string_view bytes, std::vector<int>& out) const {
  // Symbols: one byte-level character per input byte, merged pairwise by rank.
  std::vector<std::string> sym;
  for (unsigned char b : bytes) sym.push_back(byte_map().to_unicode[b]);
  while (sym.size() > 1) {
    int best_rank = -1;
    std::size_t best = 0;
    for (std::size_t i = 0; i + 1 < sym.size(); ++i) {
      const auto it = merge_rank_.find(sym[i] + " " + sym[i + 1]);
      if (it != merge_rank_.end() && (best_rank < 0 || it->second < best_rank)) {
        best_rank = it->second;
        best = i;
      }
    }
    if (best_rank < 0) break;
    sym[best] += sym[best + 1];
    sym.erase(sym.begin() + static_cast<std::ptrdiff_t>(best) + 1);
  }
  for (const std::string& s : sym) {
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

std::vector<int> Tokenizer::encode(std::string_view text, bool add_bos) const {
  std::vector<int> out;
  if (add_bos && bos_ >= 0) out.push_back(bos_);
  std::size_t pos = 0;
  std::string plain;
  auto flush = [&] {
    if (plain.empty()) return;
    std::vector<std::string> pieces = {plain};
    for (const std::string& re : split_regexes_) pieces = regex_split(pieces, re);
    for (const std::string& p : pieces) encode_word(p, out);
    plain.clear();
  };
  while (pos < text.size()) {
    const auto special = std::find_if(specials_.begin(), specials_.end(),
                                      [&](const std::string& s) { return text.substr(pos, s.size()) == s; });
    if (special != specials_.end()) {
      flush();
      out.push_back(ids_.at(*special));
      pos += special->size();
    } else {
      plain += text[pos++];
    }
  }
  flush();
  return out;
}

std::string Tokenizer::decode(int token) const {
  if (token < 0 || token >= vocab_size()) throw TokenizerError("tokenizer: token id " + std::to_string(token) + " out of range");
  const std::string& piece = pieces_[static_cast<std::size_t>(token)];
  if (std::find(specials_.begin(), specials_.end(), piece) != specials_.end()) return piece;
  std::string bytes;
  for (std::size_t i = 0; i < piece.size();) {
    const std::size_t n = utf8_len(static_cast<unsigned char>(piece[i]));
    const auto it = byte_map().to_byte.find(piece.substr(i, n));
    if (it == byte_map().to_byte.end()) {
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
  for (int t : tokens) s += decode(t);
  return s;
}

}  // namespace qmv
