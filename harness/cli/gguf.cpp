// `qmvlab gguf FILE`: validates a GGUF file and prints its metadata, the model it
// describes (when the runner can run it) and its tensors by type.
#include <fmt/format.h>

#include <map>

#include "harness/cli/command.h"
#include "harness/table.h"
#include "model/config.h"
#include "model/gguf.h"

namespace qmv {
namespace {

std::string describe_value(const gguf::File& f, const gguf::Value& v, std::size_t max_elems) {
  using gguf::ValueType;
  switch (v.type) {
    case ValueType::STRING: {
      std::string s(v.str.substr(0, 200));
      return fmt::format("\"{}\"{}", s, v.str.size() > 200 ? "..." : "");
    }
    case ValueType::FLOAT32: case ValueType::FLOAT64: return fmt::format("{}", v.f);
    case ValueType::BOOL: return v.u ? "true" : "false";
    case ValueType::INT8: case ValueType::INT16: case ValueType::INT32: case ValueType::INT64:
      return std::to_string(v.i);
    case ValueType::ARRAY: {
      std::string out = fmt::format("{}[{}] [", gguf::to_string(v.elem_type), v.count);
      for (std::uint64_t k = 0; k < std::min<std::uint64_t>(v.count, max_elems); ++k) {
        if (k) out += ", ";
        out += v.elem_type == ValueType::STRING ? fmt::format("\"{}\"", f.array_string(v, k))
                                                : fmt::format("{}", f.array_number(v, k));
      }
      return out + (v.count > max_elems ? ", ...]" : "]");
    }
    default: return std::to_string(v.u);
  }
}

void print_gguf(const std::string& path, bool show_tensors, std::size_t max_elems) {
  const gguf::File f = gguf::File::open(path);
  fmt::print("{}: GGUF v{}, {} bytes, {} metadata keys, {} tensors, alignment {}, data at byte {}\n\n",
             path, f.version(), f.size(), f.keys().size(), f.tensors().size(), f.alignment(), f.data_offset());
  for (const auto& key : f.keys()) {
    const gguf::Value& v = *f.find(key);
    fmt::print("  {} ({}) = {}\n", key, gguf::to_string(v.type), describe_value(f, v, max_elems));
  }
  try {
    const ModelConfig c = read_config(f);
    bind_weights(f, c);
    fmt::print("\nmodel: {} '{}', {} layers, width {}, FFN {}, {} heads ({} key/value) of {}, vocab {}, "
               "context {}, rope base {}{}{}{}\n",
               c.arch, c.name, c.n_layers, c.n_embd, c.n_ff, c.n_head, c.n_head_kv, c.head_dim, c.vocab_size,
               c.context_length, c.rope_freq_base, c.tied_embeddings ? ", tied embeddings" : "",
               c.qkv_bias ? ", QKV bias" : "", c.qk_norm ? ", Q/K norm" : "");
  } catch (const ModelError& e) {
    fmt::print("\nnot a model this runner can run: {}\n", e.what());
  }
  std::map<std::string, std::pair<int, std::uint64_t>> by_type;
  for (const auto& t : f.tensors()) {
    auto& e = by_type[t.type->name];
    ++e.first;
    e.second += t.bytes;
  }
  fmt::print("\n");
  std::vector<std::vector<std::string>> rows;
  for (const auto& [type, e] : by_type)
    rows.push_back({type, std::to_string(e.first), fmt::format("{:.1f}", e.second / 1048576.0)});
  print_table({"tensor type", "tensors", "MiB"}, rows);
  if (show_tensors) {
    rows.clear();
    for (const auto& t : f.tensors()) {
      std::string dims;
      for (auto d : t.dims) dims += (dims.empty() ? "" : "x") + std::to_string(d);
      rows.push_back({t.name, t.type->name, dims, fmt::format("{:.2f}", t.bytes / 1048576.0)});
    }
    fmt::print("\n");
    print_table({"tensor", "type", "dims (row length first)", "MiB"}, rows);
  }
}

class GgufCommand : public Command {
 public:
  explicit GgufCommand(CLI::App& app) {
    cmd_ = app.add_subcommand("gguf", "Validate a GGUF file and print its metadata and tensors");
    cmd_->add_option("file", path_, "GGUF file")->required();
    cmd_->add_flag("--tensors", tensors_, "List every tensor (name, type, dims, size)");
    cmd_->add_option("--max-array", max_elems_, "Array elements to show per key")->capture_default_str();
  }

  bool chosen() const override { return cmd_->parsed(); }

  int run(const std::string&) override {
    print_gguf(path_, tensors_, max_elems_);
    return 0;
  }

 private:
  CLI::App* cmd_ = nullptr;
  std::string path_;
  bool tensors_ = false;
  std::size_t max_elems_ = 8;
};

}  // namespace

std::unique_ptr<Command> gguf_command(CLI::App& app) { return std::make_unique<GgufCommand>(app); }

}  // namespace qmv
