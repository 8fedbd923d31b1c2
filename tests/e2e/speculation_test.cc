// Prompt-lookup speculation through the real processes: the decode worker
// started with --speculative prompt-lookup streams exactly what the engine
// gives without speculation, Usage reports the tokens proposed and kept, the
// metrics count them, and a request may turn it off; a session's turns
// that roll their window are unchanged by it. With a draft model on both
// workers, the prefill worker ships the draft's KV with the model's and the
// decode worker speculates on it from its first step, computing none of
// the prompt's.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/engine.h"
#include "engine/model/model.h"
#include "engine/model/model_quantizer.h"
#include "tests/e2e/reference.h"
#include "tests/e2e/stack.h"
#include "tests/test_paths.h"

namespace tandem::testing {
namespace {

using tandem::test_paths::StoriesPath;

constexpr char kRepetitive[] =
    "Lily went to the park. She saw a big red ball. She wanted to play with the ball. "
    "Lily went to the park. She saw a big red ball. She wanted to play with the ball. "
    "Lily went to the park. She saw a big red ball.";

// `prompt` through the stack (two top logprobs, greedy or sampled with
// `seed`), expected to stream what the engine gives without speculation.
Completion GenerateLikeTheEngine(
    Stack& stack, const engine::Model& model, const char* prompt, int32_t max_tokens,
    float temperature, uint64_t seed,
    tandem::v1::Speculation speculation = tandem::v1::SPECULATION_DEFAULT) {
  tandem::v1::GenerateRequest req;
  req.set_prompt(prompt);
  req.set_max_tokens(max_tokens);
  req.set_top_logprobs(2);
  req.mutable_sampling()->set_temperature(temperature);
  req.mutable_sampling()->set_seed(seed);
  req.mutable_sampling()->set_speculation(speculation);
  const Completion c = Generate(stack.gateway(), req);
  if (!c.status.ok()) return c;
  engine::GenerationRequest r;
  r.max_tokens = max_tokens;
  r.top_logprobs = 2;
  r.sampling.temperature = temperature;
  r.sampling.seed = seed;
  const std::vector<engine::TokenEvent> want = EngineReference(model, prompt, r);
  EXPECT_EQ(c.tokens.size(), want.size()) << "temperature " << temperature;
  for (size_t i = 0; i < std::min(want.size(), c.tokens.size()); ++i) {
    EXPECT_EQ(c.tokens[i].id(), want[i].token.id) << i;
    EXPECT_NEAR(c.tokens[i].logprob(), want[i].token.logprob, 1e-4) << i;
  }
  return c;
}

TEST(SpeculationTest, TheStreamIsUnchangedAndUsageCountsTheProposals) {
  StackOptions options;
  options.model = StoriesPath();
  options.worker_flags = {"--speculative=prompt-lookup", "--spec-k=4"};
  std::unique_ptr<Stack> stack = Stack::Start(options);
  ASSERT_NE(stack, nullptr);
  auto model = engine::Model::Load(StoriesPath());
  ASSERT_TRUE(model.ok());
  for (float temperature : {0.0f, 0.8f}) {
    const Completion c = GenerateLikeTheEngine(*stack, **model, kRepetitive, 96, temperature, 5);
    ASSERT_TRUE(c.status.ok()) << c.status.error_message();
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

// Stop strings end a choice where they would without speculation, though a
// step may emit several tokens past them, and each of `n` choices (sampled
// with its own seed) is the one a request without speculation gets.
TEST(SpeculationTest, StopStringsAndNChoicesAreUnchanged) {
  StackOptions options;
  options.model = StoriesPath();
  options.worker_flags = {"--speculative=prompt-lookup"};
  std::unique_ptr<Stack> stack = Stack::Start(options);
  ASSERT_NE(stack, nullptr);
  struct Case {
    float temperature;
    int32_t n;
    std::vector<std::string> stop;
  };
  const Case cases[] = {
      {0.0f, 1, {"play with"}}, {0.0f, 1, {"park. She"}}, {0.8f, 3, {"ball.", " went"}}};
  int64_t proposed = 0;
  int stopped = 0;
  for (const Case& c : cases) {
    tandem::v1::GenerateRequest req;
    req.set_prompt(kRepetitive);
    req.set_max_tokens(96);
    req.set_top_logprobs(2);
    req.set_n(c.n);
    req.mutable_sampling()->set_temperature(c.temperature);
    req.mutable_sampling()->set_seed(21);
    for (const std::string& s : c.stop) req.add_stop(s);
    const std::vector<Completion> with = GenerateChoices(stack->gateway(), req);
    req.mutable_sampling()->set_speculation(tandem::v1::SPECULATION_OFF);
    const std::vector<Completion> without = GenerateChoices(stack->gateway(), req);
    ASSERT_EQ(with.size(), static_cast<size_t>(c.n));
    ASSERT_EQ(with.size(), without.size());
    for (size_t i = 0; i < with.size(); ++i) {
      const std::string what = absl::StrCat("temperature ", c.temperature, " choice ", i);
      ExpectSameTokens(with[i], without[i], what);
      EXPECT_EQ(with[i].text, without[i].text) << what;
      EXPECT_EQ(with[i].finish, without[i].finish) << what;
      EXPECT_EQ(with[i].usage.completion_tokens(), without[i].usage.completion_tokens()) << what;
      EXPECT_EQ(without[i].usage.speculative_proposed_tokens(), 0) << what;
      proposed += with[i].usage.speculative_proposed_tokens();
      if (with[i].finish == tandem::v1::FINISH_REASON_STOP) {
        ++stopped;
        for (const std::string& s : c.stop) EXPECT_EQ(with[i].text.find(s), std::string::npos);
      }
    }
  }
  // Proposals were made, and stop strings ended choices (greedy ones at
  // least: the model repeats its prompt).
  EXPECT_GT(proposed, 0);
  EXPECT_GE(stopped, 2);
  EXPECT_TRUE(stack->Stop());
}

// A session's turn whose reply rolls its window past its 128 tokens, with
// speculation asked for and without, in two sessions of the same turns:
// token for token the same replies, and proposals made and kept.
TEST(SpeculationTest, SessionTurnsRollingTheirWindowAreUnchanged) {
  std::unique_ptr<Stack> stack = Stack::Start(StoriesPath());
  ASSERT_NE(stack, nullptr);
  ASSERT_TRUE(stack->AwaitGatewaySynced());
  std::vector<Completion> replies[2];  // without, with
  for (int speculate = 0; speculate < 2; ++speculate) {
    grpc::ClientContext ctx;
    tandem::v1::CreateSessionRequest create;
    create.set_system_prompt("A story about a cat named Tom.");
    create.mutable_window()->set_max_tokens(128);
    tandem::v1::SessionInfo session;
    ASSERT_TRUE(stack->gateway().CreateSession(&ctx, create, &session).ok());
    for (int turn = 0; turn < 2; ++turn) {
      tandem::v1::ChatRequest req;
      req.set_session_id(session.session_id());
      req.set_message(kRepetitive);
      req.set_max_tokens(turn == 0 ? 24 : 200);
      req.set_ignore_eos(true);
      req.set_top_logprobs(2);
      req.mutable_sampling()->set_temperature(0);
      req.mutable_sampling()->set_speculation(speculate ? tandem::v1::SPECULATION_PROMPT_LOOKUP
                                                        : tandem::v1::SPECULATION_OFF);
      replies[speculate].push_back(Chat(stack->gateway(), req));
      ASSERT_TRUE(replies[speculate].back().status.ok())
          << replies[speculate].back().status.error_message();
    }
  }
  for (size_t turn = 0; turn < 2; ++turn) {
    ExpectSameTokens(replies[1][turn], replies[0][turn], absl::StrCat("turn ", turn));
  }
  // The long reply rolled the window and was speculated.
  EXPECT_EQ(replies[1][1].usage.session_tokens_held(), 128);
  EXPECT_GT(replies[1][1].usage.speculative_proposed_tokens(), 0);
  EXPECT_GT(replies[1][1].usage.speculative_accepted_tokens(), 0);
  EXPECT_EQ(replies[0][1].usage.speculative_proposed_tokens(), 0);
  EXPECT_TRUE(stack->Stop());
}

TEST(SpeculationTest, ADraftModelsKvShipsWithTheHandOff) {
  // The draft: the model quantized to Q4_0 (its picks are right often, not
  // always).
  const std::string draft = ::testing::TempDir() + "/tandem_e2e_stories_q4_0.gguf";
  ASSERT_TRUE(engine::QuantizeModel(StoriesPath(), draft, engine::QuantMix::kQ4_0).ok());
  StackOptions options;
  options.model = StoriesPath();
  options.worker_flags = {"--draft-model=" + draft};
  options.decode_flags = {"--speculative=draft", "--spec-min-gain=0"};
  // Every prompt through the prefill worker and the hand-off.
  options.gateway_flags = {"--local-prefill-tokens=0"};
  std::unique_ptr<Stack> stack = Stack::Start(options);
  ASSERT_NE(stack, nullptr);
  auto model = engine::Model::Load(StoriesPath());
  ASSERT_TRUE(model.ok());
  constexpr char kPrompt[] = "Once upon a time, there was a little girl named Lily. She";
  int64_t prompt_tokens = 0;
  int64_t generated = 0;
  int64_t proposed = 0;
  for (float temperature : {0.0f, 0.8f}) {
    const Completion c = GenerateLikeTheEngine(*stack, **model, kPrompt, 64, temperature, 3);
    ASSERT_TRUE(c.status.ok()) << c.status.error_message();
    EXPECT_GT(c.usage.speculative_proposed_tokens(), 0) << temperature;
    EXPECT_GT(c.usage.speculative_accepted_tokens(), 0) << temperature;
    prompt_tokens += c.usage.prompt_tokens() - c.usage.cached_prompt_tokens();
    generated += static_cast<int64_t>(c.tokens.size());
    proposed += c.usage.speculative_proposed_tokens();
  }
  const std::string& decode = stack->decode_info().metrics_address;
  const std::string& prefill = stack->prefill_info().metrics_address;
  EXPECT_GT(MetricValue(decode, "tandem_speculative_accepted_tokens_total{method=\"draft\"}"), 0);
  EXPECT_EQ(
      MetricValue(decode, "tandem_speculative_proposed_tokens_total{method=\"prompt_lookup\"}"), 0);
  // The prefill worker computed the draft's KV for the prompts (less what
  // its cache held); the decode worker only for the tokens it generated and
  // proposed (tests/engine/draft_speculate_test.cc counts it exactly).
  const std::string computed = "tandem_speculative_draft_computed_tokens_total";
  EXPECT_GE(MetricValue(prefill, computed), static_cast<double>(prompt_tokens));
  EXPECT_LE(MetricValue(decode, computed), static_cast<double>(generated + proposed));
  EXPECT_TRUE(stack->Stop());
}

// A prefill worker computes a prompt's draft KV only for a decode worker
// that will propose with the draft: here the decode worker's default is
// prompt lookup, so it has no room for it (BlockEventBatch.draft_kv_room)
// and the gateway asks for none, except for a request that asks for the
// draft by name. Streams are unchanged either way.
TEST(SpeculationTest, ThePrefillWorkerComputesTheDraftsKvOnlyWhereItIsUsed) {
  const std::string draft = ::testing::TempDir() + "/tandem_e2e_stories_q4_0_wanted.gguf";
  ASSERT_TRUE(engine::QuantizeModel(StoriesPath(), draft, engine::QuantMix::kQ4_0).ok());
  StackOptions options;
  options.model = StoriesPath();
  options.worker_flags = {"--draft-model=" + draft};
  options.decode_flags = {"--speculative=prompt-lookup", "--spec-min-gain=0"};
  options.gateway_flags = {"--local-prefill-tokens=0"};
  std::unique_ptr<Stack> stack = Stack::Start(options);
  ASSERT_NE(stack, nullptr);
  auto model = engine::Model::Load(StoriesPath());
  ASSERT_TRUE(model.ok());
  const std::string& decode = stack->decode_info().metrics_address;
  const std::string& prefill = stack->prefill_info().metrics_address;
  const std::string computed = "tandem_speculative_draft_computed_tokens_total";
  // The gateway has heard what the decode worker wants (until then it asks
  // for the draft's KV).
  ASSERT_TRUE(stack->AwaitGatewaySynced());

  // No method named, and off: the prefill worker's draft computes nothing.
  for (const tandem::v1::Speculation method :
       {tandem::v1::SPECULATION_DEFAULT, tandem::v1::SPECULATION_OFF}) {
    const Completion c = GenerateLikeTheEngine(
        *stack, **model,
        method == tandem::v1::SPECULATION_OFF ? kRepetitive : "Tom had a red ball.", 24, 0.0f, 1,
        method);
    ASSERT_TRUE(c.status.ok()) << c.status.error_message();
  }
  EXPECT_EQ(MetricValue(prefill, computed), 0);
  EXPECT_EQ(MetricValue(decode, computed), 0);

  // The draft by name: its KV ships with the hand-off, and the decode
  // worker proposes with it from its first step.
  const Completion c = GenerateLikeTheEngine(
      *stack, **model, "Once upon a time, there was a little girl named Lily.", 48, 0.0f, 1,
      tandem::v1::SPECULATION_DRAFT);
  ASSERT_TRUE(c.status.ok()) << c.status.error_message();
  EXPECT_GT(c.usage.speculative_accepted_tokens(), 0);
  EXPECT_GE(MetricValue(prefill, computed),
            static_cast<double>(c.usage.prompt_tokens() - c.usage.cached_prompt_tokens()));
  EXPECT_LE(MetricValue(decode, computed),
            static_cast<double>(c.tokens.size()) + c.usage.speculative_proposed_tokens());
  EXPECT_GT(MetricValue(decode, "tandem_speculative_accepted_tokens_total{method=\"draft\"}"), 0);
  EXPECT_TRUE(stack->Stop());
}

}  // namespace
}  // namespace tandem::testing
