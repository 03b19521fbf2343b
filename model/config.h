// Model hyperparameters and the weight inventory, read from GGUF metadata and checked
// against the tensors before anything runs: a model missing a tensor, or with one of
// the wrong shape, is refused with the tensor's name, never found out mid-decode.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/gguf.h"

namespace qmv {

enum class RopeStyle {
  Interleaved,  // rotate adjacent pairs (x0,x1), (x2,x3)...: llama in GGUF
  Halves,       // rotate (x_i, x_{i+d/2}): qwen2, qwen3 (NeoX style)
};

struct ModelConfig {
  std::string arch;  // general.architecture: llama, qwen2, qwen3
  std::string name;  // general.name, for messages
  int n_layers = 0;
  int n_embd = 0;
  int n_ff = 0;
  int n_head = 0;
  int n_head_kv = 0;
  int head_dim = 0;
  int rope_dim = 0;
  float rope_freq_base = 10000.0f;
  float rms_eps = 1e-5f;
  int context_length = 0;
  int vocab_size = 0;
  RopeStyle rope = RopeStyle::Interleaved;
  bool qkv_bias = false;       // qwen2
  bool qk_norm = false;        // qwen3: RMSNorm of each head of q and k
  bool tied_embeddings = false;  // no output.weight: lm_head reads token_embd.weight
};

struct LayerWeights {
  const gguf::Tensor* attn_norm = nullptr;
  const gguf::Tensor* wq = nullptr;
  const gguf::Tensor* wk = nullptr;
  const gguf::Tensor* wv = nullptr;
  const gguf::Tensor* wo = nullptr;
  const gguf::Tensor* bq = nullptr;  // qwen2
  const gguf::Tensor* bk = nullptr;
  const gguf::Tensor* bv = nullptr;
  const gguf::Tensor* q_norm = nullptr;  // qwen3
  const gguf::Tensor* k_norm = nullptr;
  const gguf::Tensor* ffn_norm = nullptr;
  const gguf::Tensor* ffn_gate = nullptr;
  const gguf::Tensor* ffn_up = nullptr;
  const gguf::Tensor* ffn_down = nullptr;
};

struct ModelWeights {
  const gguf::Tensor* token_embd = nullptr;
  const gguf::Tensor* output_norm = nullptr;
  const gguf::Tensor* output = nullptr;  // token_embd when embeddings are tied
  std::vector<LayerWeights> layers;
};

struct ModelError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Reads the configuration of a supported architecture. Throws ModelError for an
// unknown architecture or missing or inconsistent hyperparameters.
ModelConfig read_config(const gguf::File& f);
// Finds every weight the forward pass needs and checks its shape. Throws ModelError
// naming the tensor.
ModelWeights bind_weights(const gguf::File& f, const ModelConfig& c);

// A model ready to run: the opened file (mapped, or loaded into weight memory), its
// configuration and its weights (views into the file, so it is neither copied nor
// moved).
struct LoadedModel {
  gguf::File file;
  ModelConfig config;
  ModelWeights weights;
  // Throws gguf::GgufError for a file that is not GGUF, ModelError (naming the file)
  // for one this runner cannot run.
  explicit LoadedModel(const std::string& path, gguf::Residence residence = gguf::Residence::Mapped);
  LoadedModel(const LoadedModel&) = delete;
  LoadedModel& operator=(const LoadedModel&) = delete;
};

}  // namespace qmv
