// The logit adjustments (penalties, logit_bias, min_tokens) against their
// definitions, and their validation.
#include "engine/sample/logits_processor.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "engine/sample/sampling_params.h"

namespace tandem::engine {
namespace {

TEST(LogitsProcessorTest, InactiveByDefaultAndLeavesTheRowAlone) {
  LogitsProcessor p(SamplingParams{}, std::vector<int32_t>{2});
  EXPECT_FALSE(p.active());
  std::vector<float> row = {1.0f, -2.0f, 3.0f};
  p.ObservePrompt(std::vector<int32_t>{0, 1});
  p.ObserveGenerated(2);
  p.Apply(row);
  EXPECT_EQ(row, (std::vector<float>{1.0f, -2.0f, 3.0f}));
}

TEST(LogitsProcessorTest, FrequencyAndPresenceCountGeneratedTokensOnly) {
  SamplingParams s;
  s.frequency_penalty = 0.5f;
  s.presence_penalty = 0.25f;
  LogitsProcessor p(s, {});
  p.ObservePrompt(std::vector<int32_t>{0, 0, 0});  // the prompt does not count
  p.ObserveGenerated(1);
  p.ObserveGenerated(1);
  p.ObserveGenerated(2);
  std::vector<float> row = {1.0f, 1.0f, 1.0f, 1.0f};
  p.Apply(row);
  EXPECT_FLOAT_EQ(row[0], 1.0f);
  EXPECT_FLOAT_EQ(row[1], 1.0f - 2 * 0.5f - 0.25f);
  EXPECT_FLOAT_EQ(row[2], 1.0f - 0.5f - 0.25f);
  EXPECT_FLOAT_EQ(row[3], 1.0f);
}

TEST(LogitsProcessorTest, RepetitionPenaltyDividesPositiveAndMultipliesNegative) {
  SamplingParams s;
  s.repetition_penalty = 2.0f;
  LogitsProcessor p(s, {});
  p.ObservePrompt(std::vector<int32_t>{0});
  p.ObserveGenerated(1);
  p.ObserveGenerated(1);  // once per distinct token, however often seen
  std::vector<float> row = {4.0f, -4.0f, 4.0f};
  p.Apply(row);
  EXPECT_FLOAT_EQ(row[0], 2.0f);
  EXPECT_FLOAT_EQ(row[1], -8.0f);
  EXPECT_FLOAT_EQ(row[2], 4.0f);
}

TEST(LogitsProcessorTest, BiasAndMinTokensHoldBackEndAndStopTokens) {
  SamplingParams s;
  s.logit_bias = {{.id = 1, .bias = 5.0f}, {.id = 3, .bias = -100.0f}};
  s.min_tokens = 2;
  s.stop_token_ids = {2};
  LogitsProcessor p(s, std::vector<int32_t>{0});
  std::vector<float> row = {1.0f, 1.0f, 1.0f, 1.0f};
  p.Apply(row);
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(row, (std::vector<float>{-inf, 6.0f, -inf, -99.0f}));
  p.ObserveGenerated(1);
  p.ObserveGenerated(1);
  row = {1.0f, 1.0f, 1.0f, 1.0f};
  p.Apply(row);  // two generated: end and stop tokens are back
  EXPECT_EQ(row, (std::vector<float>{1.0f, 6.0f, 1.0f, -99.0f}));
}

TEST(LogitsProcessorTest, IdsOutsideTheRowAreIgnored) {
  SamplingParams s;
  s.logit_bias = {{.id = 7, .bias = 1.0f}};
  s.repetition_penalty = 2.0f;
  LogitsProcessor p(s, {});
  p.ObserveGenerated(9);
  std::vector<float> row = {1.0f};
  p.Apply(row);
  EXPECT_EQ(row, std::vector<float>{1.0f});
}

TEST(ValidateSamplingParamsTest, NamesTheNewFields) {
  auto message = [](SamplingParams s, int32_t n_vocab = 0) {
    return std::string(ValidateSamplingParams(s, n_vocab).message());
  };
  SamplingParams s;
  s.presence_penalty = 2.5f;
  EXPECT_EQ(message(s).rfind("presence_penalty", 0), 0u) << message(s);
  s = {};
  s.frequency_penalty = std::nanf("");
  EXPECT_EQ(message(s).rfind("frequency_penalty", 0), 0u) << message(s);
  s = {};
  s.repetition_penalty = 0.0f;
  EXPECT_EQ(message(s).rfind("repetition_penalty", 0), 0u) << message(s);
  s = {};
  s.logit_bias = {{.id = 1, .bias = 101.0f}};
  EXPECT_EQ(message(s).rfind("logit_bias", 0), 0u) << message(s);
  s.logit_bias = {{.id = 1, .bias = 1.0f}, {.id = 1, .bias = 2.0f}};
  EXPECT_EQ(message(s).rfind("logit_bias", 0), 0u) << message(s);
  s.logit_bias = {{.id = 600, .bias = 1.0f}};
  EXPECT_TRUE(ValidateSamplingParams(s).ok());  // no vocabulary to check against
  EXPECT_EQ(message(s, 512).rfind("logit_bias[0]", 0), 0u) << message(s, 512);
  s = {};
  s.min_tokens = -1;
  EXPECT_EQ(message(s).rfind("min_tokens", 0), 0u) << message(s);
  s = {};
  s.stop_token_ids = {3, -1};
  EXPECT_EQ(message(s).rfind("stop_token_ids[1]", 0), 0u) << message(s);
  s = {};
  s.presence_penalty = -2.0f;
  s.frequency_penalty = 2.0f;
  s.repetition_penalty = 10.0f;
  s.logit_bias = {{.id = 0, .bias = -100.0f}, {.id = 511, .bias = 100.0f}};
  s.min_tokens = 5;
  s.stop_token_ids = {0, 511};
  EXPECT_TRUE(ValidateSamplingParams(s, 512).ok());
}

}  // namespace
}  // namespace tandem::engine
