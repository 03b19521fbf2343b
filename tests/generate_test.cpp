// The generate loop both backends run (model/generate.h), on a scripted step.
#include "model/generate.h"

#include <gtest/gtest.h>

#include <chrono>
#include <stdexcept>
#include <thread>
#include <vector>

namespace qmv {
namespace {

// Samples token + 1 after each step, and records what it was asked.
class CountingSteps : public TokenSteps {
 public:
  int step(int token, bool sample) override {
    fed.push_back(token);
    sampled.push_back(sample);
    ++position;
    return sample ? token + 1 : -1;
  }
  std::uint64_t bytes_per_token() const override { return 100 + position; }
  void prompt_done() override { prompt_done_at = position; }
  void between_steps() override {
    between_at.push_back(position);
    if (wait_between.count() > 0) std::this_thread::sleep_for(wait_between);
  }

  std::vector<int> fed;
  std::vector<bool> sampled;
  std::vector<int> between_at;
  std::chrono::milliseconds wait_between{0};
  int position = 0, prompt_done_at = -1;
};

TEST(Generate, RunsThePromptSamplesOnceThenOneStepPerToken) {
  CountingSteps steps;
  std::vector<int> emitted;
  const Generation g = generate(steps, {5, 6, 7}, 4, [&](int t) {
    emitted.push_back(t);
    return true;
  });
  EXPECT_EQ(g.generated, (std::vector<int>{8, 9, 10, 11}));
  EXPECT_EQ(emitted, g.generated);
  EXPECT_EQ(steps.fed, (std::vector<int>{5, 6, 7, 8, 9, 10}));
  // Only the prompt's last step samples: a sampler's random state moves once per token.
  EXPECT_EQ(steps.sampled, (std::vector<bool>{false, false, true, true, true, true}));
  EXPECT_EQ(steps.prompt_done_at, 3);
  EXPECT_EQ(g.decode_steps, 3);
  // The mean of what each decode step read, asked before it ran: positions 3, 4, 5.
  EXPECT_DOUBLE_EQ(g.bytes_per_token, 104.0);
  // Each step's bytes and time, in order: their sum and mean are the totals above.
  EXPECT_EQ(g.step_bytes, (std::vector<double>{103, 104, 105}));
  ASSERT_EQ(g.step_s.size(), 3u);
  double sum = 0;
  for (const double s : g.step_s) sum += s;
  EXPECT_DOUBLE_EQ(sum, g.decode_s);
  EXPECT_GE(g.prompt_s, 0.0);
  EXPECT_GE(g.decode_s, 0.0);
}

TEST(Generate, StopsWhereEmitSaysSoAndAfterOneTokenTimesNothing) {
  CountingSteps steps;
  const Generation g = generate(steps, {1}, 10, [](int t) { return t != 3; });
  EXPECT_EQ(g.generated, (std::vector<int>{2, 3}));
  EXPECT_EQ(g.decode_steps, 1);

  CountingSteps one;
  const Generation first = generate(one, {1, 2}, 1, [](int) { return true; });
  EXPECT_EQ(first.generated, (std::vector<int>{3}));
  EXPECT_EQ(first.decode_steps, 0);
  EXPECT_EQ(first.decode_tok_s(), 0.0);
  EXPECT_DOUBLE_EQ(first.bytes_per_token, 102.0);  // the next step's, with no decode step to average
}

TEST(Generate, BetweenStepsRunsBetweenDecodeStepsOutsideTheirTime) {
  CountingSteps steps;
  steps.wait_between = std::chrono::milliseconds(50);
  const Generation g = generate(steps, {1, 2}, 5, [](int) { return true; });
  EXPECT_EQ(g.decode_steps, 4);
  // Between each two decode steps (positions 3..6), never after the prompt or the last.
  EXPECT_EQ(steps.between_at, (std::vector<int>{3, 4, 5}));
  // 150 ms were spent between the steps; the steps themselves take microseconds.
  EXPECT_LT(g.decode_s, 0.075);
}

TEST(Generate, RefusesAnEmptyPrompt) {
  CountingSteps steps;
  EXPECT_THROW(generate(steps, {}, 4, [](int) { return true; }), std::invalid_argument);
  EXPECT_TRUE(steps.fed.empty());
}

}  // namespace
}  // namespace qmv
