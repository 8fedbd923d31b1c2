// The OpenAI-compatible bodies: requests become the GenerateRequest a gRPC
// client would send (defaults, types and unsupported parameters named), and
// GenerateResponse messages become OpenAI's JSON and SSE shapes.
#include "gateway/http/openai_api.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace tandem::gateway::openai {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;
using Json = nlohmann::json;

std::string Error(Endpoint e, const std::string& body) {
  absl::StatusOr<Request> r = ParseRequest(e, body);
  EXPECT_FALSE(r.ok()) << body;
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(r.status().message());
}

TEST(OpenAiParseTest, CompletionDefaultsFollowOpenAi) {
  absl::StatusOr<Request> r = ParseRequest(Endpoint::kCompletions, R"({"prompt": "hi"})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->generate.prompt(), "hi");
  EXPECT_EQ(r->generate.max_tokens(), 16);
  EXPECT_FLOAT_EQ(r->generate.sampling().temperature(), 1.0f);
  EXPECT_FALSE(r->generate.sampling().has_seed());
  EXPECT_FALSE(r->stream);
  EXPECT_FALSE(r->logprobs);
}

TEST(OpenAiParseTest, CompletionFieldsMapToTheGrpcRequest) {
  absl::StatusOr<Request> r = ParseRequest(Endpoint::kCompletions, R"({
      "model": "m", "prompt": [1, 2, 3], "max_tokens": 5, "temperature": 0.5, "top_p": 0.9,
      "top_k": -1, "min_p": 0.1, "seed": -1, "presence_penalty": 0.25,
      "frequency_penalty": 0.5, "repetition_penalty": 1.1, "logit_bias": {"7": -100},
      "stop": "x", "stop_token_ids": [4], "min_tokens": 2, "ignore_eos": true,
      "logprobs": 3, "stream": true, "stream_options": {"include_usage": true}, "user": "u"})");
  ASSERT_TRUE(r.ok()) << r.status();
  const tandem::v1::GenerateRequest& g = r->generate;
  EXPECT_EQ(g.model(), "m");
  EXPECT_THAT(std::vector<int32_t>(g.prompt_token_ids().begin(), g.prompt_token_ids().end()),
              ::testing::ElementsAre(1, 2, 3));
  EXPECT_EQ(g.max_tokens(), 5);
  EXPECT_EQ(g.sampling().top_k(), 0);
  EXPECT_EQ(g.sampling().seed(), ~uint64_t{0});
  EXPECT_FLOAT_EQ(g.sampling().logit_bias().at(7), -100.0f);
  EXPECT_EQ(g.stop(0), "x");
  EXPECT_EQ(g.sampling().stop_token_ids(0), 4);
  EXPECT_EQ(g.sampling().min_tokens(), 2);
  EXPECT_TRUE(g.ignore_eos());
  EXPECT_EQ(g.top_logprobs(), 3);
  EXPECT_TRUE(r->logprobs && r->stream && r->include_usage);
}

TEST(OpenAiParseTest, ChatMessagesAndLogprobs) {
  absl::StatusOr<Request> r = ParseRequest(Endpoint::kChat, R"({
      "messages": [{"role": "developer", "content": "be brief"},
                   {"role": "user", "content": [{"type": "text", "text": "a"},
                                                {"type": "text", "text": "b"}]}],
      "max_completion_tokens": 9, "logprobs": true, "top_logprobs": 4})");
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->generate.messages_size(), 2);
  EXPECT_EQ(r->generate.messages(0).role(), "system");
  EXPECT_EQ(r->generate.messages(1).content(), "ab");
  EXPECT_EQ(r->generate.max_tokens(), 9);
  EXPECT_EQ(r->generate.top_logprobs(), 4);
  // No max_tokens: until end-of-generation (the gateway's default cap).
  r = ParseRequest(Endpoint::kChat, R"({"messages": [{"role": "user", "content": "a"}]})");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->generate.max_tokens(), 0);
}

