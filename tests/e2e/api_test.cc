// The request controls of the public API end to end, over real processes
// (gateway -> prefill -> decode, stories260K): unseeded sampling draws a
// seed per request and reports it; penalties, logit_bias, min_tokens and
// stop_token_ids reach both workers and give what the in-process engine
// gives; an unset max_tokens runs to the gateway's default cap; request ids
// are echoed; prompt logprobs come with the first message; Detokenize
// inverts Tokenize; ListModels reports the workers' context, and a gateway
// whose own exceeds it is not SERVING.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "engine/engine.h"
#include "engine/model/model.h"
#include "rpc/health.h"
#include "tests/e2e/reference.h"
#include "tests/e2e/stack.h"
#include "tests/engine/test_models.h"
#include "tests/test_paths.h"

namespace tandem::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

using tandem::test_paths::StoriesPath;

constexpr int32_t kDefaultMaxTokens = 7;

class ApiTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    StackOptions options;
    options.model = StoriesPath();
    // Prompts go through the prefill worker, whose cache the n-choices test
    // reads (short prompts would be the decode worker's otherwise).
    options.gateway_flags = {absl::StrCat("--default-max-tokens=", kDefaultMaxTokens),
                             "--local-prefill-tokens=0"};
    stack_ = Stack::Start(options).release();
    ASSERT_NE(stack_, nullptr);
    model_ = engine::Model::Load(StoriesPath())->release();
  }
  static void TearDownTestSuite() {
    if (stack_ != nullptr) {
      EXPECT_TRUE(stack_->Stop());
    }
    delete stack_;
    delete model_;
  }

  static std::vector<int32_t> Ids(const Completion& c) {
    std::vector<int32_t> ids;
    for (const auto& t : c.tokens) ids.push_back(t.id());
    return ids;
  }

  // The in-process engine's tokens for the same prompt and sampling.
  static std::vector<engine::TokenEvent> Reference(const std::string& prompt,
                                                   const engine::SamplingParams& sampling,
                                                   int32_t max_tokens) {
    engine::GenerationRequest r;
    r.max_tokens = max_tokens;
    r.top_logprobs = 2;
    r.sampling = sampling;
    return EngineReference(*model_, prompt, r);
  }

  static Stack* stack_;
  static engine::Model* model_;
};
Stack* ApiTest::stack_ = nullptr;
engine::Model* ApiTest::model_ = nullptr;

TEST_F(ApiTest, UnseededSamplingDrawsASeedThatReproducesTheResult) {
  tandem::v1::GenerateRequest req;
  req.set_prompt("Once upon a time");
  req.set_max_tokens(24);
  req.set_ignore_eos(true);
  req.mutable_sampling()->set_temperature(1.0f);
  const Completion a = Generate(stack_->gateway(), req);
  const Completion b = Generate(stack_->gateway(), req);
  ASSERT_TRUE(a.status.ok() && b.status.ok()) << a.status.error_message();
  EXPECT_NE(a.seed, b.seed);
  EXPECT_NE(Ids(a), Ids(b));
  req.mutable_sampling()->set_seed(a.seed);
  const Completion again = Generate(stack_->gateway(), req);
  ASSERT_TRUE(again.status.ok());
  EXPECT_EQ(again.seed, a.seed);
  EXPECT_EQ(Ids(again), Ids(a));
  // Seed 0 is a seed like any other.
  req.mutable_sampling()->set_seed(0);
  const Completion zero = Generate(stack_->gateway(), req);
  EXPECT_EQ(zero.seed, 0u);
  EXPECT_EQ(Ids(Generate(stack_->gateway(), req)), Ids(zero));
}

