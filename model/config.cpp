#include "model/config.h"

#include <sstream>

#include "model/ops.h"

namespace qmv {
namespace {

template <class... Parts>
[[noreturn]] void fail(Parts&&... parts) {
  std::ostringstream s;
  s << "model: ";
  (s << ... << parts);
  throw ModelError(s.str());
}

int required_int(const gguf::File& f, const std::string& key) {
  const auto v = f.get_uint(key);
  if (!v) fail("missing metadata key '", key, "'");
  if (*v == 0 || *v > (1u << 30)) fail("metadata '", key, "' = ", *v, " is out of range");
  return static_cast<int>(*v);
}

int optional_int(const gguf::File& f, const std::string& key, int fallback) {
  const auto v = f.get_uint(key);
  if (!v) return fallback;
  if (*v == 0 || *v > (1u << 30)) fail("metadata '", key, "' = ", *v, " is out of range");
  return static_cast<int>(*v);
}

std::string shape_string(const std::vector<std::uint64_t>& dims) {
  std::string s;
  for (auto d : dims) s += (s.empty() ? "" : "x") + std::to_string(d);
  return s;
}

const gguf::Tensor* tensor(const gguf::File& f, const std::string& name, std::vector<std::uint64_t> dims,
                           bool required = true) {
  const gguf::Tensor* t = f.find_tensor(name);
  if (!t) {
    if (required) fail("missing tensor '", name, "'");
    return nullptr;
  }
  if (t->dims != dims)
    fail("tensor '", name, "' has shape ", shape_string(t->dims), ", expected ", shape_string(dims),
         " (row length first)");
  return t;
}

}  // namespace

ModelConfig read_config(const gguf::File& f) {
  ModelConfig c;
  const auto arch = f.get_string("general.architecture");
  if (!arch) fail("missing metadata key 'general.architecture'");
  c.arch = *arch;
  if (c.arch != "llama" && c.arch != "qwen2" && c.arch != "qwen3")
    fail("unsupported architecture '", c.arch, "' (supported: llama, qwen2, qwen3)");
  c.name = f.get_string("general.name").value_or(c.arch);
  const std::string a = c.arch + ".";
  c.n_layers = required_int(f, a + "block_count");
  c.n_embd = required_int(f, a + "embedding_length");
  c.n_ff = required_int(f, a + "feed_forward_length");
  c.n_head = required_int(f, a + "attention.head_count");
  c.n_head_kv = optional_int(f, a + "attention.head_count_kv", c.n_head);
  c.context_length = required_int(f, a + "context_length");
  if (c.n_head % c.n_head_kv != 0)
    fail(c.n_head, " query heads cannot share ", c.n_head_kv, " key/value heads evenly");
  // Qwen3 sets the head size apart from the width; others derive it.
  c.head_dim = optional_int(f, a + "attention.key_length", c.n_embd / c.n_head);
  if (optional_int(f, a + "attention.value_length", c.head_dim) != c.head_dim)
    fail("key and value head sizes differ, which this runner does not support");
  if (!f.find(a + "attention.key_length") && c.n_embd % c.n_head != 0)
    fail("width ", c.n_embd, " is not a multiple of ", c.n_head, " heads");
  c.rope_dim = optional_int(f, a + "rope.dimension_count", c.head_dim);
  if (c.rope_dim > c.head_dim || c.rope_dim % 2 != 0)
    fail("rope dimension ", c.rope_dim, " does not fit a head of ", c.head_dim);
  c.rope_freq_base = static_cast<float>(f.get_float(a + "rope.freq_base").value_or(10000.0));
  const auto eps = f.get_float(a + "attention.layer_norm_rms_epsilon");
  if (!eps) fail("missing metadata key '", a, "attention.layer_norm_rms_epsilon'");
  c.rms_eps = static_cast<float>(*eps);
  c.rope = c.arch == "llama" ? RopeStyle::Interleaved : RopeStyle::Halves;
  c.qkv_bias = c.arch == "qwen2";
  c.qk_norm = c.arch == "qwen3";
  const gguf::Tensor* embd = f.find_tensor("token_embd.weight");
  if (!embd) fail("missing tensor 'token_embd.weight'");
  if (embd->dims.size() != 2) fail("tensor 'token_embd.weight' is not a matrix");
  c.vocab_size = static_cast<int>(embd->dims[1]);
  if (const gguf::Value* tokens = f.find("tokenizer.ggml.tokens"); tokens && tokens->count != embd->dims[1])
    fail("vocabulary has ", tokens->count, " tokens but token_embd.weight has ", embd->dims[1], " rows");
  c.tied_embeddings = f.find_tensor("output.weight") == nullptr;
  return c;
}

ModelWeights bind_weights(const gguf::File& f, const ModelConfig& c) {
  using D = std::vector<std::uint64_t>;
  const ModelWidths widths = model_widths(c);
  const auto e = static_cast<std::uint64_t>(c.n_embd), vocab = static_cast<std::uint64_t>(c.vocab_size);
  const auto q_width = static_cast<std::uint64_t>(widths.q), kv_width = static_cast<std::uint64_t>(widths.kv);
  ModelWeights w;
  w.token_embd = tensor(f, "token_embd.weight", D{e, vocab});
  w.output_norm = tensor(f, "output_norm.weight", D{e});
  w.output = c.tied_embeddings ? w.token_embd : tensor(f, kLmHead.tensor_name(-1), kLmHead.dims(widths));
  for (int i = 0; i < c.n_layers; ++i) {
    const std::string p = "blk." + std::to_string(i) + ".";
    LayerWeights l;
    l.attn_norm = tensor(f, p + "attn_norm.weight", D{e});
    for (const WeightMatvec& m : kLayerMatvecs) l.*m.weight = tensor(f, m.tensor_name(i), m.dims(widths));
    if (c.qkv_bias) {
      l.bq = tensor(f, p + "attn_q.bias", D{q_width});
      l.bk = tensor(f, p + "attn_k.bias", D{kv_width});
      l.bv = tensor(f, p + "attn_v.bias", D{kv_width});
    }
    if (c.qk_norm) {
      l.q_norm = tensor(f, p + "attn_q_norm.weight", D{static_cast<std::uint64_t>(c.head_dim)});
      l.k_norm = tensor(f, p + "attn_k_norm.weight", D{static_cast<std::uint64_t>(c.head_dim)});
    }
    l.ffn_norm = tensor(f, p + "ffn_norm.weight", D{e});
    for (const gguf::Tensor* norm : {l.attn_norm, l.ffn_norm, l.q_norm, l.k_norm, l.bq, l.bk, l.bv})
      if (norm && std::string(norm->type->name) != "F32")
        fail("tensor '", norm->name, "' is ", norm->type->name, "; norms and biases must be F32");
    w.layers.push_back(l);
  }
  if (std::string(w.output_norm->type->name) != "F32") fail("tensor 'output_norm.weight' must be F32");
  return w;
}

LoadedModel::LoadedModel(const std::string& path, gguf::Residence residence) try
    : file(gguf::File::open(path, residence)), config(read_config(file)), weights(bind_weights(file, config)) {
} catch (const ModelError& e) {
  // fail() says "model: ..."; here the model has a name.
  const std::string_view what = e.what(), prefix = "model: ";
  throw ModelError(path + ": " + std::string(what.substr(what.rfind(prefix, 0) == 0 ? prefix.size() : 0)));
}

}  // namespace qmv