TEST(OpenAiParseTest, BadBodiesNameTheField) {
  EXPECT_THAT(Error(Endpoint::kChat, "{"), StartsWith("body: "));
  EXPECT_THAT(Error(Endpoint::kChat, "[]"), StartsWith("body: "));
  EXPECT_THAT(Error(Endpoint::kCompletions, R"({"prompt": "a", "temperature": "hot"})"),
              StartsWith("temperature: "));
  EXPECT_THAT(Error(Endpoint::kCompletions, R"({"prompt": "a", "max_tokens": 0})"),
              StartsWith("max_tokens: "));
  EXPECT_THAT(Error(Endpoint::kCompletions, R"({"prompt": ["a", "b"]})"), StartsWith("prompt: "));
  EXPECT_THAT(Error(Endpoint::kCompletions, R"({})"), StartsWith("prompt: "));
  EXPECT_THAT(Error(Endpoint::kCompletions, R"({"prompt": "a", "n": 0})"), StartsWith("n: "));
  EXPECT_THAT(Error(Endpoint::kCompletions, R"({"prompt": "a", "best_of": 2})"),
              StartsWith("best_of: "));
  EXPECT_THAT(Error(Endpoint::kCompletions, R"({"prompt": "a", "echo": true})"),
              StartsWith("echo: "));
  EXPECT_THAT(Error(Endpoint::kCompletions, R"({"prompt": "a", "logit_bias": {"x": 1}})"),
              StartsWith("logit_bias: "));
  EXPECT_THAT(Error(Endpoint::kChat, R"({"messages": [{"role": "tool", "content": "a"}]})"),
              StartsWith("messages[0].tool_call_id: "));
  EXPECT_THAT(Error(Endpoint::kChat, R"({"messages": [{"role": "function", "content": "a"}]})"),
              StartsWith("messages[0].role: "));
  EXPECT_THAT(Error(Endpoint::kChat, R"({"messages": [{"role": "user", "content": "a"}],
                                         "top_logprobs": 2})"),
              StartsWith("top_logprobs: "));
  EXPECT_THAT(Error(Endpoint::kChat, R"({"messages": [], "tools": []})"), StartsWith("tools: "));
}

tandem::v1::GenerateResponse Message(const std::vector<std::pair<int, std::string>>& tokens,
                                     tandem::v1::FinishReason finish) {
  tandem::v1::GenerateResponse m;
  for (const auto& [id, text] : tokens) {
    tandem::v1::Token* t = m.add_tokens();
    t->set_id(id);
    t->set_text(text);
    t->set_raw(text);
    t->set_logprob(-0.5f);
    tandem::v1::TopLogprob* alt = t->add_top_logprobs();
    alt->set_id(id);
    alt->set_text(text);
    alt->set_logprob(-0.5f);
  }
  m.set_finish_reason(finish);
  if (finish != tandem::v1::FINISH_REASON_UNSPECIFIED) {
    m.mutable_usage()->set_prompt_tokens(5);
    m.mutable_usage()->set_cached_prompt_tokens(4);
    m.mutable_usage()->set_completion_tokens(2);
  }
  return m;
}

TEST(OpenAiResponseTest, WholeCompletionWithLogprobsAndUsage) {
  Request request = *ParseRequest(Endpoint::kCompletions, R"({"prompt": "a", "logprobs": 1})");
  ResponseBuilder b(request, "r1", "m", 42);
  b.Add(Message({{1, "Hé"}}, tandem::v1::FINISH_REASON_UNSPECIFIED));
  b.Add(Message({{2, " yo"}}, tandem::v1::FINISH_REASON_EOS));
  const Json body = Json::parse(b.Body());
  EXPECT_EQ(body["id"], "cmpl-r1");
  EXPECT_EQ(body["object"], "text_completion");
  EXPECT_EQ(body["choices"][0]["text"], "Hé yo");
  EXPECT_EQ(body["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(body["choices"][0]["logprobs"]["tokens"], Json({"Hé", " yo"}));
  EXPECT_EQ(body["choices"][0]["logprobs"]["text_offset"], Json({0, 2}));  // characters
  EXPECT_EQ(body["usage"]["total_tokens"], 7);
  EXPECT_EQ(body["usage"]["prompt_tokens_details"]["cached_tokens"], 4);
}

TEST(OpenAiResponseTest, SeveralChoicesByIndexWithUsageAddedUp) {
  Request request = *ParseRequest(Endpoint::kChat, R"({"messages": [{"role": "user",
                                                         "content": "a"}], "n": 2})");
  EXPECT_EQ(request.generate.n(), 2);
  ResponseBuilder b(request, "r4", "m", 42);
  tandem::v1::GenerateResponse one = Message({{1, "x"}}, tandem::v1::FINISH_REASON_LENGTH);
  one.set_index(1);
  b.Add(one);
  b.Add(Message({{2, "y"}}, tandem::v1::FINISH_REASON_EOS));
  const Json body = Json::parse(b.Body());
  ASSERT_EQ(body["choices"].size(), 2u);
  EXPECT_EQ(body["choices"][0]["index"], 0);
  EXPECT_EQ(body["choices"][0]["message"]["content"], "y");
  EXPECT_EQ(body["choices"][1]["message"]["content"], "x");
  EXPECT_EQ(body["choices"][1]["finish_reason"], "length");
  EXPECT_EQ(body["usage"]["prompt_tokens"], 5);
  EXPECT_EQ(body["usage"]["completion_tokens"], 4);
}

