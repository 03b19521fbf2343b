// Synthetic models for tests: a GGUF file of a given architecture and size, built in
// memory with the test writer.
#pragma once

#include <functional>
#include <set>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/gguf.h"
#include "tests/gguf_writer.h"

namespace qmv::testing {

struct TinySpec {
  std::string arch = "llama";
  int layers = 2, embd = 64, ff = 96, heads = 4, kv_heads = 2, vocab = 40;
  int key_length = 0;  // qwen3 style explicit head size; 0: derive
  bool tied = true;
  std::set<std::string> skip;  // tensors to leave out
  std::function<void(const std::string&, std::vector<std::uint64_t>&)> reshape = nullptr;
  // ggml type of the matrices (norms and biases stay F32): id, values and bytes per block.
  std::uint32_t matrix_type = 0;
  std::uint64_t block_values = 1, block_bytes = 4;
};

// A synthetic model of the given architecture: matrices of s.matrix_type (zero
// bytes: fine for shape checks and planning), norms and biases F32.
inline std::vector<std::uint8_t> tiny_model(const TinySpec& s) {
  qmv::testing::GgufWriter w;
  const std::string a = s.arch + ".";
  w.add_string("general.architecture", s.arch);
  w.add_u32(a + "block_count", s.layers);
  w.add_u32(a + "embedding_length", s.embd);
  w.add_u32(a + "feed_forward_length", s.ff);
  w.add_u32(a + "attention.head_count", s.heads);
  w.add_u32(a + "attention.head_count_kv", s.kv_heads);
  w.add_u32(a + "context_length", 128);
  w.add_f32(a + "attention.layer_norm_rms_epsilon", 1e-6f);
  w.add_f32(a + "rope.freq_base", 1e6f);
  if (s.key_length) w.add_u32(a + "attention.key_length", s.key_length);
  const std::uint64_t e = s.embd, ff = s.ff, hd = s.key_length ? s.key_length : s.embd / s.heads;
  const std::uint64_t qw = s.heads * hd, kvw = s.kv_heads * hd;
  auto add = [&](const std::string& name, std::vector<std::uint64_t> dims) {
    if (s.skip.count(name)) return;
    if (s.reshape) s.reshape(name, dims);
    if (dims.size() == 1) return w.add_f32_tensor(name, dims);
    const std::uint64_t n = dims[0] * dims[1];
    w.add_tensor(name, dims, s.matrix_type, std::vector<std::uint8_t>(n / s.block_values * s.block_bytes));
  };
  add("token_embd.weight", {e, static_cast<std::uint64_t>(s.vocab)});
  add("output_norm.weight", {e});
  if (!s.tied) add("output.weight", {e, static_cast<std::uint64_t>(s.vocab)});
  for (int i = 0; i < s.layers; ++i) {
    const std::string p = "blk." + std::to_string(i) + ".";
    add(p + "attn_norm.weight", {e});
    add(p + "attn_q.weight", {e, qw});
    add(p + "attn_k.weight", {e, kvw});
    add(p + "attn_v.weight", {e, kvw});
    add(p + "attn_output.weight", {qw, e});
    if (s.arch == "qwen2") {
      add(p + "attn_q.bias", {qw});
      add(p + "attn_k.bias", {kvw});
      add(p + "attn_v.bias", {kvw});
    }
    if (s.arch == "qwen3") {
      add(p + "attn_q_norm.weight", {hd});
      add(p + "attn_k_norm.weight", {hd});
    }
    add(p + "ffn_norm.weight", {e});
    add(p + "ffn_gate.weight", {e, ff});
    add(p + "ffn_up.weight", {e, ff});
    add(p + "ffn_down.weight", {ff, e});
  }
  return w.bytes();
}

// A Q4_K llama small enough to build in memory: width 256, FFN 512, lm_head 256x256.
inline TinySpec tiny_q4k_spec() {
  TinySpec s;
  s.embd = 256;
  s.ff = 512;
  s.vocab = 256;
  s.matrix_type = 12;  // Q4_K
  s.block_values = 256;
  s.block_bytes = 144;
  return s;
}

// tiny_q4k_spec()'s model, parsed in memory and bound (its matrices are zero bytes).
struct TinyQ4K {
  std::vector<std::uint8_t> bytes;
  gguf::File file;
  ModelWeights weights;
  TinyQ4K()
      : bytes(tiny_model(tiny_q4k_spec())), file(gguf::File::parse(bytes)), weights(bind_weights(file, read_config(file))) {}
};

}  // namespace qmv::testing
