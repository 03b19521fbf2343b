// Tokenizer from GGUF metadata, for the two vocabularies llama.cpp calls `gpt2` and `llama`.
//
// gpt2: byte-level BPE. Special tokens matched first, then the pre-tokenizer the model
// names (`tokenizer.ggml.pre`), then merges by rank over byte-level symbols.
//
// llama: SentencePiece-style BPE over scored pieces (Llama 2, TinyLlama, Mistral).
// Special tokens (control, user-defined and the unknown token) are matched whole first.
// Each remaining run of text has its spaces escaped as U+2581 "▁", and with
// add_space_prefix (default on) one "▁" put in front: at the start of the text and again
// after every special token, as llama.cpp does. The run is split into UTF-8 characters
// and the adjacent pair whose concatenation is a piece with the highest score is merged,
// again and again (equal scores: the leftmost pair first). A character no piece spells
// becomes its bytes as byte tokens `<0xXX>`, or the unknown token when the vocabulary
// has no byte tokens.
//
// Decoding a token (`decode(int)`, for streaming): "▁" is a space, a byte token is its
// byte, control, user-defined and unknown tokens are their text (so a prompt's "<s>" or
// "[INST]" shows; a caller that wants them hidden skips those ids).
// Decoding a sequence (`decode(vector)`, llama only): the one space that
// add_space_prefix put at the start of each text run is removed again, that is from the
// first token of the sequence and from the token after each special token, when that
// token's text starts with a space. So decode(encode(text, bos)) == decode(bos) + text
// for any text the vocabulary can spell without the unknown token, except where the text
// holds "▁" itself (it comes back as a space) or, being invalid UTF-8, has a stray lead
// byte right before a space (spaces are escaped before the text is split into
// characters, as llama.cpp does). llama.cpp's detokenizer removes the prefix only at
// the very start of the sequence.
#pragma once

#include <array>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "model/gguf.h"

namespace qmv {

struct TokenizerError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// GPT-2's byte-level alphabet: each byte is one code point, the printable Latin-1 bytes
// themselves and the others U+0100 onwards, in byte order; byte-level vocabularies spell
// every token in it and number the byte tokens printable ones first.
struct ByteLevelAlphabet {
  static bool printable(unsigned char b) {
    return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
  }
  std::string text[256];                         // byte -> UTF-8 of its code point
  std::unordered_map<std::string, int> to_byte;  // UTF-8 of a code point -> byte
  ByteLevelAlphabet();
};
const ByteLevelAlphabet& byte_level_alphabet();

class Tokenizer {
 public:
  // Throws TokenizerError for a tokenizer model or pre-tokenizer this runner lacks, and
  // for metadata that is missing or inconsistent (array lengths, ids out of range).
  static Tokenizer from_gguf(const gguf::File& f);

  std::vector<int> encode(std::string_view text, bool add_bos, bool add_eos = false) const;
  // The bytes a token stands for (special tokens: their text).
  std::string decode(int token) const;
  std::string decode(const std::vector<int>& tokens) const;

  // "gpt2" or "llama" (`tokenizer.ggml.model`).
  const std::string& model() const { return model_; }
  int vocab_size() const { return static_cast<int>(pieces_.size()); }
  int bos() const { return bos_; }
  int eos() const { return eos_; }
  int unknown() const { return unk_; }  // -1 when the vocabulary has none
  // Whether the model expects BOS / EOS around a prompt (`tokenizer.ggml.add_bos_token`,
  // `add_eos_token`; absent: llama adds BOS, gpt2 does not, neither adds EOS).
  bool add_bos_default() const { return add_bos_; }
  bool add_eos_default() const { return add_eos_; }
  bool add_space_prefix() const { return add_space_prefix_; }
  const std::string& pre_tokenizer() const { return pre_; }

 private:
  enum class Model { Gpt2, Llama };
  Model kind_ = Model::Gpt2;
  std::string model_;
  std::vector<std::string> pieces_;                  // token id -> text as stored
  std::unordered_map<std::string, int> ids_;         // text -> token id (first one wins)
  std::vector<char> is_special_;                     // token id -> matched whole in text
  std::vector<std::string> specials_;                // their texts, longest first
  int bos_ = -1, eos_ = -1, unk_ = -1;
  bool add_bos_ = false, add_eos_ = false, add_space_prefix_ = false;

  // gpt2
  std::unordered_map<std::string, int> merge_rank_;  // "left right" -> rank
  std::vector<std::string> split_regexes_;           // applied in order, as llama.cpp does
  std::string pre_;

  // llama
  std::vector<float> scores_;                        // token id -> merge priority
  std::vector<char> is_byte_;                        // token id -> a <0xXX> byte token
  std::array<int, 256> byte_token_{};                // byte -> its token id, or -1
  bool has_byte_tokens_ = false;

  void encode_gpt2_word(std::string_view bytes, std::vector<int>& out) const;
  void encode_spm_run(std::string_view run, std::vector<int>& out) const;
  void spell_unknown(std::string_view character, std::vector<int>& out) const;
  void load_gpt2(const gguf::File& f);
  void load_llama(const gguf::File& f, const std::vector<int>& type_of, bool typed);
};

}  // namespace qmv
