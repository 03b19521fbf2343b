// `qmvlab make-model`: writes a synthetic GGUF model (model/synthetic.h).
#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <map>

#include "harness/cli/command.h"
#include "model/synthetic.h"

namespace qmv {
namespace {

std::string presets_help() {
  std::string s = "Presets (shapes of the real models; --arch/--layers/--vocab/--context/--tied/--untied override):\n";
  for (const std::string& name : synthetic_presets()) {
    SyntheticSpec spec;
    spec.preset = name;
    const SyntheticShape m = plan_synthetic_model(spec).shape;
    s += fmt::format("  {:<15} {}, {} layers, width {}, FFN {}, {} heads ({} KV) of {}, vocab {}, context {}{}\n", name,
                     m.arch, m.n_layers, m.n_embd, m.n_ff, m.n_head, m.n_head_kv, m.head_dim, m.vocab, m.context,
                     m.tied ? ", tied embeddings" : "");
  }
  s += "Mixes:\n"
       "  q4_K_m          as llama.cpp's Q4_K_M: Q4_K; attn_v and ffn_down Q6_K in the first and last 1/8 of the\n"
       "                  layers and every third between; lm_head (output, or token_embd when tied) Q6_K\n"
       "  ";
  bool first = true;
  for (const std::string& m : synthetic_mixes()) {
    if (m == "q4_K_m") continue;
    s += (first ? "" : ", ") + m;
    first = false;
  }
  s += "\n                  one type for every matrix, token_embd and output included\n"
       "Norm weights and biases are F32. A matrix whose row length does not fit its type falls back as\n"
       "llama.cpp does (q4_K -> q5_0, q5_K -> q5_1, q6_K -> q8_0, else f16); the summary lists each fallback.";
  return s;
}

std::string mib(std::uint64_t bytes) { return fmt::format("{:.1f} MiB", static_cast<double>(bytes) / (1 << 20)); }

void print_plan(const SyntheticPlan& plan) {
  const SyntheticShape& m = plan.shape;
  fmt::print("{}: {}, {} layers, width {}, FFN {}, {} heads ({} KV) of {}, vocab {}, context {}, rope base {}, "
             "rms eps {}{}{}{}\n",
             plan.name, m.arch, m.n_layers, m.n_embd, m.n_ff, m.n_head, m.n_head_kv, m.head_dim, m.vocab, m.context,
             m.rope_freq_base, m.rms_eps, m.tied ? ", tied embeddings" : ", untied embeddings",
             m.qkv_bias ? ", QKV bias" : "", m.qk_norm ? ", Q/K norm" : "");
  fmt::print("{:.3f} B parameters, {} tensors, {} of tensor data\n", static_cast<double>(plan.params) * 1e-9,
             plan.tensors.size(), mib(plan.tensor_bytes));
  // Types per kind of tensor, in the order kinds first appear.
  std::vector<std::string> kinds;
  std::map<std::string, std::map<std::string, int>> types;
  std::map<std::string, std::uint64_t> bytes;
  for (const auto& t : plan.tensors) {
    if (!types.count(t.kind)) kinds.push_back(t.kind);
    ++types[t.kind][std::string(to_string(t.type))];
    bytes[t.kind] += t.bytes;
  }
  for (const auto& kind : kinds) {
    std::string list;
    for (const auto& [type, n] : types[kind]) list += fmt::format("{}{} x{}", list.empty() ? "" : ", ", type, n);
    fmt::print("  {:<12} {:<28} {:>12}\n", kind, list, mib(bytes[kind]));
  }
  for (const auto& line : plan.fallbacks()) fmt::print("fallback: {}\n", line);
}

struct MakeModelArgs {
  SyntheticSpec spec;
  std::string out;
  bool tied = false, untied = false;
  bool dry_run = false;
};

// Prints the plan, writes the file with progress, returns 0. Bad input throws
// (SyntheticError, gguf::WriterError) with a one-line message.
int run_make_model(const MakeModelArgs& args);

class MakeModelCommand : public Command {
 public:
  explicit MakeModelCommand(CLI::App& app);
  bool chosen() const override { return cmd_->parsed(); }
  int run(const std::string&) override { return run_make_model(args_); }

