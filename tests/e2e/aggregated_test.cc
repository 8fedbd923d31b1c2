// Aggregated mode and conditional disaggregation, with the real binaries: a
// gateway with no prefill worker has its decode workers prefill every
// request (and resume a stream whose worker died), and with prefill workers
// a request whose decode worker holds all but a few of its prompt tokens is
// prefilled there. Every stream equals the in-process engine's.
#include <signal.h>

#include <chrono>
#include <memory>
#include <vector>

#include <gtest/gtest.h>

#include "tests/e2e/stack.h"
#include "tests/e2e/synthetic.h"

namespace tandem::testing {
namespace {

constexpr char kLocalPrefills[] = "tandem_local_prefills_total";

// Two decode workers and a gateway with no prefill worker, synced; null on
// a failure (reported).
std::unique_ptr<Stack> StartAggregated() {
  StackOptions o;
  o.model = ModelPath();
  o.prefill_workers = 0;
  o.decode_workers = 2;
  auto stack = Stack::Start(o);
  if (stack == nullptr) return nullptr;
  EXPECT_TRUE(stack->AwaitGatewaySynced());
  return stack;
}

TEST(AggregatedTest, DecodeWorkersAloneServeEveryRequest) {
  auto stack = StartAggregated();
  ASSERT_NE(stack, nullptr);
  constexpr int kRequests = 6;
  for (int i = 0; i < kRequests; ++i) {
    const std::vector<int32_t> ids = Prompt(40, 8, i);
    const Completion c = Generate(stack->gateway(), Request(ids, 12));
    ExpectMatches(c, Reference(ids, 12));
    EXPECT_EQ(c.usage.prompt_tokens(), static_cast<int32_t>(ids.size()));
  }
  const std::string gateway = stack->gateway_info().metrics_address;
  EXPECT_EQ(MetricValue(gateway, kLocalPrefills), kRequests);
  // Prompts sharing 40 tokens: the second one on a worker found them cached.
  EXPECT_GT(MetricValue(stack->decode_info(0).metrics_address,
                        "tandem_prefix_cache_hit_tokens_total{tier=\"device\"}") +
                MetricValue(stack->decode_info(1).metrics_address,
                            "tandem_prefix_cache_hit_tokens_total{tier=\"device\"}"),
            0);
  EXPECT_TRUE(stack->Stop());
}

// The stream's decode worker is killed mid-stream: the other one prefills
// the prompt and the tokens so far, and the stream goes on unchanged.
TEST(AggregatedTest, AStreamWhoseWorkerDiesResumesOnTheOther) {
  auto stack = StartAggregated();
  ASSERT_NE(stack, nullptr);
  const std::vector<int32_t> ids = Prompt(40, 8, 11);
  constexpr int32_t kTokens = 1500;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
  auto reader = stack->gateway().Generate(&ctx, Request(ids, kTokens));
  Completion c;
  tandem::v1::GenerateResponse resp;
  bool killed = false;
  while (reader->Read(&resp)) {
    for (const auto& t : resp.tokens()) c.tokens.push_back(t);
    if (resp.finish_reason() != tandem::v1::FINISH_REASON_UNSPECIFIED) c.usage = resp.usage();
    if (!killed && c.tokens.size() >= 3) {
      killed = true;
      const int busy = BusyDecodeWorker(*stack, 2);
      ASSERT_GE(busy, 0);
      stack->decode_process(busy).Signal(SIGSTOP);  // cannot finish the stream first
      stack->decode_process(busy).Signal(SIGKILL);
    }
  }
  c.status = reader->Finish();
  ExpectMatches(c, Reference(ids, kTokens));
  EXPECT_EQ(c.usage.migrations(), 1);
  // The request's own prefill and the resumption's, both on decode workers.
  EXPECT_EQ(MetricValue(stack->gateway_info().metrics_address, kLocalPrefills), 2);
  stack->Stop();  // the killed worker exits by SIGKILL, not 0
}

// The prompt logprobs of a request, read from its stream.
std::vector<tandem::v1::Token> PromptLogprobs(tandem::v1::Generation::Stub& stub,
                                              const tandem::v1::GenerateRequest& req) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  auto reader = stub.Generate(&ctx, req);
  std::vector<tandem::v1::Token> out;
  tandem::v1::GenerateResponse resp;
  while (reader->Read(&resp)) {
    out.insert(out.end(), resp.prompt_logprobs().begin(), resp.prompt_logprobs().end());
  }
  EXPECT_TRUE(reader->Finish().ok());
  return out;
}

// Prompt logprobs computed by the decode worker equal a prefill worker's.
TEST(AggregatedTest, PromptLogprobsAreThoseAPrefillWorkerReports) {
  const std::vector<int32_t> ids = Prompt(20, 10, 5);
  tandem::v1::GenerateRequest req = Request(ids, 4);
  req.set_prompt_logprobs(3);
  std::vector<std::vector<tandem::v1::Token>> got;
  for (const int prefill_workers : {0, 1}) {
    StackOptions o;
    o.model = ModelPath();
    o.prefill_workers = prefill_workers;
    auto stack = Stack::Start(o);
    ASSERT_NE(stack, nullptr);
    got.push_back(PromptLogprobs(stack->gateway(), req));
    EXPECT_TRUE(stack->Stop());
  }
  ASSERT_EQ(got[0].size(), ids.size() - 1);
  ASSERT_EQ(got[1].size(), ids.size() - 1);
  for (size_t i = 0; i < got[0].size(); ++i) {
    EXPECT_EQ(got[0][i].id(), ids[i + 1]);
    EXPECT_EQ(got[0][i].id(), got[1][i].id());
    EXPECT_NEAR(got[0][i].logprob(), got[1][i].logprob(), 1e-4) << i;
    ASSERT_EQ(got[0][i].top_logprobs_size(), got[1][i].top_logprobs_size());
  }
}

// With a prefill worker: a prompt resent with a few new tokens, whose
// decode worker holds the rest, is prefilled there; a new prompt is not.
TEST(AggregatedTest, AFewUncachedTokensArePrefilledOnTheDecodeWorker) {
  StackOptions o;
  o.model = ModelPath();
  o.gateway_flags = {"--local-prefill-tokens", "32"};
  auto stack = Stack::Start(o);
  ASSERT_NE(stack, nullptr);
  ASSERT_TRUE(stack->AwaitGatewaySynced());
  const std::string gateway = stack->gateway_info().metrics_address;
  std::vector<int32_t> ids = Prompt(96, 0, 3);
  const Completion first = Generate(stack->gateway(), Request(ids, 8));
  ExpectMatches(first, Reference(ids, 8));
  EXPECT_EQ(MetricValue(gateway, kLocalPrefills), 0);  // 96 tokens, none cached
  // The gateway learns the workers' blocks from their events: the
  // prompt's 6 full blocks on each of the two.
  ASSERT_GE(AwaitMetric(gateway, "tandem_block_index_size", [](double v) { return v >= 12; },
                        absl::Seconds(30)),
            12);
  for (int i = 0; i < 8; ++i) ids.push_back(3 + i * 17);
  const Completion second = Generate(stack->gateway(), Request(ids, 8));
  ExpectMatches(second, Reference(ids, 8));
  EXPECT_EQ(MetricValue(gateway, kLocalPrefills), 1);
  EXPECT_GT(second.usage.cached_prompt_tokens(), 0);
  EXPECT_TRUE(stack->Stop());
}

}  // namespace
}  // namespace tandem::testing