TEST(OpenAiResponseTest, PromptLogprobsInVllmsShape) {
  Request request =
      *ParseRequest(Endpoint::kCompletions, R"({"prompt": "a", "prompt_logprobs": 1})");
  EXPECT_EQ(request.generate.prompt_logprobs(), 1);
  ResponseBuilder b(request, "r3", "m", 42);
  tandem::v1::GenerateResponse first = Message({{5, "x"}}, tandem::v1::FINISH_REASON_LENGTH);
  tandem::v1::Token* p = first.add_prompt_logprobs();
  p->set_id(7);
  p->set_text("seven");
  p->set_logprob(-1.5f);
  tandem::v1::TopLogprob* alt = p->add_top_logprobs();
  alt->set_id(8);
  alt->set_text("eight");
  alt->set_logprob(-0.5f);
  b.Add(first);
  const Json body = Json::parse(b.Body());
  const Json& prompt = body["choices"][0]["prompt_logprobs"];
  ASSERT_EQ(prompt.size(), 2u);
  EXPECT_TRUE(prompt[0].is_null());
  EXPECT_FLOAT_EQ(prompt[1]["7"]["logprob"].get<float>(), -1.5f);
  EXPECT_EQ(prompt[1]["8"]["decoded_token"], "eight");
}

TEST(OpenAiResponseTest, StreamedChatChunksThenUsageThenDone) {
  Request request = *ParseRequest(
      Endpoint::kChat, R"({"messages": [{"role": "user", "content": "a"}], "stream": true,
                          "stream_options": {"include_usage": true}})");
  ResponseBuilder b(request, "r2", "m", 42);
  std::vector<std::string> events = b.Events(Message({{1, "a"}}, tandem::v1::FINISH_REASON_UNSPECIFIED));
  for (const std::string& e : b.Events(Message({{2, "b"}}, tandem::v1::FINISH_REASON_LENGTH))) {
    events.push_back(e);
  }
  for (const std::string& e : b.Closing()) events.push_back(e);
  ASSERT_EQ(events.size(), 4u);
  for (const std::string& e : events) {
    EXPECT_THAT(e, StartsWith("data: "));
    EXPECT_TRUE(e.size() > 2 && e.substr(e.size() - 2) == "\n\n");
  }
  const Json first = Json::parse(events[0].substr(6));
  EXPECT_EQ(first["object"], "chat.completion.chunk");
  EXPECT_EQ(first["choices"][0]["delta"]["role"], "assistant");
  EXPECT_EQ(first["choices"][0]["delta"]["content"], "a");
  EXPECT_TRUE(first["choices"][0]["finish_reason"].is_null());
  const Json second = Json::parse(events[1].substr(6));
  EXPECT_FALSE(second["choices"][0]["delta"].contains("role"));
  EXPECT_EQ(second["choices"][0]["finish_reason"], "length");
  const Json usage = Json::parse(events[2].substr(6));
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["completion_tokens"], 2);
  EXPECT_EQ(events[3], "data: [DONE]\n\n");
}

TEST(OpenAiErrorTest, StatusAndShape) {
  EXPECT_EQ(HttpStatus(absl::StatusCode::kInvalidArgument), 400);
  EXPECT_EQ(HttpStatus(absl::StatusCode::kUnauthenticated), 401);
  EXPECT_EQ(HttpStatus(absl::StatusCode::kResourceExhausted), 429);
  EXPECT_EQ(HttpStatus(absl::StatusCode::kUnavailable), 503);
  const Json e = Json::parse(
      ErrorBody(absl::InvalidArgumentError("sampling.logit_bias[0]: token id 9 is out of range")));
  EXPECT_EQ(e["error"]["param"], "logit_bias");
  EXPECT_EQ(e["error"]["type"], "invalid_request_error");
  EXPECT_THAT(e["error"]["message"].get<std::string>(), HasSubstr("token id 9"));
  const Json busy = Json::parse(ErrorBody(absl::ResourceExhaustedError("full")));
  EXPECT_TRUE(busy["error"]["param"].is_null());
  EXPECT_EQ(busy["error"]["type"], "rate_limit_error");
}

}  // namespace
}  // namespace tandem::gateway::openai
