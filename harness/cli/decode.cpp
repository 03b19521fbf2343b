// `qmvlab decode` (generate text with a kernel plan, report tokens/s, the per-op time
// breakdown and the roofline) and `qmvlab logits` (the logits at every position of a
// token sequence, for comparison with the reference forward pass).

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <optional>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "harness/cli/command.h"
#include "harness/cli/decode_batch.h"
#include "harness/cli/decode_cuda.h"
#include "harness/output_file.h"
#include "harness/cli/options.h"
#include "harness/csv.h"
#include "harness/machine.h"
#include "harness/peak.h"
#include "harness/table.h"
#include "harness/tuning_store.h"
#include "kernels/weight_memory.h"
#include "model/batch_forward.h"
#include "model/config.h"
#include "model/forward.h"
#include "model/generate.h"
#include "model/gguf.h"
#include "model/plan.h"
#include "model/sampler.h"
#include "model/tokenizer.h"

namespace qmv {

namespace {

class DecodeCommand : public Command {
 public:
  explicit DecodeCommand(CLI::App& app);
  bool chosen() const override;
  int run(const std::string& command_line) override;

 private:
  struct Options {
    CLI::App* decode = nullptr;
    CLI::App* logits = nullptr;
    // decode
    std::string model, prompt, prompt_file, prompt_tokens, plan = "auto", json_out, csv_out;
    AutoPlanChoice auto_plan, l_auto_plan;
    int n = 64;
    int threads = 0;
    int context = 0;
    int batch = 1;
    SamplerConfig sampler;
    bool ignore_eos = false, quiet = false, no_peak = false, bos = false, no_bos = false;
    double peak_gbps = 0;
    CLI::Option* route = nullptr;
    std::string route_k;
    std::string device = "cpu";
    bool no_call_groups = false, no_trials = false;
    bool no_cuda_graph = false, no_op_times = false, no_stack_gate_up = false, no_stack_qkv = false, fuse_attention = false,
         no_fuse_attention = false, overlap_weights = false, mmap = false;
    // logits
    std::string l_model, l_tokens, l_prompt_file, l_plan = "auto", l_out, l_device = "cpu";
    int l_threads = 0;
    CLI::Option* l_route = nullptr;
    std::string l_route_k;
  };
  Options o_;
};

}  // namespace

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

std::vector<int> parse_token_list(const std::string& s, const std::string& option) {
  std::vector<int> ids;
  std::size_t start = 0;
  while (start < s.size()) {
    std::size_t end = s.find_first_of(", ", start);
    if (end == std::string::npos) end = s.size();
    const std::string item = s.substr(start, end - start);
    start = end + 1;
    if (item.empty()) continue;
    std::size_t used = 0;
    long v = -1;
    try {
      v = std::stol(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != item.size() || v < 0 || v > std::numeric_limits<int>::max())
      throw std::invalid_argument(fmt::format("{}: '{}' is not a token id", option, item));
    ids.push_back(static_cast<int>(v));
  }
  if (ids.empty()) throw std::invalid_argument(option + ": no token ids given");
  return ids;
}

std::string plan_kernels(const std::vector<PlannedMatvec>& planned) {
  std::string s;
  for (const auto& p : planned)
    s += fmt::format("{}{}.{}={}", s.empty() ? "" : ";", to_string(p.op), to_string(p.weight), p.kernel->name);
  return s;
}

// Reads one byte of every page of the tensor data, so that the prompt's timing is not
// the time of paging the mapped file in. Returns the bytes touched.
std::uint64_t page_in(const gguf::File& f) {
  std::uint64_t bytes = 0;
  volatile std::uint8_t sink = 0;
  for (const gguf::Tensor& t : f.tensors()) {
    for (std::uint64_t i = 0; i < t.bytes; i += 4096) sink = sink + t.data[i];
    bytes += t.bytes;
  }
  return bytes;
}

void check_tokens_in_vocab(const std::vector<int>& ids, int vocab) {
  for (int id : ids)
    if (id >= vocab)
      throw std::invalid_argument(fmt::format("token id {} is outside the vocabulary (0..{})", id, vocab - 1));
}

// Writes a float32 array of shape rows x cols as a NumPy .npy file (format 1.0).
void write_npy(const std::string& path, const std::vector<float>& data, std::size_t rows, std::size_t cols) {
  std::string header = fmt::format("{{'descr': '<f4', 'fortran_order': False, 'shape': ({}, {}), }}", rows, cols);
  // Magic (6) + version (2) + length (2) + header, padded with spaces to 64 bytes, ending in \n.
  const std::size_t total = (10 + header.size() + 1 + 63) / 64 * 64;
  header.append(total - 10 - header.size() - 1, ' ');
  header += '\n';
  const auto len = static_cast<std::uint16_t>(header.size());
  std::string bytes("\x93NUMPY\x01\x00", 8);
  bytes += static_cast<char>(len & 0xff);
  bytes += static_cast<char>(len >> 8);
  bytes += header;
  bytes.append(reinterpret_cast<const char*>(data.data()), data.size() * sizeof(float));
  write_file_atomically(path, bytes);
}

// The columns of a decode row before its per-op times, which files written before them lack.
std::vector<std::string> decode_header_without_op_times() {
  return {"machine",       "cpu_model",         "gpu",          "compiler",        "git_commit",
          "model",         "model_file",        "arch",         "weights_bytes",   "plan",
          "plan_kernels",  "threads",           "prompt_tokens", "generated_tokens", "prompt_tok_s",
          "decode_tok_s",  "decode_ms_per_token", "bytes_per_token", "peak_gbps",     "roofline_tok_s",
          "roofline_pct",  "temperature",       "seed",         "device",          "cuda_graph",
          "outlier_routed_calls", "outlier_int8_calls", "command"};
}

// Then, before `command`: the tokens the per-op times average over and one
// `<op>_ms_per_token` column per op of model/ops.h, so the ops of one run can be set
// against each other in the file.
std::vector<std::string> decode_header_without_read_after() {
  std::vector<std::string> h = decode_header_without_op_times();
  std::vector<std::string> op_columns = {"op_timed_tokens"};
  for (const OpInfo& op : kOps) op_columns.push_back(fmt::format("{}_ms_per_token", op.name));
  h.insert(h.end() - 1, op_columns.begin(), op_columns.end());
  return h;
}

// Then the read loop timed right after the decode and the decode's share of it, which
// only older rows hold (the read between tokens replaced it).
std::vector<std::string> decode_header_with_read_after() {
  std::vector<std::string> h = decode_header_without_read_after();
  h.insert(h.end() - 1, {"read_after_gbps", "read_after_pct"});
  return h;
}

// Then where the roofline's bandwidth (peak_gbps) came from, and the machine's stored
// read peak with the decode's share of it: the same figure as peak_gbps unless the
// roofline was read between the tokens.
std::vector<std::string> decode_header_with_stored_peak() {
  std::vector<std::string> h = decode_header_with_read_after();
  h.insert(h.end() - 1, {"roofline_source", "stored_peak_gbps", "stored_peak_pct"});
  return h;
}

// Then, where the read ran between the tokens, how often it changed speed
// (read_speed_changes): a run whose share of the roofline is not a steady figure.
std::vector<std::string> decode_header_with_speed_changes() {
  std::vector<std::string> h = decode_header_with_stored_peak();
  h.insert(h.end() - 1, "read_speed_changes");
  return h;
}

// Then, with two threads or more on the CPU, the median of the round trips timed after
// the read's passes between the tokens (thread_round_trip_ns), or, where that read did
// not run, the one round trip timed after the tokens: where the host put the kernels'
// threads during the run.
std::vector<std::string> decode_header_with_round_trip() {
  std::vector<std::string> h = decode_header_with_speed_changes();
  h.insert(h.end() - 1, "thread_round_trip_ns");
  return h;
}

// Then, where the read ran between the tokens, the decode's share of the roofline spell
// by spell (spell_roofline_pct: roofline_pct_by_spell).
std::vector<std::string> decode_header_with_spells() {
  std::vector<std::string> h = decode_header_with_round_trip();
  h.insert(h.end() - 1, "spell_roofline_pct");
  return h;
}

// Then, on the GPU, how the attention ran (gpu_attention): `fused` or `separate`, with
// ` (measured)` where the trial before the decode chose it.
std::vector<std::string> decode_header() {
  std::vector<std::string> h = decode_header_with_spells();
  h.insert(h.end() - 1, "gpu_attention");
  return h;
}

// The fields of decode_header's op columns: empty where the op did not run or nothing
// was timed op by op.
std::vector<std::string> op_time_fields(const StepTimes& t, int timed_steps) {
  std::vector<std::string> f = {timed_steps > 0 ? std::to_string(timed_steps) : ""};
  for (int i = 0; i < kOpCount; ++i)
    f.push_back(timed_steps > 0 && t.calls[i] > 0 ? fmt::format("{:.6g}", 1e3 * t.seconds[i] / timed_steps) : "");
  return f;
}

// The generation (model/generate.h) and what the report adds to it.
struct DecodeReport : Generation {
  std::vector<int> prompt;
  std::string text;
  StepTimes decode_times;
  double prompt_tok_s() const { return prompt_s > 0 ? prompt.size() / prompt_s : 0; }
};

// The plan, with --route-outliers[=K] applied when it was given.
KernelPlan plan_with_routing(const std::string& spec, const CLI::Option* route, const std::string& k_text) {
  KernelPlan plan = load_plan(spec);
  if (route->count() > 0) route_outliers_option(plan, k_text);
  return plan;
}

bool routes_outliers(const std::vector<PlannedMatvec>& planned) {
  return std::any_of(planned.begin(), planned.end(), [](const PlannedMatvec& p) { return p.outlier_kernel; });
}

// How many int8 matvec calls went to their f32 siblings, per op, over `t`.
void print_routing(const std::vector<PlannedMatvec>& planned, const StepTimes& t, const std::string& when) {
  double k = 0;
  std::vector<std::vector<std::string>> rows;
  std::int64_t routable = 0, routed = 0;
  for (int i = 0; i < static_cast<int>(Op::kCount); ++i) {
    if (t.routable[i] == 0) continue;
    const std::string op(to_string(static_cast<Op>(i)));
    std::string siblings;
    for (const auto& p : planned)
      if (p.op == static_cast<Op>(i) && p.outlier_kernel && siblings.find(p.outlier_kernel->name) == std::string::npos) {
        siblings += (siblings.empty() ? "" : ", ") + p.outlier_kernel->name;
        k = p.outlier_k;
      }
    rows.push_back({op, std::to_string(t.routable[i]), std::to_string(t.routed[i]),
                    fmt::format("{:.2f}%", 100.0 * t.routed[i] / t.routable[i]), siblings});
    routable += t.routable[i];
    routed += t.routed[i];
  }
  if (rows.empty()) return;
  fmt::print("\noutlier routing {}: {} of {} int8-activation matvec calls ran their f32 sibling ({:.2f}%), "
             "on vectors with max|x| > {:g} rms ({} vectors tested):\n",
             when, routed, routable, 100.0 * routed / routable, k, t.calls[static_cast<int>(Op::OutlierTest)]);
  print_table({"op", "int8 calls", "routed", "share", "f32 sibling"}, rows);
}

// The plan's entries as the trials in the run left them: a trial's winner replaces
// auto's pick, which becomes its runner-up.
void keep_trial_winners(const KernelTrials& trials, std::vector<PlannedMatvec>& planned) {
  for (const KernelTrials::Trial& t : trials.trials()) {
    if (t.winner < 0 || t.abandoned) continue;
    const auto p = std::find_if(planned.begin(), planned.end(), [&](const PlannedMatvec& e) {
      return e.op == t.part && e.weight == t.weight && e.shape == t.shape;
    });
    if (p == planned.end()) continue;
    const KernelTrials::Candidate& kept = t.candidates[static_cast<std::size_t>(t.winner)];
    const KernelTrials::Candidate& pick = t.candidates.front();
    if (t.winner > 0) {
      p->runner_up = p->kernel;
      p->runner_up_gbps = p->gbps;
      p->kernel = kept.kernel;
      p->gbps = 0;
      p->why = "auto: fastest in a trial in the run";
    }
    p->source += t.winner > 0
                     ? fmt::format("; trial in the run: {:.3f}x the pick's time", kept.median_s / pick.median_s)
                     : "; the pick held a trial in the run";
  }
}

// The trials in the run, a row per candidate.
void print_trials(const KernelTrials& trials) {
  if (trials.trials().empty()) return;
  std::vector<std::vector<std::string>> rows;
  int ended = 0;
  for (const KernelTrials::Trial& t : trials.trials()) {
    ended += t.winner >= 0 && !t.abandoned;
    for (std::size_t c = 0; c < t.candidates.size(); ++c) {
      const KernelTrials::Candidate& k = t.candidates[c];
      const bool measured = t.winner >= 0 && !t.abandoned;
      rows.push_back({std::string(to_string(t.part)), std::string(to_string(t.weight)), to_string(t.shape),
                      k.kernel->name + (c == 0 ? " (auto's pick)" : ""), std::to_string(k.seconds.size()),
                      measured ? fmt::format("{:.1f}", 1e6 * k.median_s) : "-",
                      measured ? fmt::format("{:.3f}", k.median_s / t.candidates.front().median_s) : "-",
                      t.abandoned                          ? "abandoned: the calls did not match the layers"
                      : t.winner < 0                       ? "still running when the run ended"
                      : static_cast<int>(c) == t.winner ? "kept"
                                                           : ""});
    }
  }
  fmt::print("\ntrials in the run: {} of {} ended; each kernel ran on the layers in turn, timed by its layer's call "
             "(the call group's where the matvec runs in one):\n",
             ended, trials.trials().size());
  print_table({"op", "weights", "shape", "kernel", "calls", "median us", "vs pick", ""}, rows);
}

// The read bandwidth the roofline divides by, and where it came from.
struct Roofline {
  double gbps = 0;  // 0: no roofline
  std::string source;
  std::string read_loop;  // the CPU read loop that measured it; "" when given or on the GPU
};

// The roofline's read loop over the decode's own resident weights, one slice between
// each two tokens (InterleavedRead): nothing when the roofline has no read loop (given,
// on the GPU, none) or the weights are too small to be out of the caches.
std::optional<InterleavedRead> read_between_tokens(const Roofline& roofline, int threads) {
  if (roofline.read_loop.empty()) return std::nullopt;
  std::vector<std::span<const std::byte>> spans = weight_memory_spans();
  std::size_t bytes = 0;
  for (const auto& s : spans) bytes += s.size();
  // At least 32 MiB of cache is assumed: machine_info reads an unknown one as 0.
  const std::size_t slice =
      read_between_slice_bytes(bytes, std::max<std::size_t>(machine_info().llc_bytes, std::size_t{32} << 20));
  if (slice == 0) return std::nullopt;
  try {
    return InterleavedRead(usable_read_loop(roofline.read_loop), std::move(spans), threads, slice);
  } catch (const std::exception& e) {
    fmt::print(stderr, "qmvlab: the read loop {} is not read between the tokens: {}\n", roofline.read_loop, e.what());
    return std::nullopt;
  }
}

// --peak-gbps when given; on the GPU its measured streaming read; on the CPU the
// machine's stored roofline (cpu_roofline).
Roofline roofline_bandwidth(double given_gbps, bool no_peak, int threads, Backend backend) {
  if (given_gbps > 0) return {given_gbps, "--peak-gbps", {}};
  if (no_peak) return {};
  if (backend == Backend::CUDA) return {cuda_read_bandwidth_gbps(), "the GPU's read, measured now", {}};
  const StoredRoofline r = cpu_roofline(threads, "decode");
  return {r.gbps, r.source, r.read_loop};
}

// The CPU's step for the generate loop: the forward pass, then the sampler on its logits.
class CpuSteps : public TokenSteps {
 public:
  CpuSteps(CpuForward& fwd, Sampler& sampler, InterleavedRead* read_between)
      : fwd_(fwd), sampler_(sampler), read_between_(read_between) {}
  int step(int token, bool sample) override {
    const std::span<const float> logits = fwd_.step(token);
    return sample ? sampler_.sample(logits) : -1;
  }
  std::uint64_t bytes_per_token() const override { return fwd_.bytes_per_token(fwd_.position()); }
  // The prompt's op times (its routing counts), kept apart from the decode's.
  void prompt_done() override {
    prompt_times = fwd_.times();
    fwd_.clear_times();
  }
  void between_steps() override {
    if (read_between_) read_between_->pass();
  }
  StepTimes prompt_times;

 private:
  CpuForward& fwd_;
  Sampler& sampler_;
  InterleavedRead* read_between_;
};

StepTimes add_counts(StepTimes a, const StepTimes& b) {
  for (std::size_t i = 0; i < a.calls.size(); ++i) {
    a.calls[i] += b.calls[i];
    a.seconds[i] += b.seconds[i];
    a.matvecs[i] += b.matvecs[i];
    a.routable[i] += b.routable[i];
    a.routed[i] += b.routed[i];
  }
  return a;
}

void print_breakdown(const CpuForward& fwd, const StepTimes& t, int steps) {
  if (steps <= 0) return;
  const double total = t.total();
  std::vector<std::vector<std::string>> rows;
  for (int i = 0; i < static_cast<int>(Op::kCount); ++i) {
    const auto part = static_cast<Op>(i);
    if (t.calls[i] == 0) continue;
    const double ms = 1e3 * t.seconds[i] / steps;
    const std::uint64_t bytes = fwd.part_weight_bytes(part);
    rows.push_back({std::string(to_string(part)), fmt::format("{:.1f}", double(t.calls[i]) / steps),
                    fmt::format("{:.3f}", ms), fmt::format("{:.1f}%", 100 * t.seconds[i] / total),
                    is_matvec(part) && ms > 0 ? fmt::format("{:.2f}", bytes / (ms * 1e-3) / 1e9) : "-"});
  }
  rows.push_back({"total", "", fmt::format("{:.3f}", 1e3 * total / steps), "100.0%", ""});
  print_table({"part", "calls/token", "ms/token", "share", "weights GB/s"}, rows);
}

}  // namespace

DecodeCommand::DecodeCommand(CLI::App& app) {
  Options& o = o_;
  o.threads = o.l_threads = machine_info().cores;
  o.decode = app.add_subcommand(
      "decode",
      "Generate text from a GGUF model on the CPU, every matvec run by the kernel the plan picks; "
      "prints tokens/s, the per-op time breakdown, the roofline and the plan");
  auto* d = o.decode;
  d->add_option("--model", o.model, "GGUF model (llama, qwen2, qwen3)")->required();
  auto* prompt = d->add_option("--prompt", o.prompt, "Prompt text");
  auto* ids = d->add_option("--prompt-tokens", o.prompt_tokens, "Prompt as token ids, e.g. 1,415,2387");
  auto* file = d->add_option("--prompt-file", o.prompt_file,
                             "Prompt text from this file (-: standard input), for prompts too long for a command line");
  prompt->excludes(ids)->excludes(file);
  ids->excludes(file);
  d->add_option("-n,--tokens", o.n, "Tokens to generate")->check(CLI::Range(1, 1 << 20))->capture_default_str();
  d->add_option("--threads", o.threads, "Threads for the kernels and attention")->check(CLI::PositiveNumber)
      ->capture_default_str();
  d->add_option("--plan", o.plan, kPlanHelp)->capture_default_str();
  o.route = d->add_option("--route-outliers", o.route_k,
                          "Run the f32 sibling of an int8-activation kernel on vectors with max|x| > K rms "
                          "(--route-outliers[=K]; K from the plan, else 8)")
                ->expected(0, 1);
  add_auto_plan_options(d, o.auto_plan);
  d->add_option("--context", o.context, "KV cache positions (default: prompt + tokens)")
      ->check(CLI::PositiveNumber);
  d->add_option("--batch", o.batch,
                "Decode this many sequences together from the prompt, each sampled with its own seed (--seed + b): "
                "each step one batch matvec per weight matrix, the weights read once for all (CPU)")
      ->check(CLI::Range(1, 8))->capture_default_str();
  d->add_option("--temperature", o.sampler.temperature, "0: greedy")->check(CLI::Range(0.0, 100.0))
      ->capture_default_str();
  d->add_option("--top-k", o.sampler.top_k, "Keep the k most likely tokens (0: all)")->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  d->add_option("--top-p", o.sampler.top_p, "Nucleus sampling threshold, in (0, 1] (1: all)")
      ->check(CLI::Validator(
          [](const std::string& text) -> std::string {
            // NaN and infinities are left to the finite-number check every option gets.
            const double p = std::strtod(text.c_str(), nullptr);
            return (p > 0 && p <= 1) || !std::isfinite(p) ? "" : "'" + text + "' is not in (0, 1]";
          },
          "(0, 1]"))
      ->capture_default_str();
  d->add_option("--seed", o.sampler.seed, "Sampler seed")->capture_default_str();
  d->add_flag("--ignore-eos", o.ignore_eos, "Keep generating after the end-of-sequence token");
  auto* bos = d->add_flag("--bos", o.bos, "Start the prompt with BOS (default: as the model's metadata says)");
  d->add_flag("--no-bos", o.no_bos, "Do not start the prompt with BOS")->excludes(bos);
  d->add_flag("--quiet", o.quiet, "Do not stream the text");
  d->add_flag("--no-peak", o.no_peak, "Skip measuring the read bandwidth (no roofline)");
  d->add_option("--peak-gbps", o.peak_gbps, "Use this read bandwidth for the roofline instead of measuring")
      ->check(CLI::Range(0.001, 1e6));
  d->add_option("--json", o.json_out, "Write the tokens, text and speeds as JSON");
  d->add_option("--out", o.csv_out, "Append a results CSV row ({machine} expands to this machine's name)");
  d->add_option("--device", o.device, "cpu, or cuda: the whole step on the GPU, the plan's kernels CUDA ones")
      ->check(CLI::IsMember({"cpu", "cuda"}))->capture_default_str();
  d->add_flag("--mmap", o.mmap,
              "--device cpu: read the weights in place from the file's mapping (the page cache, 4 KiB pages) "
              "instead of loading them into weight memory (2 MiB pages where granted; see QMV_HUGE_PAGES)");
  d->add_flag("--no-call-groups", o.no_call_groups,
              "--device cpu: open a parallel region for each matvec, instead of one for the matvecs that read one "
              "activation vector (q, k and v; gate and up)");
  d->add_flag("--no-trials", o.no_trials,
              "--device cpu: run auto's picks as the tuning store ranks them, without trying the kernels it ranks "
              "near them (and that read the same weights) in the first steps and keeping the fastest");
  d->add_flag("--no-cuda-graph", o.no_cuda_graph, "--device cuda: launch each step op by op, not as one CUDA graph");
  d->add_flag("--no-stack-gate-up", o.no_stack_gate_up,
              "--device cuda: run each layer's gate and up as two matvecs, not as one on both matrices");
  d->add_flag("--no-stack-qkv", o.no_stack_qkv,
              "--device cuda: run each layer's q, k and v as three matvecs, not as one on the matrices that share "
              "a kernel");
  auto* fuse = d->add_flag("--fuse-attention", o.fuse_attention,
                           "--device cuda: run each layer's head step (RoPE, the cache store) and attention as one "
                           "kernel that also merges the splits and writes the Q8_1 copy of its output (without this "
                           "flag or --no-fuse-attention, a trial before the decode times both ways and keeps the "
                           "faster)");
  d->add_flag("--no-fuse-attention", o.no_fuse_attention,
              "--device cuda: run each layer's head step, attention and merge as separate kernels, without the trial")
      ->excludes(fuse);
  d->add_flag("--overlap-weights", o.overlap_weights,
              "--device cuda: launch each matvec whose kernel can (the tma_dp4a ones) as a programmatic dependent "
              "of the kernel before it, streaming its weights while that one finishes");
  d->add_flag("--no-op-times", o.no_op_times,
              "--device cuda: skip the op-by-op rerun of the same tokens that measures the per-op breakdown");

  o.logits = app.add_subcommand(
      "logits", "Run a token sequence through the model and write the logits at every position (.npy, float32)");
  auto* l = o.logits;
  l->add_option("--model", o.l_model, "GGUF model")->required();
  auto* l_ids = l->add_option("--tokens", o.l_tokens, "Token ids, e.g. 1,415,2387");
  l->add_option("--prompt-file", o.l_prompt_file,
                "Text from this file (-: standard input) instead, tokenized with BOS as the model's metadata says")
      ->excludes(l_ids);
  l->add_option("--plan", o.l_plan, kPlanHelp)->capture_default_str();
  add_auto_plan_options(l, o.l_auto_plan);
  o.l_route = l->add_option("--route-outliers", o.l_route_k,
                            "Run the f32 sibling of an int8-activation kernel on vectors with max|x| > K rms "
                            "(--route-outliers[=K]; K from the plan, else 8)")
                  ->expected(0, 1);
  l->add_option("--threads", o.l_threads, "Threads")->check(CLI::PositiveNumber)->capture_default_str();
  l->add_option("--out", o.l_out, "Output .npy file: tokens x vocab float32")->required();
  l->add_option("--device", o.l_device, "cpu or cuda")->check(CLI::IsMember({"cpu", "cuda"}))->capture_default_str();
}

bool DecodeCommand::chosen() const { return o_.decode->parsed() || o_.logits->parsed(); }

int DecodeCommand::run(const std::string& command_line) {
  if (o_.decode->parsed()) {
    if (!o_.prompt_file.empty()) o_.prompt = read_prompt_file(o_.prompt_file);
    const bool text_given = !o_.prompt_file.empty() || o_.decode->get_option("--prompt")->count() > 0;
    if (text_given && o_.prompt.empty())
      throw std::invalid_argument(o_.prompt_file.empty() ? "decode: --prompt is empty"
                                                         : "decode: --prompt-file " + o_.prompt_file + " is empty");
    if (text_given) check_utf8(o_.prompt, o_.prompt_file.empty() ? "--prompt" : "--prompt-file " + o_.prompt_file);
  }
  const Options& o = o_;
  if (o.logits->parsed()) {
    if (o.l_tokens.empty() && o.l_prompt_file.empty())
      throw std::invalid_argument("logits: give --tokens IDS or --prompt-file PATH");
    const LoadedModel m(o.l_model);
    std::vector<int> tokens;
    if (!o.l_prompt_file.empty()) {
      const std::string text = read_prompt_file(o.l_prompt_file);
      check_utf8(text, "--prompt-file " + o.l_prompt_file);
      const Tokenizer tok = Tokenizer::from_gguf(m.file);
      tokens = tok.encode(text, tok.add_bos_default());
      if (tokens.empty()) throw std::invalid_argument("logits: --prompt-file " + o.l_prompt_file + " has no tokens");
    } else {
      tokens = parse_token_list(o.l_tokens, "--tokens");
    }
    check_tokens_in_vocab(tokens, m.config.vocab_size);
    const Backend backend = o.l_device == "cuda" ? Backend::CUDA : Backend::CPU;
    const KernelPlan plan = plan_with_routing(o.l_plan, o.l_route, o.l_route_k);
    const auto speeds = auto_plan_speeds(o.l_auto_plan, plan, m.weights, o.l_threads, backend);
    const auto planned = resolve_plan(plan, m.weights, o.l_threads, speeds, backend);
    StepTimes logits_times;
    std::vector<float> all;
    if (backend == Backend::CUDA) {
      all = cuda_logits(m, planned, tokens, CudaDecodeOptions{}, &logits_times);
    } else {
      CpuForward fwd(m, planned, o.l_threads, static_cast<int>(tokens.size()), WeightResidence::Resident);
      all.reserve(tokens.size() * m.config.vocab_size);
      for (int t : tokens) {
        const auto logits = fwd.step(t);
        all.insert(all.end(), logits.begin(), logits.end());
      }
      logits_times = fwd.times();
    }
    write_npy(o.l_out, all, tokens.size(), m.config.vocab_size);
    fmt::print("wrote {} ({} positions x {} logits), plan:\n", o.l_out, tokens.size(), m.config.vocab_size);
    print_plan(planned);
    print_routing(planned, logits_times, "over all positions");
    return 0;
  }

  validate(o.sampler);
  if (o.batch > 1) {
    if (o.device != "cpu") throw std::invalid_argument("decode: --batch runs on the CPU, not --device " + o.device);
    if (o.route->count() > 0) throw std::invalid_argument("decode: --batch does not route outliers (--route-outliers)");
    if (!o.csv_out.empty()) throw std::invalid_argument("decode: --batch writes --json, not --out");
  }
  if (o.prompt.empty() && o.prompt_tokens.empty())
    throw std::invalid_argument("decode: give --prompt TEXT, --prompt-file PATH or --prompt-tokens IDS");
  // The CPU's matvecs read one resident copy of each weight (model/forward.h,
  // WeightResidence): repacked straight from the mapped file into their kernels'
  // layouts, or copied in their own, in huge pages as the bench's arenas. --mmap reads
  // them in place from the mapping; the GPU uploads them.
  const bool resident = o.device == "cpu" && !o.mmap;
  const auto open_start = Clock::now();
  const LoadedModel m(o.model);
  const double open_s = seconds_since(open_start);
  const ModelConfig& c = m.config;
  const Tokenizer tok = Tokenizer::from_gguf(m.file);

  DecodeReport r;
  if (!o.prompt_tokens.empty()) {
    r.prompt = parse_token_list(o.prompt_tokens, "--prompt-tokens");
  } else {
    const bool add_bos = o.bos || (!o.no_bos && tok.add_bos_default());
    r.prompt = tok.encode(o.prompt, add_bos);
    if (r.prompt.empty()) throw std::invalid_argument("decode: the prompt has no tokens");
  }
  check_tokens_in_vocab(r.prompt, c.vocab_size);
  const int needed = static_cast<int>(r.prompt.size()) + o.n;
  if (needed > c.context_length)
    throw std::invalid_argument(fmt::format(
        "decode: the prompt ({} tokens) plus {} generated tokens needs {} positions, more than the model's "
        "context length of {}",
        r.prompt.size(), o.n, needed, c.context_length));
  if (o.context > c.context_length)
    throw std::invalid_argument(fmt::format("decode: --context {} is more than the model's context length of {}",
                                            o.context, c.context_length));
  if (o.context && o.context < needed)
    throw std::invalid_argument(fmt::format("decode: --context {} is shorter than the prompt plus -n ({})",
                                            o.context, needed));

  // Every choice is checked here, before anything runs.
  KernelPlan plan = plan_with_routing(o.plan, o.route, o.route_k);
  const std::string plan_rules = plan.describe();
  // A batch decode runs gate and up apart (the batch kernels are plain matvecs), so
  // auto weighs no fused kernel for it.
  if (o.batch > 1) plan.set("ffn_up_gate", "*", "none");
  const Backend backend = o.device == "cuda" ? Backend::CUDA : Backend::CPU;
  AutoPlanEvidence evidence;
  std::vector<KernelSpeed> speeds = auto_plan_speeds(o.auto_plan, plan, m.weights, o.threads, backend, &evidence);
  auto planned = resolve_plan(plan, m.weights, o.threads, speeds, backend);
  // A batch's kernels by their speeds at B vectors per call, the one-vector plan's
  // figures beside them; a bench CSV's rows of every n are in `speeds` already.
  AutoPlanEvidence batch_evidence;
  if (o.batch > 1 && o.auto_plan.bench_csv.empty()) {
    const auto batch_speeds =
        auto_plan_speeds(o.auto_plan, plan, m.weights, o.threads, backend, &batch_evidence, o.batch, evidence.seconds);
    speeds.insert(speeds.end(), batch_speeds.begin(), batch_speeds.end());
  }
  // The roofline's bandwidth, settled before the weights are made resident, so that a
  // measurement's buffer never sits beside them.
  const Roofline roofline = roofline_bandwidth(o.peak_gbps, o.no_peak, o.threads, backend);
  if (o.batch > 1) {
    BatchDecodeRequest b;
    b.model = &m;
    b.tokenizer = &tok;
    b.prompt = r.prompt;
    b.tokens = o.n;
    b.batch = o.batch;
    b.threads = o.threads;
    b.context = o.context ? o.context : needed;
    // The static plan weighs no speeds, as resolve_plan does.
    b.plan = batch_plan(planned, o.batch, o.threads, plan.uses_static_order() ? std::vector<KernelSpeed>{} : speeds);
    b.plan_rules = plan_rules;
    if (o.auto_plan.bench_csv.empty()) b.tuning = {evidence, batch_evidence};
    b.sampler = o.sampler;
    b.ignore_eos = o.ignore_eos;
    b.quiet = o.quiet;
    b.roofline_gbps = roofline.gbps;
    b.roofline_source = roofline.source;
    b.json_out = o.json_out;
    b.command = command_line;
    return run_batch_decode(b);
  }
  // The peak resident memory counts from here: the timings above held buffers of their
  // own, freed by now, and the mapped file is not resident until the load reads it.
  const bool peak_from_load = reset_peak_resident();
  const int context = o.context ? o.context : needed;
  std::optional<CpuForward> fwd;
  if (backend == Backend::CPU)
    fwd.emplace(m, planned, o.threads, context, resident ? WeightResidence::Resident : WeightResidence::InPlace);
  if (fwd) {
    fwd->set_call_groups(!o.no_call_groups);
    fwd->set_kernel_trials(!o.no_trials);
  }
  Sampler sampler(o.sampler);
  // Resident weights are in memory already; those read in place are paged in here,
  // before any timing.
  const auto page_in_start = Clock::now();
  const std::uint64_t mapped = resident ? 0 : fwd ? fwd->page_in() : page_in(m.file);
  const double load_s = open_s + seconds_since(page_in_start) + (resident ? fwd->weight_residency().seconds : 0.0);
  const double huge_share = resident ? fwd->weight_residency().huge_page_share : 0.0;

  auto stream = [&](const std::string& s) {
    if (o.quiet) return;
    std::fwrite(s.data(), 1, s.size(), stdout);
    std::fflush(stdout);
  };
  const auto emit = [&](int t) {
    if (t == tok.eos() && !o.ignore_eos) return false;
    const std::string piece = tok.decode(t);
    r.text += piece;
    stream(piece);
    return true;
  };
  // The prompt as the user wrote it (ids: their text), without BOS and other specials.
  stream(o.prompt.empty() ? tok.decode(r.prompt) : o.prompt);

  std::uint64_t weight_bytes = 0;
  StepTimes prompt_times;
  CudaDecodeRun gpu;
  std::optional<InterleavedRead> read_between;
  if (backend == Backend::CUDA) {
    // The whole loop on the GPU: the sampler runs there too, only tokens come back.
    CudaDecodeOptions gpu_options;
    gpu_options.cuda_graph = !o.no_cuda_graph;
    gpu_options.stack_gate_up = !o.no_stack_gate_up;
    gpu_options.stack_qkv = !o.no_stack_qkv;
    if (o.fuse_attention || o.no_fuse_attention) gpu_options.fuse_attention = o.fuse_attention;
    gpu_options.overlap_weights = o.overlap_weights;
    gpu_options.op_times = !o.no_op_times;
    gpu = run_cuda_decode(m, planned, r.prompt, o.n, o.sampler, context, gpu_options, emit);
    static_cast<Generation&>(r) = gpu;  // the generation alone
    weight_bytes = gpu.weight_bytes;
    prompt_times = gpu.routing;  // the routing counts of the whole run (no CPU timings)
  } else {
    read_between = read_between_tokens(roofline, o.threads);
    CpuSteps steps(*fwd, sampler, read_between ? &*read_between : nullptr);
    static_cast<Generation&>(r) = generate(steps, r.prompt, o.n, emit);
    prompt_times = steps.prompt_times;
    r.decode_times = fwd->times();
    weight_bytes = fwd->weight_bytes();
  }
  if (!o.quiet) fmt::print("\n");
  // The peak of the load and decode, before anything else allocates.
  const std::int64_t peak_rss = peak_resident_bytes();

  // The roofline: the read between the tokens where it ran, else the stored figure.
  const double stored_peak = roofline.gbps;
  const bool read_between_ran = read_between && read_between->passes() > 0;
  const double peak = read_between_ran ? read_between->median_gbps() : stored_peak;
  const std::string peak_source =
      read_between_ran ? fmt::format("the {} read loop over these weights between the tokens, {} MB a pass, "
                                     "median of {} passes",
                                     read_between->loop_name(), read_between->slice_bytes() >> 20,
                                     read_between->passes())
                       : roofline.source;
  const double roofline_tok_s = peak > 0 ? peak * 1e9 / r.bytes_per_token : 0;
  const double roofline_pct = roofline_tok_s > 0 ? 100 * r.decode_tok_s() / roofline_tok_s : 0.0;
  const double stored_pct =
      stored_peak > 0 ? 100 * r.decode_tok_s() * r.bytes_per_token / (stored_peak * 1e9) : 0.0;
  const int speed_changes = read_between_ran ? read_speed_changes(read_between->pass_gbps()) : 0;
  const double spell_pct = read_between_ran ? roofline_pct_by_spell(r.step_s, r.step_bytes, read_between->pass_gbps())
                                             : 0;
  // Without the read between the tokens (--no-peak, a model the caches hold), one round
  // trip after the tokens still says where the host had the threads (decode_ab.py sorts
  // its rounds by it).
  const bool round_trip_after = !read_between_ran && backend == Backend::CPU && o.threads >= 2;
  const double round_trip_ns = read_between_ran   ? read_between->median_round_trip_ns()
                               : round_trip_after ? thread_round_trip_ns()
                                                  : 0;

  fmt::print("\nmodel {} ({}, {} layers, {:.1f} MB of weights read per token)\n", c.name, c.arch, c.n_layers,
             weight_bytes / 1e6);
  if (resident) {
    const auto& wr = fwd->weight_residency();
    fmt::print("load: {:.1f} MB of weights made resident in {:.3f} s: {:.1f} MB repacked straight from the file "
               "into their kernels' layouts, {:.1f} MB copied in their own layout; {} (before the timings below)\n",
               wr.weight_bytes / 1e6, load_s, wr.repacked_only_file_bytes / 1e6, wr.plain_bytes / 1e6,
               huge_share < 0 ? std::string("pages unknown")
                              : fmt::format("{:.0f}% in 2 MiB pages", 100 * huge_share));
  } else {
    fmt::print("load: {:.1f} MB of tensors paged in from the file's mapping in {:.3f} s (before the timings "
               "below)\n",
               mapped / 1e6, load_s);
  }
  if (fwd && fwd->weight_repack().matrices > 0) {
    const auto& rp = fwd->weight_repack();
    const auto& wr = fwd->weight_residency();
    fmt::print("repack: {} matrices copied into their kernels' layouts in {:.3f} s, {:.1f} MB; {} of them ({:.1f} MB "
               "in the file) held in no other layout\n",
               rp.matrices, rp.seconds, rp.bytes / 1e6, wr.repacked_only, wr.repacked_only_file_bytes / 1e6);
  }
  if (fwd) {
    const auto& wr = fwd->weight_residency();
    const double counted = static_cast<double>(wr.weight_bytes + fwd->kv_cache_bytes());
    fmt::print("memory: peak resident {} {} = {} (weights {:.1f} MB + KV cache {:.1f} MB)\n",
               peak_rss < 0 ? std::string("unknown") : fmt::format("{:.1f} MB", peak_rss / 1e6),
               peak_from_load ? "during load and decode" : "since the process started",
               peak_rss < 0 ? std::string("?") : fmt::format("{:.2f}x", peak_rss / counted), wr.weight_bytes / 1e6,
               fwd->kv_cache_bytes() / 1e6);
  }
  if (backend == Backend::CUDA) fmt::print("{}\nattention: {}\n", describe_cuda_run(gpu), gpu.attention.why);
  fmt::print("prompt: {} tokens in {:.3f} s = {:.2f} tok/s\n", r.prompt.size(), r.prompt_s, r.prompt_tok_s());
  if (r.decode_steps > 0) {
    fmt::print("decode: {} tokens in {:.3f} s = {:.2f} tok/s ({:.2f} ms/token), timed after the first token\n",
               r.decode_steps, r.decode_s, r.decode_tok_s(), 1e3 * r.decode_s / r.decode_steps);
    if (roofline_tok_s > 0)
      fmt::print("roofline: {:.2f} MB/token (weights + KV cache) at {:.2f} GB/s read bandwidth ({}) = "
                 "{:.2f} tok/s; decode reaches {:.1f}% of it\n",
                 r.bytes_per_token / 1e6, peak, peak_source, roofline_tok_s, roofline_pct);
    if (speed_changes > 0) {
      const auto [slowest, fastest] = std::minmax_element(read_between->pass_gbps().begin(),
                                                          read_between->pass_gbps().end());
      fmt::print("unsteady: the read between the tokens changed speed by more than {:g}x {} time(s) in {} passes "
                 "({:.1f}-{:.1f} GB/s), so this run's shares mix the memory's speeds\n",
                 kSameReadSpeed, speed_changes, read_between->passes(), *slowest, *fastest);
      if (spell_pct > 0)
        fmt::print("by spell: each token against the median read of its steady spell of passes, decode reaches "
                   "{:.1f}% of the roofline\n",
                   spell_pct);
    }
    if (round_trip_ns > 0) {
      std::string when = "after the tokens", verdict;
      if (read_between_ran) {
        const std::vector<double>& passes = read_between->pass_round_trip_ns();
        const auto [shortest, longest] = std::minmax_element(passes.begin(), passes.end());
        when = fmt::format("median after {} passes, {:.0f}-{:.0f}", passes.size(), *shortest, *longest);
        if (!one_placement(passes))
          verdict = "; the host moved the threads between cores that share a cache and cores that do not";
      }
      fmt::print("threads: a cache line went from one kernel thread to another and back in {:.0f} ns ({}){}\n",
                 round_trip_ns, when, verdict);
    }
    if (read_between_ran && stored_peak > 0)
      fmt::print("stored read peak: {:.2f} GB/s ({}); decode reaches {:.1f}% of it\n", stored_peak, roofline.source,
                 stored_pct);
    if (backend == Backend::CUDA) {
      fmt::print("\nper-op time during decode (GPU):\n");
      print_cuda_breakdown(gpu);
    } else {
      fmt::print("\nper-op time during decode ({} thread(s)):\n", o.threads);
      print_breakdown(*fwd, r.decode_times, r.decode_steps);
    }
  } else {
    fmt::print("decode: stopped after the first token (end of sequence or -n 1); nothing to time\n");
  }
  fmt::print("\nplan {}:\n", plan.describe());
  if (o.auto_plan.bench_csv.empty()) fmt::print("{}\n", evidence.summary());
  if (fwd && !o.no_trials) {
    keep_trial_winners(fwd->kernel_trials(), planned);
    print_plan(planned);
    print_trials(fwd->kernel_trials());
  } else {
    print_plan(planned);
  }
  const StepTimes all_steps = add_counts(prompt_times, r.decode_times);
  print_routing(planned, all_steps, "over the prompt and decode");
  std::int64_t routed_calls = 0, routable_calls = 0;
  for (int i = 0; i < static_cast<int>(Op::kCount); ++i) {
    routed_calls += all_steps.routed[i];
    routable_calls += all_steps.routable[i];
  }

  // The per-op times JSON and CSV record: the GPU's come from its op-by-op rerun.
  const StepTimes& op_times = backend == Backend::CUDA ? gpu.op_times : r.decode_times;
  const int op_timed = backend == Backend::CUDA ? gpu.op_timed_steps : r.decode_steps;
  if (!o.json_out.empty()) {
    nlohmann::json j;
    j["model"] = o.model;
    j["arch"] = c.arch;
    j["prompt_tokens"] = r.prompt;
    j["generated_tokens"] = r.generated;
    j["text"] = r.text;
    j["prompt_tok_s"] = r.prompt_tok_s();
    j["decode_tok_s"] = r.decode_tok_s();
    j["decode_steps"] = r.decode_steps;
    j["threads"] = o.threads;
    j["device"] = o.device;
    if (backend == Backend::CUDA) j["cuda_graph"] = gpu.graph;
    j["plan"] = plan.describe();
    j["plan_kernels"] = plan_kernels(planned);
    if (fwd && !o.no_trials) {
      // Each trial in the run: its candidates (auto's pick first), and the one kept.
      nlohmann::json trials = nlohmann::json::array();
      for (const KernelTrials::Trial& t : fwd->kernel_trials().trials()) {
        nlohmann::json candidates = nlohmann::json::array();
        for (const KernelTrials::Candidate& k : t.candidates)
          candidates.push_back(
              {{"kernel", k.kernel->name}, {"calls", k.seconds.size()}, {"median_us", 1e6 * k.median_s}});
        trials.push_back({{"op", to_string(t.part)}, {"weights", to_string(t.weight)}, {"shape", to_string(t.shape)},
                          {"ended", t.winner >= 0 && !t.abandoned}, {"kept", t.kept()->name},
                          {"candidates", candidates}});
      }
      j["trials"] = trials;
    }
    j["weights_in"] = resident ? "weight memory" : "mapping";
    j["load_s"] = load_s;
    if (resident && huge_share >= 0) j["huge_page_pct"] = 100 * huge_share;
    if (fwd) {
      j["repack_matrices"] = fwd->weight_repack().matrices;
      j["repack_bytes"] = fwd->weight_repack().bytes;
      j["repack_s"] = fwd->weight_repack().seconds;
      const auto& wr = fwd->weight_residency();
      nlohmann::json mem;
      if (peak_rss >= 0) mem["peak_resident_bytes"] = peak_rss;
      mem["peak_since"] = peak_from_load ? "load" : "process start";
      mem["weight_bytes"] = wr.weight_bytes;
      mem["kv_cache_bytes"] = fwd->kv_cache_bytes();
      if (peak_rss >= 0) mem["peak_ratio"] = peak_rss / static_cast<double>(wr.weight_bytes + fwd->kv_cache_bytes());
      mem["repacked_only_file_bytes"] = wr.repacked_only_file_bytes;
      mem["plain_copy_bytes"] = wr.plain_bytes;
      mem["in_place_bytes"] = wr.in_place_bytes;
      mem["released_file_bytes"] = wr.released_bytes;
      j["memory"] = mem;
    }
    j["bytes_per_token"] = r.bytes_per_token;
    j["peak_gbps"] = peak;
    j["peak_source"] = peak_source;
    if (stored_peak > 0) {
      j["stored_peak_gbps"] = stored_peak;
      j["stored_peak_pct"] = stored_pct;
    }
    if (read_between_ran) j["read_between_passes"] = read_between->passes();
    if (read_between_ran) j["read_speed_changes"] = speed_changes;
    if (round_trip_ns > 0) j["thread_round_trip_ns"] = round_trip_ns;
    if (spell_pct > 0) j["spell_roofline_pct"] = spell_pct;
    if (backend == Backend::CUDA) {
      nlohmann::json attention;
      attention["fused"] = gpu.attention.fused;
      attention["measured"] = gpu.attention.measured;
      if (gpu.attention.measured) {
        attention["fused_step_ms"] = gpu.attention.fused_ms;
        attention["separate_step_ms"] = gpu.attention.separate_ms;
        attention["steps_each"] = gpu.attention.steps;
      }
      j["gpu_attention"] = attention;
    }
    if (o.auto_plan.bench_csv.empty()) {
      nlohmann::json tuning;
      tuning["matvecs"] = evidence.matvecs;
      tuning["measured"] = evidence.measured;
      tuning["from_store"] = evidence.from_store;
      tuning["unmeasured"] = evidence.unmeasured;
      tuning["seconds"] = evidence.seconds;
      tuning["store"] = evidence.store;
      j["tuning"] = tuning;
    }
    j["roofline_pct"] = roofline_pct;
    if (op_timed > 0) {
      nlohmann::json per_op;
      for (int i = 0; i < kOpCount; ++i)
        if (op_times.calls[i] > 0)
          per_op[std::string(to_string(static_cast<Op>(i)))] = 1e3 * op_times.seconds[i] / op_timed;
      j["op_ms_per_token"] = per_op;
      j["op_timed_tokens"] = op_timed;
    }
    if (routes_outliers(planned)) {
      nlohmann::json routing;
      routing["k"] = plan.outlier_routing().k;
      for (int i = 0; i < static_cast<int>(Op::kCount); ++i) {
        if (all_steps.routable[i] == 0) continue;
        const std::string op(to_string(static_cast<Op>(i)));
        routing["int8_calls"][op] = all_steps.routable[i];
        routing["routed"][op] = all_steps.routed[i];
      }
      routing["vectors_tested"] = all_steps.calls[static_cast<int>(Op::OutlierTest)];
      j["outlier_routing"] = routing;
    }
    // Token pieces of a byte-level vocabulary may split a UTF-8 character: replace, don't throw.
    write_file_atomically(o.json_out, j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
  }
  if (!o.csv_out.empty()) {
    const RunContext ctx = current_context(command_line);
    const std::string path = expand_machine(o.csv_out);
    if (widen_csv_header(path, decode_header(),
                         {decode_header_without_op_times(), decode_header_without_read_after(),
                          decode_header_with_read_after(), decode_header_with_stored_peak(),
                          decode_header_with_speed_changes(), decode_header_with_round_trip(),
                          decode_header_with_spells()}))
      fmt::print("{}: rewritten with the newer columns, empty in its earlier rows\n", path);
    CsvWriter csv(path, decode_header(), true);
    const std::string file = o.model.substr(o.model.find_last_of('/') + 1);
    std::vector<std::string> fields = {
               ctx.machine, ctx.cpu_model, ctx.gpu, ctx.compiler, ctx.git_commit, c.name, file, c.arch,
               std::to_string(weight_bytes), plan.describe(), plan_kernels(planned),
               std::to_string(o.threads), std::to_string(r.prompt.size()), std::to_string(r.generated.size()),
               fmt::format("{:.3f}", r.prompt_tok_s()), fmt::format("{:.3f}", r.decode_tok_s()),
               fmt::format("{:.4f}", r.decode_steps ? 1e3 * r.decode_s / r.decode_steps : 0.0),
               fmt::format("{:.0f}", r.bytes_per_token), fmt::format("{:.3f}", peak),
               fmt::format("{:.3f}", roofline_tok_s),
               fmt::format("{:.2f}", roofline_pct),
               fmt::format("{}", o.sampler.temperature), std::to_string(o.sampler.seed), o.device,
               backend == Backend::CUDA ? (gpu.graph ? "on" : "off") : "",
               routes_outliers(planned) ? std::to_string(routed_calls) : "",
               routes_outliers(planned) ? std::to_string(routable_calls) : ""};
    const auto ops = op_time_fields(op_times, op_timed);
    fields.insert(fields.end(), ops.begin(), ops.end());
    fields.insert(fields.end(), {"", ""});  // read_after_*: older rows only
    fields.push_back(peak > 0 ? peak_source : "");
    fields.push_back(stored_peak > 0 ? fmt::format("{:.3f}", stored_peak) : "");
    fields.push_back(stored_peak > 0 ? fmt::format("{:.2f}", stored_pct) : "");
    fields.push_back(read_between_ran ? std::to_string(speed_changes) : "");
    fields.push_back(round_trip_ns > 0 ? fmt::format("{:.0f}", round_trip_ns) : "");
    fields.push_back(spell_pct > 0 ? fmt::format("{:.2f}", spell_pct) : "");
    fields.push_back(backend == Backend::CUDA ? fmt::format("{}{}", gpu.attention.fused ? "fused" : "separate",
                                                            gpu.attention.measured ? " (measured)" : "")
                                              : "");
    fields.push_back(ctx.command);
    csv.write(fields);
    fmt::print("appended a row to {}\n", csv.path());
  }
  return 0;
}

std::unique_ptr<Command> decode_command(CLI::App& app) { return std::make_unique<DecodeCommand>(app); }

}  // namespace qmv
