#include "harness/cli/decode_batch.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <span>

#include "harness/output_file.h"
#include "harness/table.h"
#include "model/batch_forward.h"

namespace qmv {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

}  // namespace

int run_batch_decode(const BatchDecodeRequest& r) {
  const LoadedModel& m = *r.model;
  const int vocab = m.config.vocab_size, batch = r.batch;
  BatchCpuForward fwd(m, r.plan, batch, r.threads, r.context);
  std::vector<Sampler> samplers;
  for (int b = 0; b < batch; ++b) {
    SamplerConfig c = r.sampler;
    c.seed = r.sampler.seed + static_cast<std::uint64_t>(b);
    samplers.emplace_back(c);
  }
  fmt::print("batch decode: {} sequences from one prompt of {} tokens, {} tokens each, {} thread{}{}\n", batch,
             r.prompt.size(), r.tokens, r.threads, r.threads == 1 ? "" : "s",
             r.sampler.temperature > 0 ? fmt::format(", sampled with seeds {}..{}", r.sampler.seed,
                                                     r.sampler.seed + static_cast<std::uint64_t>(batch) - 1)
                                       : ", greedy (the sequences are alike)");
  std::fflush(stdout);

  // The prompt, every sequence at once; then each samples its first token.
  auto t0 = Clock::now();
  std::span<const float> logits;
  std::vector<int> tokens(static_cast<std::size_t>(batch));
  for (int t : r.prompt) {
    std::fill(tokens.begin(), tokens.end(), t);
    logits = fwd.step(tokens);
  }
  std::vector<std::vector<int>> generated(static_cast<std::size_t>(batch));
  std::vector<bool> going(static_cast<std::size_t>(batch), true);
  auto sample_all = [&] {
    int live = 0;
    for (int b = 0; b < batch; ++b) {
      if (!going[b]) continue;
      const int next = samplers[b].sample(logits.subspan(static_cast<std::size_t>(b) * vocab, vocab));
      generated[b].push_back(next);
      tokens[b] = next;
      if (next == r.tokenizer->eos() && !r.ignore_eos) going[b] = false;
      live += going[b] ? 1 : 0;
    }
    return live;
  };
  int live = sample_all();
  const double prompt_s = seconds_since(t0);

  // Decode, timed after each sequence's first token. A finished sequence keeps its
  // slot (its last token again) so the others' step stays one batch call.
  fwd.clear_times();
  int steps = 0, decoded = 0;
  double bytes = 0;
  t0 = Clock::now();
  while (live > 0 && static_cast<int>(generated[0].size()) < r.tokens) {
    bytes += static_cast<double>(fwd.bytes_per_step());
    const int before = live;
    logits = fwd.step(tokens);
    live = sample_all();
    decoded += before;
    ++steps;
  }
  const double decode_s = seconds_since(t0);

  if (!r.quiet)
    for (int b = 0; b < batch; ++b)
      fmt::print("sequence {}: {}\n", b, r.tokenizer->decode(r.prompt) + r.tokenizer->decode(generated[b]));
  const double total_tok_s = decode_s > 0 ? decoded / decode_s : 0;
  const double step_ms = steps ? 1e3 * decode_s / steps : 0;
  const double bytes_per_step = steps ? bytes / steps : static_cast<double>(fwd.bytes_per_step());
  fmt::print("prompt: {} tokens x {} sequences in {:.2f} s\n", r.prompt.size(), batch, prompt_s);
  fmt::print("decode: {} steps, {} tokens in {:.2f} s: {:.2f} tok/s in all, {:.2f} tok/s per sequence, "
             "{:.2f} ms per step\n",
             steps, decoded, decode_s, total_tok_s, decode_s > 0 ? steps / decode_s : 0.0, step_ms);
  double roofline_pct = 0;
  if (r.roofline_gbps > 0 && steps > 0) {
    const double steps_per_s = r.roofline_gbps * 1e9 / bytes_per_step;
    roofline_pct = 100 * (steps / decode_s) / steps_per_s;
    fmt::print("roofline: {:.2f} MB/step (the weights once, {} KV caches) at {:.2f} GB/s read bandwidth ({}) = "
               "{:.2f} steps/s, {:.2f} tok/s in all: {:.1f}%\n",
               bytes_per_step / 1e6, batch, r.roofline_gbps, r.roofline_source, steps_per_s, steps_per_s * batch,
               roofline_pct);
  }
  fmt::print("plan {}, batch of {} (gate and up apart):\n", r.plan_rules, batch);
  for (const AutoPlanEvidence& e : r.tuning) fmt::print("{}\n", e.summary());
  print_plan(r.plan);

  if (!r.json_out.empty()) {
    nlohmann::json j;
    j["command"] = r.command;
    j["batch"] = batch;
    j["threads"] = r.threads;
    j["prompt_tokens"] = r.prompt;
    j["generated_tokens"] = generated;
    std::vector<std::string> texts;
    for (const auto& g : generated) texts.push_back(r.tokenizer->decode(g));
    j["texts"] = texts;
    j["prompt_s"] = prompt_s;
    j["decode_s"] = decode_s;
    j["decode_steps"] = steps;
    j["decoded_tokens"] = decoded;
    j["decode_tok_s"] = total_tok_s;
    j["decode_tok_s_per_sequence"] = decode_s > 0 ? steps / decode_s : 0.0;
    j["ms_per_step"] = step_ms;
    j["bytes_per_step"] = bytes_per_step;
    j["weight_bytes"] = fwd.weight_bytes();
    if (r.roofline_gbps > 0) {
      j["peak_gbps"] = r.roofline_gbps;
      j["peak_source"] = r.roofline_source;
      j["roofline_pct"] = roofline_pct;
    }
    nlohmann::json kernels = nlohmann::json::array();
    for (const PlannedMatvec& p : r.plan)
      kernels.push_back({{"op", std::string(to_string(p.op))}, {"weight_type", std::string(to_string(p.weight))},
                         {"shape", to_string(p.shape)}, {"kernel", p.kernel ? p.kernel->name : ""}, {"why", p.why},
                         {"source", p.source}, {"runner_up", p.runner_up ? p.runner_up->name : ""}});
    j["plan"] = kernels;
    // As decode's "tuning", for the one-vector plan's figures and the batch kernels'.
    nlohmann::json tuning = nlohmann::json::array();
    for (const AutoPlanEvidence& e : r.tuning)
      tuning.push_back({{"n", e.n}, {"matvecs", e.matvecs}, {"measured", e.measured}, {"from_store", e.from_store},
                        {"unmeasured", e.unmeasured}, {"seconds", e.seconds}, {"store", e.store}});
    if (!r.tuning.empty()) j["tuning"] = tuning;
    write_file_atomically(r.json_out, j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
    fmt::print("wrote {}\n", r.json_out);
  }
  return 0;
}

}  // namespace qmv