TEST_F(ApiTest, LogitAdjustmentsReachBothWorkersAndMatchTheEngine) {
  engine::SamplingParams sampling;
  sampling.temperature = 0.8f;
  sampling.seed = 1234;
  sampling.frequency_penalty = 0.8f;
  sampling.presence_penalty = 0.4f;
  sampling.repetition_penalty = 1.2f;
  sampling.logit_bias = {{.id = 13, .bias = 2.0f}, {.id = 403, .bias = -100.0f}};
  sampling.min_tokens = 3;
  tandem::v1::GenerateRequest req;
  req.set_prompt("Once upon a time");
  req.set_max_tokens(32);
  req.set_top_logprobs(2);
  tandem::v1::SamplingParams* s = req.mutable_sampling();
  s->set_temperature(sampling.temperature);
  s->set_seed(sampling.seed);
  s->set_frequency_penalty(sampling.frequency_penalty);
  s->set_presence_penalty(sampling.presence_penalty);
  s->set_repetition_penalty(sampling.repetition_penalty);
  for (const engine::LogitBias& b : sampling.logit_bias) (*s->mutable_logit_bias())[b.id] = b.bias;
  s->set_min_tokens(sampling.min_tokens);
  const Completion c = Generate(stack_->gateway(), req);
  ASSERT_TRUE(c.status.ok()) << c.status.error_message();
  const std::vector<engine::TokenEvent> ref = Reference("Once upon a time", sampling, 32);
  ASSERT_EQ(c.tokens.size(), ref.size());
  for (size_t i = 0; i < ref.size(); ++i) {
    EXPECT_EQ(c.tokens[i].id(), ref[i].token.id) << i;
    EXPECT_NEAR(c.tokens[i].logprob(), ref[i].token.logprob, 1e-4) << i;
    EXPECT_NE(c.tokens[i].id(), 403) << i;
  }
  // Without the adjustments the same seed gives something else.
  tandem::v1::GenerateRequest plain = req;
  plain.mutable_sampling()->clear_frequency_penalty();
  plain.mutable_sampling()->clear_presence_penalty();
  plain.mutable_sampling()->clear_repetition_penalty();
  plain.mutable_sampling()->clear_logit_bias();
  EXPECT_NE(Ids(Generate(stack_->gateway(), plain)), Ids(c));
}

TEST_F(ApiTest, StopTokenIdsEndTheStreamWithStop) {
  tandem::v1::GenerateRequest req;
  req.set_prompt("Once upon a time");
  req.set_max_tokens(32);
  const Completion free_run = Generate(stack_->gateway(), req);
  ASSERT_TRUE(free_run.status.ok());
  ASSERT_GT(free_run.tokens.size(), 6u);
  const int32_t stop = free_run.tokens[5].id();
  size_t first = 0;
  while (free_run.tokens[first].id() != stop) ++first;
  req.mutable_sampling()->add_stop_token_ids(stop);
  const Completion c = Generate(stack_->gateway(), req);
  ASSERT_TRUE(c.status.ok()) << c.status.error_message();
  EXPECT_EQ(c.finish, tandem::v1::FINISH_REASON_STOP);
  ASSERT_EQ(c.tokens.size(), first + 1);
  EXPECT_EQ(c.tokens.back().id(), stop);
  EXPECT_TRUE(WorkersIdle(*stack_, absl::Seconds(30)));
}

TEST_F(ApiTest, UnsetMaxTokensRunsToTheGatewayDefault) {
  tandem::v1::GenerateRequest req;
  req.set_prompt("Once upon a time");
  req.set_ignore_eos(true);
  const Completion c = Generate(stack_->gateway(), req);
  ASSERT_TRUE(c.status.ok()) << c.status.error_message();
  EXPECT_EQ(c.tokens.size(), static_cast<size_t>(kDefaultMaxTokens));
  EXPECT_EQ(c.finish, tandem::v1::FINISH_REASON_LENGTH);
}

TEST_F(ApiTest, RequestIdsAreEchoedOrGenerated) {
  tandem::v1::GenerateRequest req;
  req.set_prompt("Once upon a time");
  req.set_max_tokens(2);
  req.set_request_id("client-7");
  Completion c = Generate(stack_->gateway(), req);
  ASSERT_TRUE(c.status.ok()) << c.status.error_message();
  EXPECT_EQ(c.request_id, "client-7");
  EXPECT_EQ(c.request_id_header, "client-7");
  req.clear_request_id();
  c = Generate(stack_->gateway(), req);
  EXPECT_THAT(c.request_id, StartsWith("req-"));
  EXPECT_EQ(c.request_id_header, c.request_id);
  EXPECT_NE(Generate(stack_->gateway(), req).request_id, c.request_id);
}

