// tandem-load's arithmetic: percentiles, the summary, the JSON line, the
// seeded prompts with their shared prefixes, and multi-turn conversations
// against a stand-in gateway (bench/load_stats.h, bench/load_runner.h).
#include "bench/load_stats.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>

#include <grpcpp/grpcpp.h>

#include "absl/synchronization/mutex.h"
#include "bench/load_http.h"
#include "bench/load_runner.h"
#include "rpc/bootstrap.h"

namespace tandem::bench {
namespace {

using ::testing::HasSubstr;

TEST(PercentileTest, NearestRank) {
  EXPECT_EQ(Percentile({}, 50), 0);
  EXPECT_EQ(Percentile({7}, 99), 7);
  std::vector<double> v;
  for (int i = 100; i >= 1; --i) v.push_back(i);  // unsorted on purpose
  EXPECT_EQ(Percentile(v, 50), 50);
  EXPECT_EQ(Percentile(v, 99), 99);
  EXPECT_EQ(Percentile(v, 100), 100);
  EXPECT_EQ(Percentile(v, 0), 1);
  EXPECT_EQ(Percentile({1, 2, 3}, 50), 2);
}

RequestResult Result(absl::StatusCode code, double ttft_s, std::vector<double> itl_s,
                     int64_t output_tokens) {
  RequestResult r;
  r.code = code;
  r.ttft_s = ttft_s;
  r.itl_s = std::move(itl_s);
  r.output_tokens = output_tokens;
  return r;
}

TEST(RecordMessageTest, SharesEachGapAmongTheMessagesTokens) {
  RequestResult r;
  RecordMessage(0.5, 0, r);  // no tokens: ignored
  EXPECT_EQ(r.ttft_s, -1);
  RecordMessage(1.0, 2, r);  // first token at 1.0 s, and one more with it
  RecordMessage(1.3, 3, r);  // 0.3 s later, three tokens
  RecordMessage(1.5, 1, r);
  EXPECT_DOUBLE_EQ(r.ttft_s, 1.0);
  EXPECT_EQ(r.output_tokens, 6);
  EXPECT_EQ(r.messages, 3);
  ASSERT_EQ(r.itl_s.size(), 5u);  // one per token after the first
  EXPECT_EQ(r.itl_s[0], 0.0);
  EXPECT_NEAR(r.itl_s[1], 0.1, 1e-12);
  EXPECT_NEAR(r.itl_s[3], 0.1, 1e-12);
  EXPECT_NEAR(r.itl_s[4], 0.2, 1e-12);
  double sum = 0;
  for (double v : r.itl_s) sum += v;
  EXPECT_NEAR(sum, 1.5 - 1.0, 1e-12);  // last token - first token
}

TEST(SummarizeTest, CountsTokensErrorsAndLatencies) {
  RequestResult a = Result(absl::StatusCode::kOk, 0.1, {0.01, 0.0, 0.03}, 4);
  a.messages = 2;
  a.prompt_tokens = 10;
  a.cached_prompt_tokens = 8;
  RequestResult b = Result(absl::StatusCode::kOk, 0.3, {0.02}, 2);
  b.messages = 2;
  b.prompt_tokens = 10;
  const RequestResult failed = Result(absl::StatusCode::kResourceExhausted, -1, {}, 0);
  const RequestResult cut = Result(absl::StatusCode::kUnavailable, 0.2, {}, 1);
  LoadShape shape;
  shape.addr = "x:1";
  shape.requests = 4;
  const LoadSummary s = Summarize(shape, {a, b, failed, cut}, 2.0);
  EXPECT_EQ(s.ok, 2);
  EXPECT_EQ(s.errors.at("RESOURCE_EXHAUSTED"), 1);
  EXPECT_EQ(s.errors.at("UNAVAILABLE"), 1);
  EXPECT_EQ(s.output_tokens, 7);
  EXPECT_DOUBLE_EQ(s.output_tokens_per_s, 3.5);
  EXPECT_DOUBLE_EQ(s.tokens_per_message, 7.0 / 4);
  EXPECT_EQ(s.cached_prompt_tokens, 8);
  EXPECT_EQ(s.prompt_tokens, 20);
  EXPECT_DOUBLE_EQ(s.ttft_p50_s, 0.2);
  EXPECT_DOUBLE_EQ(s.ttft_p99_s, 0.3);
  EXPECT_DOUBLE_EQ(s.itl_p50_s, 0.01);
  EXPECT_DOUBLE_EQ(s.itl_p99_s, 0.03);

  const std::string json = FormatJson(s);
  EXPECT_EQ(json.front(), '{');
  EXPECT_EQ(json.back(), '}');
  EXPECT_EQ(json.find('\n'), std::string::npos);
  EXPECT_THAT(json, HasSubstr("\"errors\": {\"RESOURCE_EXHAUSTED\": 1, \"UNAVAILABLE\": 1}"));
  EXPECT_THAT(json, HasSubstr("\"output_tokens_per_s\": 3.5"));
  EXPECT_THAT(json, HasSubstr("\"ttft_p99_s\": 0.3"));
  const std::string table = FormatTable(s);
  EXPECT_THAT(table, HasSubstr("TTFT"));
  EXPECT_THAT(table, HasSubstr("errors: RESOURCE_EXHAUSTED=1, UNAVAILABLE=1"));
}

// A's gaps that overlap B's prefill (its send to its first token) are
// stalls; A's gap before B was sent and B's gap after A's prefill are not.
TEST(SummarizeTest, StallsAreTheGapsOverlappingAnotherRequestsPrefill) {
  RequestResult a, b;
  for (const double at : {1.0, 2.0, 3.0, 5.0}) RecordMessage(at, 1, a);
  b.sent_s = 2.5;
  for (const double at : {2.0, 3.0}) RecordMessage(at, 2, b);  // prefill [2.5, 4.5]
  EXPECT_THAT(StallGaps({a, b}), ::testing::ElementsAre(1.0, 2.0));
  const LoadSummary s = Summarize({}, {a, b}, 6.0);
  EXPECT_EQ(s.stalls, 2);
  EXPECT_EQ(s.stall_p50_s, 1.0);
  EXPECT_EQ(s.stall_max_s, 2.0);
  EXPECT_THAT(FormatTable(s), HasSubstr("stall in others' prefill"));
  EXPECT_THAT(FormatJson(s), HasSubstr("\"stall_p99_s\": 2"));
  // Alone, a request never stalls on its own prefill.
  EXPECT_TRUE(StallGaps({a}).empty());
}

// Tandem's front says how many tokens an event carries (logprobs 0 still
// lists them); llama-server's events carry null logprobs and one token's
// text each.
TEST(TokensInEventTest, CountsListedTokensElseOnePerEventWithText) {
  EXPECT_EQ(TokensInEvent(R"({"choices":[{"text":"ab","logprobs":{"tokens":["a","b"]}}]})"),
            2);
  EXPECT_EQ(TokensInEvent(R"({"choices":[{"text":" park","logprobs":null}]})"), 1);
  EXPECT_EQ(TokensInEvent(R"({"choices":[{"text":"","finish_reason":"length"}]})"), 0);
  EXPECT_EQ(TokensInEvent(R"({"choices":[],"usage":{"completion_tokens":5}})"), 0);
  EXPECT_EQ(TokensInEvent("not json"), 0);
}

TEST(SummarizeTest, NoErrorsReadsNone) {
  const LoadSummary s =
      Summarize(LoadShape(), {Result(absl::StatusCode::kOk, 0.1, {}, 1)}, 1.0);
  EXPECT_THAT(FormatJson(s), HasSubstr("\"errors\": {}"));
  EXPECT_THAT(FormatTable(s), HasSubstr("errors: none"));
}

TEST(MakePromptsTest, SharedPrefixThenSeededRandomIdsInRange) {
  const PromptOptions o{.requests = 5, .prompt_tokens = 40, .shared_prefix_tokens = 16,
                        .vocab_size = 50, .seed = 7};
  const auto prompts = MakePrompts(o);
  ASSERT_EQ(prompts.size(), 5u);
  for (const auto& p : prompts) {
    ASSERT_EQ(p.size(), 40u);
    EXPECT_TRUE(std::equal(p.begin(), p.begin() + 16, prompts[0].begin()));
    for (int32_t id : p) {
      EXPECT_GE(id, kFirstPromptId);
      EXPECT_LT(id, 50);
    }
  }
  EXPECT_FALSE(std::equal(prompts[0].begin() + 16, prompts[0].end(), prompts[1].begin() + 16));
  EXPECT_EQ(MakePrompts(o), prompts);
  PromptOptions other = o;
  other.seed = 8;
  EXPECT_NE(MakePrompts(other), prompts);
  // The same prefix seed: the same prefix, other questions.
  other.prefix_seed = 7;
  const auto asked_again = MakePrompts(other);
  EXPECT_TRUE(std::equal(prompts[0].begin(), prompts[0].begin() + 16, asked_again[0].begin()));
  EXPECT_FALSE(std::equal(prompts[0].begin() + 16, prompts[0].end(), asked_again[0].begin() + 16));
}

TEST(MakePromptsTest, EachGroupHasItsOwnSharedPrefix) {
  const PromptOptions o{.requests = 6, .prompt_tokens = 30, .shared_prefix_tokens = 20,
                        .prefix_groups = 3, .vocab_size = 500, .seed = 7};
  const auto prompts = MakePrompts(o);
  ASSERT_EQ(prompts.size(), 6u);
  for (size_t i = 0; i < prompts.size(); ++i) {
    const auto& same = prompts[(i + 3) % 6];  // the other prompt of its group
    EXPECT_TRUE(std::equal(prompts[i].begin(), prompts[i].begin() + 20, same.begin())) << i;
    const auto& other = prompts[(i + 1) % 6];
    EXPECT_FALSE(std::equal(prompts[i].begin(), prompts[i].begin() + 20, other.begin())) << i;
  }
}

// A gateway stand-in that answers every Generate with two tokens (ids from
// the prompt's length) and records the prompts it saw.
class EchoGeneration final : public v1::Generation::Service {
 public:
  grpc::Status Generate(grpc::ServerContext*, const v1::GenerateRequest* req,
                        grpc::ServerWriter<v1::GenerateResponse>* writer) override {
    {
      absl::MutexLock lock(&mu_);
      prompts_.emplace_back(req->prompt_token_ids().begin(), req->prompt_token_ids().end());
    }
    v1::GenerateResponse resp;
    resp.add_tokens()->set_id(3 + req->prompt_token_ids_size() % 90);
    resp.add_tokens()->set_id(4 + req->prompt_token_ids_size() % 90);
    resp.set_finish_reason(v1::FINISH_REASON_LENGTH);
    resp.mutable_usage()->set_prompt_tokens(req->prompt_token_ids_size());
    writer->Write(resp);
    return grpc::Status::OK;
  }
  std::vector<std::vector<int32_t>> prompts() const {
    absl::MutexLock lock(&mu_);
    return prompts_;
  }

