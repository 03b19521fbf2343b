#include "model/generate.h"

#include <chrono>
#include <stdexcept>

namespace qmv {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

}  // namespace

Generation generate(TokenSteps& steps, const std::vector<int>& prompt, int n, const std::function<bool(int)>& emit) {
  if (prompt.empty()) throw std::invalid_argument("decode: the prompt has no tokens");
  Generation g;
  // Prompt: every prompt token, then sampling the first new one.
  auto t0 = Clock::now();
  int next = 0;
  for (std::size_t i = 0; i < prompt.size(); ++i) next = steps.step(prompt[i], i + 1 == prompt.size());
  g.prompt_s = seconds_since(t0);
  g.generated.push_back(next);
  bool going = emit(next);
  steps.prompt_done();

  // Decode, timed after the first token, step by step so that between_steps is not.
  double bytes = 0;
  while (going && static_cast<int>(g.generated.size()) < n) {
    if (g.decode_steps > 0) steps.between_steps();
    t0 = Clock::now();
    const double step_bytes = static_cast<double>(steps.bytes_per_token());
    next = steps.step(g.generated.back(), true);
    g.generated.push_back(next);
    ++g.decode_steps;
    going = emit(next);
    const double s = seconds_since(t0);
    g.decode_s += s;
    bytes += step_bytes;
    g.step_s.push_back(s);
    g.step_bytes.push_back(step_bytes);
  }
  g.bytes_per_token = g.decode_steps ? bytes / g.decode_steps : static_cast<double>(steps.bytes_per_token());
  return g;
}

}  // namespace qmv