 private:
  CLI::App* cmd_ = nullptr;
  MakeModelArgs args_;
};

MakeModelCommand::MakeModelCommand(CLI::App& app) {
  MakeModelArgs& args = args_;
  auto* sub = cmd_ = app.add_subcommand("make-model",
                                 "Write a synthetic GGUF model: a preset's shapes, a weight mix, seeded random "
                                 "weights and a small BPE tokenizer");
  sub->add_option("--preset", args.spec.preset, "Size preset (listed below)")->required();
  sub->add_option("--mix", args.spec.mix, "Weight mix (listed below)")->required();
  sub->add_option("--out", args.out, "Output GGUF file")->required();
  sub->add_option("--arch", args.spec.arch, "Architecture: llama, qwen2 (QKV bias) or qwen3 (Q/K norm)");
  sub->add_option_function<int>("--layers", [&args](int v) { args.spec.layers = v; }, "Number of layers");
  sub->add_option_function<int>("--vocab", [&args](int v) { args.spec.vocab = v; },
                                "Vocabulary size (at least 258)");
  sub->add_option_function<int>("--context", [&args](int v) { args.spec.context = v; }, "Context length");
  auto* tied = sub->add_flag("--tied", args.tied, "Tied embeddings: no output.weight, token_embd is the lm_head");
  auto* untied = sub->add_flag("--untied", args.untied, "Separate output.weight");
  tied->excludes(untied);
  sub->add_option("--seed", args.spec.seed, "Seed of the weights")->capture_default_str();
  sub->add_flag("--dry-run", args.dry_run, "Print the plan and the file size, write nothing");
  sub->footer(std::function<std::string()>(presets_help));  // built only when --help asks
}

int run_make_model(const MakeModelArgs& args) {
  SyntheticSpec spec = args.spec;
  if (args.tied) spec.tied = true;
  if (args.untied) spec.tied = false;
  const SyntheticPlan plan = plan_synthetic_model(spec);
  if (args.dry_run) {
    print_plan(plan);
    const std::uint64_t bytes = synthetic_file_size(plan);
    fmt::print("would write {}: {} bytes ({})\n", args.out, bytes, mib(bytes));
    return 0;
  }

  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  auto last = start;
  bool started = false;
  const MakeModelResult r = make_model(spec, args.out, [&](const MakeModelProgress& p) {
    // The plan once the output file exists (an unwritable path is then the only message).
    if (!started) {
      started = true;
      print_plan(plan);
      std::fflush(stdout);
    }
    // A line every few seconds on long runs; quiet on short ones.
    const auto now = Clock::now();
    if (now - last < std::chrono::seconds(3) || p.tensor == p.n_tensors) return;
    last = now;
    const double s = std::chrono::duration<double>(now - start).count();
    const double done = static_cast<double>(p.bytes_written) / static_cast<double>(p.file_bytes);
    fmt::print("[{}/{}] {}  {} of {} ({:.0f}%), {:.0f} s, about {:.0f} s to go\n", p.tensor + 1, p.n_tensors,
               p.current, mib(p.bytes_written), mib(p.file_bytes), 100 * done, s, s * (1 - done) / done);
    std::fflush(stdout);
  });
  const double s = std::chrono::duration<double>(Clock::now() - start).count();
  fmt::print("wrote {}: {} bytes ({}) in {:.1f} s\n", args.out, r.file_bytes, mib(r.file_bytes), s);
  return 0;
}

}  // namespace

std::unique_ptr<Command> make_model_command(CLI::App& app) { return std::make_unique<MakeModelCommand>(app); }

}  // namespace qmv
