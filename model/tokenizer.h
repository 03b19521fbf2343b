// Tokenizer from GGUF metadata. GPT-2 byte-level BPE (`tokenizer.ggml.model = gpt2`):
// special tokens matched first, then the pre-tokenizer the model names
// (`tokenizer.ggml.pre`), then merges by rank over byte-level symbols.
#pragma once

#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "model/gguf.h"

namespace qmv {

struct TokenizerError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class Tokenizer {
 public:
  // Throws TokenizerError for a tokenizer model or pre-tokenizer this runner lacks.
  static Tokenizer from_gguf(const gguf::File& f);

  std::vector<int> encode(std::string_view text, bool add_bos) const;
  // The bytes a token stands for (special tokens: their text).
  std::string decode(int token) const;
  std::string decode(const std::vector<int>& tokens) const;

  int vocab_size() const { return static_cast<int>(pieces_.size()); }
  int bos() const { return bos_; }
  int eos() const { return eos_; }
  const std::string& pre_tokenizer() const { return pre_; }

 private:
  std::vector<std::string> pieces_;                // token id -> byte-level string
  std::unordered_map<std::string, int> ids_;       // byte-level string -> token id
  std::unordered_map<std::string, int> merge_rank_;  // "left right" -> rank
  std::vector<std::string> specials_;              // control/user tokens, longest first
  std::vector<std::string> split_regexes_;         // applied in order, as llama.cpp does
  std::string pre_;
  int bos_ = -1, eos_ = -1;

  void encode_word(std::string_view bytes, std::vector<int>& out) const;
};

}  // namespace qmv
