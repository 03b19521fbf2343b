// Synthetic GGUF models: the shapes, tensor types, metadata and tokenizer of real
// model families, with seeded random weights, for tests and benchmarks that need a
// realistic model without downloading one.
//
// A model is a size preset (toy, tinyllama-1.1b, llama-2-7b, qwen2.5-0.5b, qwen3-0.6b)
// with optional overrides, and a weight mix: q4_K_m (the tensor types of llama.cpp's
// Q4_K_M) or one weight type for every matrix. Weights are drawn so that a forward
// pass stays well-conditioned over many layers: matrices and token embeddings
// N(0, 1/cols), norm weights 1 + N(0, 0.1^2), biases N(0, 0.1^2). Each row's
// values depend only on the seed, the tensor's name and the row, so a file is the
// same for any thread count.
//
// The tokenizer is a GPT-2 byte-level BPE: the 256 byte tokens, <|bos|> and <|eos|>,
// then merged tokens up to the vocabulary size, every one of which the tokenizer
// produces for its own text (see synthetic_vocab).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/formats/formats.h"

namespace qmv {

struct SyntheticError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// What to make. Empty / unset fields take the preset's value.
struct SyntheticSpec {
  std::string preset = "toy";
  std::string mix = "q4_K_m";
  std::string arch;  // llama, qwen2, qwen3
  std::optional<int> layers;
  std::optional<int> vocab;
  std::optional<int> context;
  std::optional<bool> tied;  // tied embeddings: no output.weight
  std::uint64_t seed = 1;
};

// Hyperparameters after the overrides.
struct SyntheticShape {
  std::string preset;
  std::string arch;
  int n_layers = 0, n_embd = 0, n_ff = 0, n_head = 0, n_head_kv = 0, head_dim = 0;
  int vocab = 0, context = 0;
  float rope_freq_base = 10000.0f;
  float rms_eps = 1e-5f;
  bool tied = false;
  bool qkv_bias = false;  // qwen2
  bool qk_norm = false;   // qwen3
};

struct SyntheticTensor {
  std::string name;
  std::vector<std::uint64_t> dims;  // ggml order: dims[0] is the row length
  std::string kind;    // token_embd, output, attn_q, ..., ffn_down, norm, bias
  int layer = -1;      // -1 outside the blocks
  WeightType wanted;   // what the mix asks for
  WeightType type;     // what is written (differs after a fallback for the row length)
  std::uint64_t bytes = 0;
};

struct SyntheticPlan {
  SyntheticShape shape;
  std::string mix;   // canonical name
  std::string name;  // general.name
  std::uint32_t file_type = 0;  // general.file_type (llama_ftype)
  std::uint64_t seed = 0;
  std::vector<SyntheticTensor> tensors;  // in file order
  std::uint64_t params = 0;
  std::uint64_t tensor_bytes = 0;  // sum of the tensors' bytes, padding excluded
  // One line per kind of fallback, e.g. "attn_q, attn_output (row length 896): q4_K -> q5_0, 48 tensors".
  std::vector<std::string> fallbacks() const;
};

struct MakeModelProgress {
  std::size_t tensor = 0;      // tensors complete so far
  std::size_t n_tensors = 0;
  std::string current;         // the tensor being written
  std::uint64_t bytes_written = 0;
  std::uint64_t file_bytes = 0;
};
using MakeModelProgressFn = std::function<void(const MakeModelProgress&)>;

struct MakeModelResult {
  SyntheticPlan plan;
  std::uint64_t file_bytes = 0;
};

// Preset and mix names, in the order --help lists them.
const std::vector<std::string>& synthetic_presets();
const std::vector<std::string>& synthetic_mixes();

// Resolves the spec without writing anything. Throws SyntheticError with one line
// naming what is wrong (unknown preset, mix or architecture, an override out of range).
SyntheticPlan plan_synthetic_model(const SyntheticSpec& spec);

// The size of the file make_model would write, without writing it.
std::uint64_t synthetic_file_size(const SyntheticPlan& plan);

// Writes the model to `path` (atomically: nothing at `path` unless it succeeds).
// `progress` (may be empty) is called once the file is created and its header
// written (tensor 0, nothing of it written yet), then after every chunk of rows.
// Throws SyntheticError for a bad spec, gguf::WriterError for I/O failures.
MakeModelResult make_model(const SyntheticSpec& spec, const std::string& path,
                           const MakeModelProgressFn& progress = {});

// llama.cpp's Q4_K_M gives attn_v and ffn_down more bits (Q6_K) in the first and last
// eighth of the layers and every third layer in between.
bool q4_K_m_more_bits(int layer, int n_layers);

// The type a matrix of the given row length gets when `wanted` does not fit it,
// as llama.cpp falls back: Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0, then F16 when
// not even a multiple of 32.
WeightType fallback_type(WeightType wanted, std::uint64_t row_length);

// The synthetic tokenizer's vocabulary (vocab_size >= 258): ids 0-255 the byte
// tokens in GPT-2's byte-to-unicode order, 256 <|bos|>, 257 <|eos|> (type 3), then
// merged tokens (type 1): first merges learned BPE-style from a short English text,
// then merges of random pairs of letter tokens. Every merge joins two existing
// tokens into a new one, and a merge is kept only if byte-level BPE with the merges
// so far turns the new token's text into that one token.
struct SyntheticVocab {
  std::vector<std::string> tokens;   // byte-level strings ('Ġ' for a space)
  std::vector<std::int32_t> types;   // 1 normal, 3 control
  std::vector<std::string> merges;   // "left right", by rank
  int bos = 256, eos = 257;
  int learned = 0;                   // merged tokens learned from the text
};
SyntheticVocab synthetic_vocab(int vocab_size);

}  // namespace qmv
