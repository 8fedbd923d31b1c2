// End to end over real processes: gateway -> prefill -> decode on loopback
// with stories260K. Greedy output equals the in-process engine (what
// `tandem generate` runs), token ids and top-k logprobs alike; concurrent
// streams stay independent; cancelling frees KV on both workers; bad
// requests get INVALID_ARGUMENT naming the field; every process exposes
// Prometheus metrics and gRPC health.
#include <cmath>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "engine/engine.h"
#include "engine/model/model.h"
#include "rpc/health.h"
#include "process/http_get.h"
#include "tests/e2e/reference.h"
#include "tests/e2e/stack.h"
#include "tests/engine/test_models.h"
#include "tests/test_paths.h"

namespace tandem::testing {
namespace {

using ::testing::HasSubstr;

using tandem::test_paths::StoriesPath;

// What the in-process engine (`tandem generate`) produces for the same
// request.
std::vector<engine::TokenEvent> Reference(const engine::Model& model, const std::string& prompt,
                                          int32_t max_tokens, int32_t top_logprobs) {
  engine::GenerationRequest r;
  r.max_tokens = max_tokens;
  r.top_logprobs = top_logprobs;
  return EngineReference(model, prompt, r);
}

class ServingTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    stack_ = Stack::Start(StoriesPath()).release();
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
  static Stack* stack_;
  static engine::Model* model_;
};
Stack* ServingTest::stack_ = nullptr;
engine::Model* ServingTest::model_ = nullptr;

TEST_F(ServingTest, GreedyMatchesInProcessEngineWithLogprobs) {
  tandem::v1::GenerateRequest req;
  req.set_prompt("Once upon a time");
  req.set_max_tokens(64);
  req.set_top_logprobs(5);
  const Completion c = Generate(stack_->gateway(), req);
  ASSERT_TRUE(c.status.ok()) << c.status.error_message();
  EXPECT_EQ(c.text,
            ", there was a little girl named Lily. She loved to play outside in the park. One "
            "day, she saw a big, red ball. She wanted to play with it, but it was too high.\n"
            "Lily's mom said");
  EXPECT_EQ(c.finish, tandem::v1::FINISH_REASON_LENGTH);
  EXPECT_EQ(c.usage.prompt_tokens(), 5);
  EXPECT_EQ(c.usage.completion_tokens(), 64);
  const auto ref = Reference(*model_, "Once upon a time", 64, 5);
  ASSERT_EQ(c.tokens.size(), ref.size());
  for (size_t i = 0; i < ref.size(); ++i) {
    EXPECT_EQ(c.tokens[i].id(), ref[i].token.id) << i;
    EXPECT_NEAR(c.tokens[i].logprob(), ref[i].token.logprob, 1e-5) << i;
    ASSERT_EQ(c.tokens[i].top_logprobs_size(), 5);
    for (int k = 0; k < 5; ++k) {
      EXPECT_EQ(c.tokens[i].top_logprobs(k).id(), ref[i].token.top[k].id) << i << "/" << k;
      EXPECT_NEAR(c.tokens[i].top_logprobs(k).logprob(), ref[i].token.top[k].logprob, 1e-5);
    }
    EXPECT_EQ(c.tokens[i].raw(), model_->tokenizer().TokenBytes(ref[i].token.id));
  }
}

TEST_F(ServingTest, TheSamePromptTwiceReusesItsCachedBlocks) {
  tandem::v1::GenerateRequest req;
  req.set_prompt(
      "The old lighthouse keeper climbed the winding stairs every evening, counting the "
      "steps and listening to the sea below, until one night the lamp would not light.");
  req.set_max_tokens(12);
  req.set_top_logprobs(2);
  const Completion first = Generate(stack_->gateway(), req);
  const Completion second = Generate(stack_->gateway(), req);
  ASSERT_TRUE(first.status.ok() && second.status.ok()) << second.status.error_message();
  const int32_t n = first.usage.prompt_tokens();
  ASSERT_GT(n, 32);
  EXPECT_EQ(first.usage.cached_prompt_tokens(), 0);
  // Whole 16-token blocks, and never the last prompt token.
  EXPECT_EQ(second.usage.cached_prompt_tokens(), (n - 1) / 16 * 16);
  EXPECT_EQ(second.text, first.text);
  ASSERT_EQ(second.tokens.size(), first.tokens.size());
  for (size_t i = 0; i < first.tokens.size(); ++i) {
    EXPECT_EQ(second.tokens[i].id(), first.tokens[i].id());
    EXPECT_NEAR(second.tokens[i].logprob(), first.tokens[i].logprob(), 1e-5);
  }
  auto metrics = process::HttpGet(stack_->prefill_info().metrics_address, "/metrics");
  ASSERT_TRUE(metrics.ok()) << metrics.status();
  EXPECT_THAT(*metrics, HasSubstr("tandem_prefix_cache_hit_tokens_total"));
  EXPECT_THAT(*metrics, HasSubstr("tandem_prefix_cache_queried_tokens_total"));
}

TEST_F(ServingTest, ConcurrentStreamsEachGetTheirOwnOutput) {
  const std::vector<std::string> prompts = {
      "Once upon a time", "The little dog",  "One day, Tom",  "She saw a big",
      "Lily and Ben",     "The sun was hot", "A girl named", "He liked to play"};
  std::vector<Completion> got(prompts.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < prompts.size(); ++i) {
    threads.emplace_back([&, i] {
      tandem::v1::GenerateRequest req;
      req.set_prompt(prompts[i]);
      req.set_max_tokens(24);
      req.set_ignore_eos(true);
      got[i] = Generate(stack_->gateway(), req);
    });
  }
  for (auto& t : threads) t.join();
  for (size_t i = 0; i < prompts.size(); ++i) {
    ASSERT_TRUE(got[i].status.ok()) << got[i].status.error_message();
    const auto ref = Reference(*model_, prompts[i], 24, 0);
    std::vector<int32_t> want, have;
    for (const auto& e : ref) want.push_back(e.token.id);
    for (const auto& t : got[i].tokens) have.push_back(t.id());
    EXPECT_EQ(have, want) << prompts[i];
  }
}

TEST_F(ServingTest, CancelledStreamFreesBlocksOnBothWorkers) {
  grpc::ClientContext ctx;
  tandem::v1::GenerateRequest req;
  req.set_prompt("Once upon a time there was a long story about a little girl who");
  req.set_max_tokens(3000);
  req.set_ignore_eos(true);
  auto reader = stack_->gateway().Generate(&ctx, req);
  tandem::v1::GenerateResponse resp;
  int tokens = 0;
  while (tokens < 5 && reader->Read(&resp)) tokens += resp.tokens_size();
  ASSERT_GE(tokens, 5);
  // Mid-stream, the decode worker holds the sequence's blocks.
  tandem::v1::WorkerStats d;
  grpc::ClientContext sctx;
  ASSERT_TRUE(stack_->decode().GetWorkerStats(&sctx, {}, &d).ok());
  EXPECT_GT(d.kv_blocks_used(), 0);
  ctx.TryCancel();
  while (reader->Read(&resp)) {
  }
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_TRUE(WorkersIdle(*stack_, absl::Seconds(30)));
}

TEST_F(ServingTest, InvalidRequestsNameTheField) {
  auto expect_invalid = [&](tandem::v1::GenerateRequest req, const std::string& field) {
    const Completion c = Generate(stack_->gateway(), req);
    EXPECT_EQ(c.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << field;
    EXPECT_THAT(c.status.error_message(), HasSubstr(field));
    EXPECT_TRUE(c.tokens.empty());
  };
  tandem::v1::GenerateRequest ok;
  ok.set_prompt("Once upon a time");
  ok.set_max_tokens(4);
  auto req = ok;
  req.clear_prompt();
  expect_invalid(req, "prompt");
  req = ok;
  req.set_max_tokens(-1);
  expect_invalid(req, "max_tokens");
  req = ok;
  req.mutable_sampling()->set_presence_penalty(3);
  expect_invalid(req, "sampling.presence_penalty");
  req = ok;
  (*req.mutable_sampling()->mutable_logit_bias())[512] = 1;
  expect_invalid(req, "sampling.logit_bias[0]");
  req = ok;
  req.mutable_sampling()->add_stop_token_ids(-3);
  expect_invalid(req, "sampling.stop_token_ids[0]");
  req = ok;
  req.set_request_id("has space");
  expect_invalid(req, "request_id");
  req = ok;
  req.set_top_logprobs(21);
  expect_invalid(req, "top_logprobs");
  req = ok;
  req.mutable_sampling()->set_temperature(-1);
  expect_invalid(req, "temperature");
  req = ok;
  req.set_model("no-such-model");
  expect_invalid(req, "model");
  req = ok;
  req.clear_prompt();
  req.add_prompt_token_ids(1);
  req.add_prompt_token_ids(512);
  expect_invalid(req, "prompt_token_ids");
  // The servers keep serving.
  const Completion c = Generate(stack_->gateway(), ok);
  EXPECT_TRUE(c.status.ok()) << c.status.error_message();
  EXPECT_EQ(c.tokens.size(), 4u);
}

TEST_F(ServingTest, StopStringsEndTheStreamAndFreeKv) {
  tandem::v1::GenerateRequest req;
  req.set_prompt("Once upon a time");
  req.set_max_tokens(64);
  req.add_stop("Lily");
  const Completion c = Generate(stack_->gateway(), req);
  ASSERT_TRUE(c.status.ok()) << c.status.error_message();
  EXPECT_EQ(c.text, ", there was a little girl named ");
  EXPECT_EQ(c.finish, tandem::v1::FINISH_REASON_STOP);
  EXPECT_TRUE(WorkersIdle(*stack_, absl::Seconds(30)));
}

TEST_F(ServingTest, AMessageLargerThanTheLimitsAllowIsRefusedUnread) {
  // 2 MiB of prompt: over --max-prompt-bytes (1 MiB) and so over the public
  // port's message limit; a 900 KB one is read and refused by validation.
  tandem::v1::GenerateRequest req;
  req.set_prompt(std::string(2 << 20, 'a'));
  req.set_max_tokens(4);
  Completion c = Generate(stack_->gateway(), req);
  EXPECT_EQ(c.status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  req.set_prompt(std::string(900 << 10, 'a'));
  c = Generate(stack_->gateway(), req);
  EXPECT_EQ(c.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(c.status.error_message(), HasSubstr("prompt"));
}

TEST_F(ServingTest, TokenizeAndListModels) {
  grpc::ClientContext c1;
  tandem::v1::TokenizeRequest treq;
  treq.set_text("Once upon a time");
  tandem::v1::TokenizeResponse tresp;
  ASSERT_TRUE(stack_->gateway().Tokenize(&c1, treq, &tresp).ok());
  EXPECT_THAT(std::vector<int32_t>(tresp.token_ids().begin(), tresp.token_ids().end()),
              ::testing::ElementsAre(1, 403, 407, 261, 378));
  grpc::ClientContext c2;
  tandem::v1::ListModelsResponse models;
  ASSERT_TRUE(stack_->gateway().ListModels(&c2, {}, &models).ok());
  ASSERT_EQ(models.models_size(), 1);
  EXPECT_EQ(models.models(0).id(), "stories260K");
  EXPECT_EQ(models.models(0).vocab_size(), 512);
}

TEST_F(ServingTest, EveryProcessServesMetricsAndHealth) {
  // One request so every histogram has a sample.
  tandem::v1::GenerateRequest req;
  req.set_prompt("Once upon a time");
  req.set_max_tokens(8);
  ASSERT_TRUE(Generate(stack_->gateway(), req).status.ok());
  // The client's stream can end before the decode worker's call does.
  EXPECT_EQ(AwaitMetric(stack_->decode_info().metrics_address,
                        "tandem_requests_total{code=\"OK\",method=\"Decode\"}",
                        [](double v) { return v >= 1; }, absl::Seconds(30)),
            1);
  struct Expect {
    const common::ReadyInfo& info;
    std::vector<std::string> names;
  };
  const std::vector<Expect> expects = {
      {stack_->gateway_info(),
       {"tandem_time_to_first_token_seconds_bucket", "tandem_inter_token_latency_seconds_bucket",
        "tandem_e2e_latency_seconds_bucket", "tandem_queue_seconds_bucket",
        "tandem_prompt_tokens_total", "tandem_generated_tokens_total",
        "tandem_requests_total{code=\"OK\",method=\"Generate\"}"}},
      {stack_->prefill_info(),
       {"tandem_kv_transfer_blocks_total{direction=\"sent\"}",
        "tandem_kv_transfer_bytes_total{direction=\"sent\"}", "tandem_kv_transfer_seconds_bucket",
        "tandem_kv_blocks_used", "tandem_kv_blocks_free", "tandem_running_sequences",
        "tandem_waiting_sequences", "tandem_prefill_seconds_bucket"}},
      {stack_->decode_info(),
       {"tandem_kv_transfer_blocks_total{direction=\"received\"}",
        "tandem_kv_transfer_bytes_total{direction=\"received\"}", "tandem_kv_blocks_used",
        "tandem_running_sequences", "tandem_generated_tokens_total",
        "tandem_requests_total{code=\"OK\",method=\"Decode\"}"}},
  };
  for (const Expect& e : expects) {
    auto text = process::HttpGet(e.info.metrics_address, "/metrics");
    ASSERT_TRUE(text.ok()) << text.status();
    for (const std::string& name : e.names) {
      EXPECT_THAT(*text, HasSubstr(name)) << e.info.grpc_address;
    }
    auto health = rpc::CheckHealth(
        grpc::CreateChannel(e.info.grpc_address, grpc::InsecureChannelCredentials()));
    ASSERT_TRUE(health.ok()) << health.status();
    EXPECT_EQ(*health, rpc::HealthState::kServing);
  }
}

}  // namespace
}  // namespace tandem::testing
