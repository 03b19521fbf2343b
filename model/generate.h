// The generate loop, written once for every backend: the prompt, the first new token
// sampled after it, then one step per token until enough are made or the caller stops
// (the end-of-sequence token). A backend gives it only its step (TokenSteps); the
// CPU and the GPU decode time and stop alike because they run this one loop.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

namespace qmv {

// One backend's decode step, as the generate loop drives it.
class TokenSteps {
 public:
  virtual ~TokenSteps() = default;
  // Runs the step for `token` at the next position. With `sample`, returns the token
  // sampled after it; without, what it returns is not read (a prompt token before
  // the last: the CPU samples only where a token is wanted, so that its sampler's
  // random state advances once per generated token).
  virtual int step(int token, bool sample) = 0;
  // The bytes the next step reads (weights + KV cache up to its position), for the roofline.
  virtual std::uint64_t bytes_per_token() const = 0;
  // Called between the prompt and the timed decode.
  virtual void prompt_done() {}
  // Called after each timed decode step but the last, outside the timing: for work
  // that measures alongside the decode (a read pass of its weights) without slowing it.
  virtual void between_steps() {}
};

struct Generation {
  std::vector<int> generated;
  double prompt_s = 0, decode_s = 0;  // the prompt's time includes sampling the first new token
  int decode_steps = 0;               // tokens timed for decode: those after the first
  double bytes_per_token = 0;         // the mean over the decode steps (the first one's with none)
  // Each timed decode step's seconds and the bytes it read, in order (decode_s and
  // bytes_per_token are their sum and mean).
  std::vector<double> step_s, step_bytes;
  double decode_tok_s() const { return decode_s > 0 ? decode_steps / decode_s : 0; }
};

// Runs `prompt`, then generates until `n` tokens or until emit(token) returns false,
// calling emit on each new token as it comes. Decode is timed after the first new
// token, its steps only (not between_steps). Throws std::invalid_argument for an empty prompt.
Generation generate(TokenSteps& steps, const std::vector<int>& prompt, int n, const std::function<bool(int)>& emit);

}  // namespace qmv