TEST_F(ApiTest, PromptLogprobsComeWithTheFirstMessageAsTheEngineComputesThem) {
  // Greedy tokens appended to the prompt: at their positions the prompt
  // logprobs are what generating them reported. 80 prompt tokens: several
  // 64-token chunks, blocks the cache holds (from the first request) unused.
  tandem::v1::GenerateRequest first;
  first.set_prompt("Once upon a time");
  first.set_max_tokens(76);
  first.set_ignore_eos(true);
  first.set_top_logprobs(3);
  const Completion run = Generate(stack_->gateway(), first);
  ASSERT_TRUE(run.status.ok()) << run.status.error_message();
  tandem::v1::GenerateRequest req;
  req.add_prompt_token_ids(1);
  for (int32_t id : {403, 407, 261, 378}) req.add_prompt_token_ids(id);
  for (const auto& t : run.tokens) req.add_prompt_token_ids(t.id());
  req.set_max_tokens(1);
  req.set_prompt_logprobs(3);
  grpc::ClientContext ctx;
  auto reader = stack_->gateway().Generate(&ctx, req);
  tandem::v1::GenerateResponse message;
  ASSERT_TRUE(reader->Read(&message));
  ASSERT_EQ(message.prompt_logprobs_size(), req.prompt_token_ids_size() - 1);
  for (int i = 0; i < message.prompt_logprobs_size(); ++i) {
    EXPECT_EQ(message.prompt_logprobs(i).id(), req.prompt_token_ids(i + 1)) << i;
  }
  for (size_t t = 0; t < run.tokens.size(); ++t) {
    const tandem::v1::Token& p = message.prompt_logprobs(static_cast<int>(4 + t));
    EXPECT_NEAR(p.logprob(), run.tokens[t].logprob(), 1e-4) << t;
    ASSERT_EQ(p.top_logprobs_size(), 3);
    for (int k = 0; k < 3; ++k) {
      EXPECT_EQ(p.top_logprobs(k).id(), run.tokens[t].top_logprobs(k).id()) << t;
    }
    EXPECT_EQ(p.raw(), run.tokens[t].raw());
  }
  while (reader->Read(&message)) {
    EXPECT_EQ(message.prompt_logprobs_size(), 0);  // first message only
  }
  EXPECT_TRUE(reader->Finish().ok());
  // Out of range is named.
  req.set_prompt_logprobs(21);
  const Completion bad = Generate(stack_->gateway(), req);
  EXPECT_EQ(bad.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(bad.status.error_message(), StartsWith("prompt_logprobs"));
}

TEST_F(ApiTest, NChoicesEachAsTheirOwnSeedAndTheLaterOnesReuseThePrompt) {
  tandem::v1::GenerateRequest req;
  req.set_prompt(
      "The old lighthouse keeper climbed the winding stairs every evening, counting the "
      "steps and listening to the sea below.");
  req.set_max_tokens(12);
  req.set_ignore_eos(true);
  req.mutable_sampling()->set_temperature(1.0f);
  req.mutable_sampling()->set_seed(77);
  req.set_n(3);
  grpc::ClientContext ctx;
  auto reader = stack_->gateway().Generate(&ctx, req);
  std::vector<std::vector<int32_t>> ids(3);
  std::vector<tandem::v1::Usage> usage(3);
  std::vector<uint64_t> seeds(3, 0);
  tandem::v1::GenerateResponse message;
  while (reader->Read(&message)) {
    ASSERT_GE(message.index(), 0);
    ASSERT_LT(message.index(), 3);
    if (message.seed() != 0) seeds[message.index()] = message.seed();
    for (const auto& t : message.tokens()) ids[message.index()].push_back(t.id());
    if (message.has_usage()) usage[message.index()] = message.usage();
  }
  ASSERT_TRUE(reader->Finish().ok());
  const int32_t n = usage[0].prompt_tokens();
  ASSERT_GT(n, 16);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(seeds[i], 77u + i);
    EXPECT_EQ(usage[i].completion_tokens(), 12);
    // Each choice is what a single request with its seed gives.
    tandem::v1::GenerateRequest one = req;
    one.set_n(1);
    one.mutable_sampling()->set_seed(77 + i);
    EXPECT_EQ(Ids(Generate(stack_->gateway(), one)), ids[i]) << i;
  }
  EXPECT_NE(ids[0], ids[1]);
  // The later choices started after the first's prefill: its full blocks.
  EXPECT_EQ(usage[1].cached_prompt_tokens(), (n - 1) / 16 * 16);
  EXPECT_EQ(usage[2].cached_prompt_tokens(), (n - 1) / 16 * 16);
  req.set_n(17);
  const Completion bad = Generate(stack_->gateway(), req);
  EXPECT_EQ(bad.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(bad.status.error_message(), StartsWith("n: "));
}

TEST_F(ApiTest, DetokenizeInvertsTokenize) {
  grpc::ClientContext c1;
  tandem::v1::TokenizeRequest treq;
  treq.set_text("Once upon a time");
  tandem::v1::TokenizeResponse ids;
  ASSERT_TRUE(stack_->gateway().Tokenize(&c1, treq, &ids).ok());
  tandem::v1::DetokenizeRequest dreq;
  *dreq.mutable_token_ids() = ids.token_ids();
  dreq.set_skip_special(true);
  grpc::ClientContext c2;
  tandem::v1::DetokenizeResponse text;
  ASSERT_TRUE(stack_->gateway().Detokenize(&c2, dreq, &text).ok());
  EXPECT_EQ(text.text(), "Once upon a time");
  dreq.set_skip_special(false);
  grpc::ClientContext c3;
  ASSERT_TRUE(stack_->gateway().Detokenize(&c3, dreq, &text).ok());
  EXPECT_EQ(text.text(), "<s>Once upon a time");
  dreq.add_token_ids(512);
  grpc::ClientContext c4;
  const grpc::Status bad = stack_->gateway().Detokenize(&c4, dreq, &text);
  EXPECT_EQ(bad.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(bad.error_message(), HasSubstr("token_ids[5]"));
}


int32_t ListedMaxContext(Stack& stack) {
  grpc::ClientContext ctx;
  tandem::v1::ListModelsResponse models;
  EXPECT_TRUE(stack.gateway().ListModels(&ctx, {}, &models).ok());
  return models.models_size() == 1 ? models.models(0).max_context() : -1;
}

rpc::HealthState GatewayHealth(Stack& stack) {
  auto health = rpc::CheckHealth(grpc::CreateChannel(stack.gateway_info().grpc_address,
                                                     grpc::InsecureChannelCredentials()));
  EXPECT_TRUE(health.ok()) << health.status();
  return health.ok() ? *health : rpc::HealthState::kUnknown;
}

// ListModels reports what the workers enforce; a gateway that would accept
// longer sequences than its workers is not SERVING.
TEST(ApiWorkerLimitsTest, ListModelsReportsTheWorkersContextAndMismatchIsUnhealthy) {
  StackOptions agree;
  agree.model = StoriesPath();
  agree.worker_flags = {"--max-context=1024"};
  agree.gateway_flags = {"--max-context=512"};
  std::unique_ptr<Stack> stack = Stack::Start(agree);
  ASSERT_NE(stack, nullptr);
  ASSERT_TRUE(stack->AwaitGatewaySynced());
  EXPECT_EQ(ListedMaxContext(*stack), 512);
  EXPECT_EQ(GatewayHealth(*stack), rpc::HealthState::kServing);
  EXPECT_TRUE(stack->Stop());

  StackOptions disagree = agree;
  disagree.worker_flags = {"--max-context=512"};
  disagree.gateway_flags = {"--max-context=1024"};
  stack = Stack::Start(disagree);
  ASSERT_NE(stack, nullptr);
  ASSERT_TRUE(stack->AwaitGatewaySynced());
  EXPECT_EQ(ListedMaxContext(*stack), 512);
  EXPECT_EQ(GatewayHealth(*stack), rpc::HealthState::kNotServing);
  EXPECT_TRUE(stack->Stop());
}

}  // namespace
}  // namespace tandem::testing
