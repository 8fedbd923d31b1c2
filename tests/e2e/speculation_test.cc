// Prompt-lookup speculation through the real processes: the decode worker
// started with --speculative prompt-lookup streams exactly what the engine
// gives without speculation, Usage reports the tokens proposed and kept, the
// metrics count them, and a request may turn it off.
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "engine/engine.h"
#include "engine/model/model.h"
#include "tests/e2e/reference.h"
#include "tests/e2e/stack.h"

namespace tandem::testing {
namespace {

std::string StoriesPath() { return std::string(TANDEM_SHARED_MODELS_DIR) + "/stories260K.gguf"; }

constexpr char kRepetitive[] =
    "Lily went to the park. She saw a big red ball. She wanted to play with the ball. "
    "Lily went to the park. She saw a big red ball. She wanted to play with the ball. "
    "Lily went to the park. She saw a big red ball.";

TEST(SpeculationTest, TheStreamIsUnchangedAndUsageCountsTheProposals) {
  StackOptions options;
  options.model = StoriesPath();
  options.worker_flags = {"--speculative=prompt-lookup", "--spec-k=4"};
  std::unique_ptr<Stack> stack = Stack::Start(options);
  ASSERT_NE(stack, nullptr);
  auto model = engine::Model::Load(StoriesPath());
  ASSERT_TRUE(model.ok());
  for (float temperature : {0.0f, 0.8f}) {
    tandem::v1::GenerateRequest req;
    req.set_prompt(kRepetitive);
    req.set_max_tokens(96);
    req.set_top_logprobs(2);
    req.mutable_sampling()->set_temperature(temperature);
    req.mutable_sampling()->set_seed(5);
    const Completion c = Generate(stack->gateway(), req);
    ASSERT_TRUE(c.status.ok()) << c.status.error_message();
    engine::GenerationRequest r;
    r.max_tokens = 96;
    r.top_logprobs = 2;
    r.sampling.temperature = temperature;
    r.sampling.seed = 5;
    const std::vector<engine::TokenEvent> want = EngineReference(**model, kRepetitive, r);
    ASSERT_EQ(c.tokens.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_EQ(c.tokens[i].id(), want[i].token.id) << i;
      EXPECT_NEAR(c.tokens[i].logprob(), want[i].token.logprob, 1e-4) << i;
    }
    EXPECT_GT(c.usage.speculative_proposed_tokens(), 0) << temperature;
    EXPECT_GT(c.usage.speculative_accepted_tokens(), 0) << temperature;
    EXPECT_LE(c.usage.speculative_accepted_tokens(), c.usage.speculative_proposed_tokens());
  }
  EXPECT_GT(MetricValue(stack->decode_info().metrics_address,
                        "tandem_speculative_accepted_tokens_total{method=\"prompt_lookup\"}"),
            0);
  tandem::v1::GenerateRequest off;
  off.set_prompt(kRepetitive);
  off.set_max_tokens(32);
  off.mutable_sampling()->set_speculation(tandem::v1::SPECULATION_OFF);
  const Completion c = Generate(stack->gateway(), off);
  ASSERT_TRUE(c.status.ok());
  EXPECT_EQ(c.usage.speculative_proposed_tokens(), 0);
  EXPECT_TRUE(stack->Stop());
}

}  // namespace
}  // namespace tandem::testing