 private:
  mutable absl::Mutex mu_;
  std::vector<std::vector<int32_t>> prompts_;
};

TEST(RunLoadTest, EachTurnResendsTheConversationWithTheReplyAndNewIds) {
  EchoGeneration service;
  auto server = rpc::StartGrpcServer({}, {&service});
  ASSERT_TRUE(server.ok()) << server.status();
  auto stub = v1::Generation::NewStub(
      grpc::CreateChannel(server->address, grpc::InsecureChannelCredentials()));
  const std::vector<std::vector<int32_t>> prompts = {{5, 6, 7}, {8, 9}};
  const RunOptions o{.model = "m", .concurrency = 2, .max_tokens = 2,
                     .request_timeout = absl::Seconds(30), .turns = 3, .turn_tokens = 4,
                     .vocab_size = 100, .seed = 11};
  const RunResult run = RunLoad(*stub, prompts, o);
  ASSERT_EQ(run.requests.size(), 6u);
  for (const RequestResult& r : run.requests) EXPECT_EQ(r.code, absl::StatusCode::kOk);
  std::vector<std::vector<int32_t>> seen = service.prompts();
  ASSERT_EQ(seen.size(), 6u);
  for (size_t c = 0; c < prompts.size(); ++c) {
    std::vector<int32_t> want = prompts[c];
    for (int32_t t = 0; t < 3; ++t) {
      if (t > 0) {
        const std::vector<int32_t> more = TurnTokens(o, c, t);
        EXPECT_EQ(more.size(), 4u);
        want.insert(want.end(), more.begin(), more.end());
      }
      EXPECT_EQ(run.requests[c * 3 + t].prompt_tokens, static_cast<int64_t>(want.size()));
      EXPECT_NE(std::find(seen.begin(), seen.end(), want), seen.end())
          << "conversation " << c << " turn " << t;
      const int32_t n = static_cast<int32_t>(want.size());
      want.push_back(3 + n % 90);  // the reply
      want.push_back(4 + n % 90);
    }
  }
  server->server->Shutdown();
}

}  // namespace
}  // namespace tandem::bench
