// ValidateGenerateRequest against the real stories260K tokenizer (512 ids,
// BOS=1 added by default): each bad field is refused with a message that
// names it, a good request is parsed into ValidatedRequest.
#include "gateway/calls/validated_request.h"

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "engine/tokenizer/tokenizer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/test_paths.h"

namespace tandem::gateway {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr char kModel[] = "stories260K";

class ValidatedRequestTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto t = engine::LoadTokenizer(tandem::test_paths::StoriesPath());
    ASSERT_TRUE(t.ok()) << t.status();
    tok_ = t->release();
  }
  static void TearDownTestSuite() {
    delete tok_;
    tok_ = nullptr;
  }

  static tandem::v1::GenerateRequest Good() {
    tandem::v1::GenerateRequest request;
    request.set_prompt("Once upon a time");
    request.set_max_tokens(16);
    return request;
  }

  absl::StatusOr<ValidatedRequest> Validate(const tandem::v1::GenerateRequest& request) {
    return ValidateGenerateRequest(request, *tok_, kModel, limits_);
  }

  // The InvalidArgument message for `request`, or "" when it passes.
  std::string Error(const tandem::v1::GenerateRequest& request) {
    auto result = Validate(request);
    if (result.ok()) return "";
    EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument) << result.status();
    return std::string(result.status().message());
  }

  GatewayLimits limits_;
  static engine::Tokenizer* tok_;
};
engine::Tokenizer* ValidatedRequestTest::tok_ = nullptr;

TEST_F(ValidatedRequestTest, GoodRequestIsParsed) {
  tandem::v1::GenerateRequest request = Good();
  request.mutable_sampling()->set_temperature(0.8f);
  request.mutable_sampling()->set_top_k(40);
  request.mutable_sampling()->set_min_p(0.05f);
  request.mutable_sampling()->set_seed(1234);
  request.set_top_logprobs(5);
  request.add_stop("\n\n");
  request.add_stop("The end");
  request.set_ignore_eos(true);
  auto v = Validate(request);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_THAT(v->prompt_ids, ElementsAre(1, 403, 407, 261, 378));
  EXPECT_EQ(v->max_tokens, 16);
  EXPECT_FLOAT_EQ(v->sampling.temperature, 0.8f);
  EXPECT_FLOAT_EQ(v->sampling.top_p, 1.0f);  // 0 = unset
  EXPECT_EQ(v->sampling.top_k, 40);
  EXPECT_FLOAT_EQ(v->sampling.min_p, 0.05f);
  EXPECT_EQ(v->sampling.seed, 1234u);
  EXPECT_EQ(v->top_logprobs, 5);
  EXPECT_THAT(v->stop, ElementsAre("\n\n", "The end"));
  EXPECT_TRUE(v->ignore_eos);
}

TEST_F(ValidatedRequestTest, ResponseFormatIsCarriedAndCheckedBeforeRouting) {
  tandem::v1::GenerateRequest request = Good();
  request.mutable_sampling()->mutable_response_format()->set_json_schema(
      R"({"type": "object", "properties": {"a": {"type": "integer"}}})");
  auto v = Validate(request);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->sampling.constraint.kind, engine::OutputConstraint::Kind::kJsonSchema);

  request.mutable_sampling()->mutable_response_format()->set_json_schema(
      R"({"properties": {"a": {"type": "integer", "maximum": 3}}})");
  EXPECT_THAT(Error(request), HasSubstr("sampling.response_format.json_schema: at "
                                        "/properties/a: `maximum` is not supported"));
  request.mutable_sampling()->mutable_response_format()->set_regex("ab(c");
  EXPECT_THAT(Error(request), HasSubstr("sampling.response_format.regex: missing ')' at offset 4"));
  request.mutable_sampling()->mutable_response_format()->set_grammar("root ::= \"a\" |\n  x");
  EXPECT_THAT(Error(request), HasSubstr("sampling.response_format.grammar: 2:3: undefined rule 'x'"));
  request.mutable_sampling()->mutable_response_format()->set_grammar("root ::= r\nr ::= \"a\" r");
  EXPECT_THAT(Error(request), HasSubstr("matches nothing"));
  request.mutable_sampling()->mutable_response_format()->set_regex("");
  EXPECT_THAT(Error(request), HasSubstr("sampling.response_format.regex: is empty"));
  limits_.max_response_format_bytes = 16;
  request.mutable_sampling()->mutable_response_format()->set_regex(std::string(17, 'a'));
  EXPECT_THAT(Error(request), HasSubstr("more than the limit of 16"));
  limits_.response_format.max_elements = 2000;
  limits_.max_response_format_bytes = 1 << 16;
  request.mutable_sampling()->mutable_response_format()->set_regex("[a-z]{1000}[0-9]{1000}x");
  EXPECT_THAT(Error(request), HasSubstr("more than 2000 elements"));
}

TEST_F(ValidatedRequestTest, TopPIsKeptWhenSet) {
  tandem::v1::GenerateRequest request = Good();
  request.mutable_sampling()->set_top_p(0.9f);
  auto v = Validate(request);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_FLOAT_EQ(v->sampling.top_p, 0.9f);
}

TEST_F(ValidatedRequestTest, PromptReadsSpecialTokenText) {
  tandem::v1::GenerateRequest request = Good();
  request.set_prompt("Hello</s>");
  auto v = Validate(request);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->prompt_ids,
            tok_->Encode("Hello</s>", {.add_special = true, .parse_special = true}));
  EXPECT_EQ(v->prompt_ids.front(), 1);
  EXPECT_EQ(v->prompt_ids.back(), 2);
}

// messages are rendered with the chat template given (plain without one)
// and tokenized as a prompt is: BOS added, special-token text read as tokens.
TEST_F(ValidatedRequestTest, MessagesAreRenderedWithTheChatTemplate) {
  tandem::v1::GenerateRequest request = Good();
  request.clear_prompt();
  auto* system = request.add_messages();
  system->set_role("system");
  system->set_content("Be brief.");
  auto* user = request.add_messages();
  user->set_role("user");
  user->set_content("Hello</s>");
  auto plain = Validate(request);
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(plain->prompt_ids, tok_->Encode("Be brief.\n\nUser: Hello</s>\nAssistant:",
                                            {.add_special = true, .parse_special = true}));
  const engine::ChatTemplate llama2 = engine::ChatTemplate::Detect("[INST] <<SYS>>");
  auto rendered = ValidateGenerateRequest(request, *tok_, kModel, limits_, &llama2);
  ASSERT_TRUE(rendered.ok()) << rendered.status();
  EXPECT_EQ(rendered->prompt_ids,
            tok_->Encode("[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nHello</s> [/INST]",
                         {.add_special = true, .parse_special = true}));
}

TEST_F(ValidatedRequestTest, MessagesAreCheckedByField) {
  tandem::v1::GenerateRequest request = Good();  // has a prompt
  auto* m = request.add_messages();
  m->set_role("user");
  m->set_content("hi");
  EXPECT_THAT(Error(request), HasSubstr("messages: set together with prompt"));
  request.clear_prompt();
  m->set_role("bogus");
  EXPECT_THAT(Error(request), HasSubstr("messages[0].role: \"bogus\""));
  m->set_role("user");
  m->set_content(std::string(limits_.max_prompt_bytes + 1, 'a'));
  EXPECT_THAT(Error(request), HasSubstr("messages: more than the limit"));
  m->set_content("hi");
  request.set_tools_json(std::string(limits_.max_prompt_bytes, ' '));
  EXPECT_THAT(Error(request), HasSubstr("messages: more than the limit"));
  request.set_tools_json(R"([{"type": "function"}])");
  EXPECT_THAT(Error(request), StartsWith("tools_json[0].function: "));
  request.clear_messages();
  request.set_prompt("x");
  EXPECT_THAT(Error(request), StartsWith("tools_json: needs messages"));
}

// A template that renders no tools (here the plain one) gets the gateway's
// description of them, and tool messages rewritten (tools/tool_prompt.h).
TEST_F(ValidatedRequestTest, ToolsWithoutATemplateForThemAreDescribed) {
  tandem::v1::GenerateRequest request = Good();
  request.clear_prompt();
  request.set_tools_json(
      R"([{"type": "function", "function": {"name": "get_weather", "parameters": {}}}])");
  auto* user = request.add_messages();
  user->set_role("user");
  user->set_content("Weather?");
  auto* call = request.add_messages();
  call->set_role("assistant");
  call->set_content_is_null(true);
  tandem::v1::ToolCall* c = call->add_tool_calls();
  c->set_id("call_1");
  c->set_name("get_weather");
  c->set_arguments("{}");
  auto* result = request.add_messages();
  result->set_role("tool");
  result->set_tool_call_id("call_1");
  result->set_content("sunny");
  auto v = Validate(request);
  ASSERT_TRUE(v.ok()) << v.status();
  const std::string text = tok_->Decode(v->prompt_ids, /*special=*/true);
  EXPECT_THAT(text, HasSubstr("get_weather"));
  EXPECT_THAT(text, HasSubstr(R"({"tool_calls":[{"name":"get_weather","arguments":{}}]})"));
  EXPECT_THAT(text, HasSubstr(R"("tool_call_id":"call_1")"));
}

TEST_F(ValidatedRequestTest, PromptTokenIdsAreUsedInsteadOfPrompt) {
  tandem::v1::GenerateRequest request = Good();
  for (int id : {1, 403, 7}) request.add_prompt_token_ids(id);
  auto v = Validate(request);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_THAT(v->prompt_ids, ElementsAre(1, 403, 7));  // given as is, no BOS added
  request.clear_prompt();
  v = Validate(request);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_THAT(v->prompt_ids, ElementsAre(1, 403, 7));
}

TEST_F(ValidatedRequestTest, PromptTokenIdOutOfRange) {
  tandem::v1::GenerateRequest request = Good();
  for (int id : {1, 403, 7, 999}) request.add_prompt_token_ids(id);
  EXPECT_EQ(Error(request), "prompt_token_ids[3]: 999 is out of range [0, 512)");
  request.set_prompt_token_ids(0, -1);
  EXPECT_THAT(Error(request), StartsWith("prompt_token_ids[0]: -1 is out of range"));
}

TEST_F(ValidatedRequestTest, EmptyPrompt) {
  tandem::v1::GenerateRequest request = Good();
  request.clear_prompt();
  EXPECT_EQ(Error(request), "prompt: empty prompt and no prompt_token_ids or messages");
}

TEST_F(ValidatedRequestTest, PromptTooManyBytes) {
  limits_.max_prompt_bytes = 8;
  EXPECT_EQ(Error(Good()), "prompt: 16 bytes is more than the limit of 8");
}

TEST_F(ValidatedRequestTest, ModelDefaultAndUnknown) {
  tandem::v1::GenerateRequest request = Good();
  EXPECT_EQ(Error(request), "");
  request.set_model(kModel);
  EXPECT_EQ(Error(request), "");
  request.set_model("llama-70b");
  EXPECT_EQ(Error(request), "model: unknown model \"llama-70b\"; this gateway serves \"stories260K\"");
}

TEST_F(ValidatedRequestTest, MaxTokensMustNotBeNegative) {
  tandem::v1::GenerateRequest request = Good();
  request.set_max_tokens(-5);
  EXPECT_EQ(Error(request), "max_tokens: must be >= 0 (0 = unset), got -5");
}

TEST_F(ValidatedRequestTest, UnsetMaxTokensIsTheDefaultCapWithinTheContext) {
  tandem::v1::GenerateRequest request = Good();  // 5 prompt tokens
  request.set_max_tokens(0);
  limits_.default_max_tokens = 7;
  auto v = Validate(request);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->max_tokens, 7);
  limits_.default_max_tokens = 4096;
  limits_.max_context = 16;
  v = Validate(request);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->max_tokens, 11);
}

TEST_F(ValidatedRequestTest, SeedIsOptional) {
  tandem::v1::GenerateRequest request = Good();
  auto v = Validate(request);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_FALSE(v->seed_given);
  request.mutable_sampling()->set_seed(0);  // a real seed, not "unset"
  v = Validate(request);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_TRUE(v->seed_given);
  EXPECT_EQ(v->sampling.seed, 0u);
}

TEST_F(ValidatedRequestTest, LogitAdjustmentsAreParsedAndNamedWhenBad) {
  tandem::v1::GenerateRequest request = Good();
  tandem::v1::SamplingParams* s = request.mutable_sampling();
  s->set_presence_penalty(0.5f);
  s->set_frequency_penalty(-0.5f);
  s->set_repetition_penalty(1.2f);
  (*s->mutable_logit_bias())[9] = -1.0f;
  (*s->mutable_logit_bias())[3] = 2.0f;
  s->set_min_tokens(2);
  s->add_stop_token_ids(13);
  auto v = Validate(request);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_FLOAT_EQ(v->sampling.presence_penalty, 0.5f);
  EXPECT_FLOAT_EQ(v->sampling.frequency_penalty, -0.5f);
  EXPECT_FLOAT_EQ(v->sampling.repetition_penalty, 1.2f);
  ASSERT_EQ(v->sampling.logit_bias.size(), 2u);
  EXPECT_EQ(v->sampling.logit_bias[0].id, 3);  // sorted by id
  EXPECT_EQ(v->sampling.logit_bias[1].id, 9);
  EXPECT_EQ(v->sampling.min_tokens, 2);
  EXPECT_EQ(v->sampling.stop_token_ids, std::vector<int32_t>{13});

  tandem::v1::GenerateRequest bad = Good();
  bad.mutable_sampling()->set_frequency_penalty(-2.5f);
  EXPECT_THAT(Error(bad), StartsWith("sampling.frequency_penalty"));
  bad = Good();
  bad.mutable_sampling()->set_repetition_penalty(-1.0f);
  EXPECT_THAT(Error(bad), StartsWith("sampling.repetition_penalty"));
  bad = Good();
  (*bad.mutable_sampling()->mutable_logit_bias())[512] = 1.0f;
  EXPECT_THAT(Error(bad), StartsWith("sampling.logit_bias[0]: token id 512"));
  bad = Good();
  bad.mutable_sampling()->set_min_tokens(-1);
  EXPECT_THAT(Error(bad), StartsWith("sampling.min_tokens"));
  limits_.max_stop_token_ids = 1;
  bad = Good();
  bad.mutable_sampling()->add_stop_token_ids(1);
  bad.mutable_sampling()->add_stop_token_ids(2);
  EXPECT_THAT(Error(bad), StartsWith("sampling.stop_token_ids: more than 1"));
  limits_.max_logit_bias = 1;
  bad = Good();
  (*bad.mutable_sampling()->mutable_logit_bias())[1] = 1.0f;
  (*bad.mutable_sampling()->mutable_logit_bias())[2] = 1.0f;
  EXPECT_THAT(Error(bad), StartsWith("sampling.logit_bias: more than 1"));
}

TEST_F(ValidatedRequestTest, RequestIdIsPrintableAsciiAndBounded) {
  tandem::v1::GenerateRequest request = Good();
  request.set_request_id("trace-42/a_b");
  auto v = Validate(request);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->request_id, "trace-42/a_b");
  request.set_request_id("a b");
  EXPECT_THAT(Error(request), StartsWith("request_id: "));
  request.set_request_id(std::string(kMaxRequestIdBytes + 1, 'x'));
  EXPECT_THAT(Error(request), StartsWith("request_id: "));
}

TEST_F(ValidatedRequestTest, MaxTokensIsClampedToTheContext) {
  limits_.max_context = 16;
  tandem::v1::GenerateRequest request = Good();  // 5 prompt tokens
  request.set_max_tokens(100);
  auto v = Validate(request);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->max_tokens, 11);
  request.set_max_tokens(3);
  v = Validate(request);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->max_tokens, 3);
  request.set_max_tokens(std::numeric_limits<int32_t>::max());
  v = Validate(request);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->max_tokens, 11);
}

TEST_F(ValidatedRequestTest, PromptThatFillsTheContextIsRefused) {
  limits_.max_context = 5;
  tandem::v1::GenerateRequest request = Good();  // 5 prompt tokens
  EXPECT_EQ(Error(request), "prompt: 5 tokens leave no room to generate within max_context 5");
  limits_.max_context = 6;
  auto v = Validate(request);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->max_tokens, 1);
  for (int i = 0; i < 6; ++i) request.add_prompt_token_ids(1);
  EXPECT_THAT(Error(request), StartsWith("prompt_token_ids: 6 tokens leave no room"));
}

TEST_F(ValidatedRequestTest, SamplingFieldsAreNamed) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  struct Case {
    const char* field;
    void (*set)(tandem::v1::SamplingParams*, float);
    float value;
  };
  auto temperature = [](tandem::v1::SamplingParams* s, float v) { s->set_temperature(v); };
  auto top_p = [](tandem::v1::SamplingParams* s, float v) { s->set_top_p(v); };
  auto top_k = [](tandem::v1::SamplingParams* s, float v) { s->set_top_k(static_cast<int>(v)); };
  auto min_p = [](tandem::v1::SamplingParams* s, float v) { s->set_min_p(v); };
  const Case cases[] = {
      {"sampling.temperature", temperature, -0.5f}, {"sampling.temperature", temperature, nan},
      {"sampling.temperature", temperature, inf},   {"sampling.top_p", top_p, 1.5f},
      {"sampling.top_p", top_p, -0.1f},             {"sampling.top_p", top_p, nan},
      {"sampling.top_k", top_k, -1.0f},             {"sampling.min_p", min_p, 1.01f},
      {"sampling.min_p", min_p, -0.01f},            {"sampling.min_p", min_p, nan},
  };
  for (const Case& c : cases) {
    tandem::v1::GenerateRequest request = Good();
    c.set(request.mutable_sampling(), c.value);
    EXPECT_THAT(Error(request), StartsWith(std::string(c.field) + ": ")) << c.value;
  }
  tandem::v1::GenerateRequest request = Good();
  request.mutable_sampling()->set_top_p(2.0f);
  EXPECT_EQ(Error(request), "sampling.top_p: must be in [0, 1] (0 = unset), got 2");
  request = Good();
  request.mutable_sampling()->set_temperature(-1.0f);
  EXPECT_EQ(Error(request), "sampling.temperature: must be finite and >= 0, got -1");
  // Edges that are fine.
  request = Good();
  request.mutable_sampling()->set_top_p(1.0f);
  request.mutable_sampling()->set_min_p(1.0f);
  request.mutable_sampling()->set_temperature(100.0f);
  EXPECT_EQ(Error(request), "");
}

TEST_F(ValidatedRequestTest, TopLogprobsRange) {
  tandem::v1::GenerateRequest request = Good();
  request.set_top_logprobs(21);
  EXPECT_EQ(Error(request), "top_logprobs: 21 is out of range [0, 20]");
  request.set_top_logprobs(-1);
  EXPECT_EQ(Error(request), "top_logprobs: -1 is out of range [0, 20]");
  request.set_top_logprobs(20);
  EXPECT_EQ(Error(request), "");
}

TEST_F(ValidatedRequestTest, StopStrings) {
  tandem::v1::GenerateRequest request = Good();
  request.add_stop("a");
  request.add_stop("b");
  request.add_stop("");
  EXPECT_EQ(Error(request), "stop[2]: empty string");

  request = Good();
  for (int i = 0; i < 17; ++i) request.add_stop("x");
  EXPECT_THAT(Error(request), StartsWith("stop: more than 16 stop strings"));

  request = Good();
  request.add_stop(std::string(257, 'x'));
  EXPECT_EQ(Error(request), "stop[0]: 257 bytes is more than the limit of 256");

  request = Good();
  request.add_stop("ok");
  request.add_stop("\xC3");
  EXPECT_EQ(Error(request), "stop[1]: not valid UTF-8");

  request = Good();
  for (int i = 0; i < 16; ++i) request.add_stop(std::string(256, 'x'));
  EXPECT_EQ(Error(request), "");
}

TEST_F(ValidatedRequestTest, ModelIsCheckedBeforeThePrompt) {
  tandem::v1::GenerateRequest request;
  request.set_model("other");
  EXPECT_THAT(Error(request), StartsWith("model: "));
  request.clear_model();
  request.set_max_tokens(-1);
  EXPECT_THAT(Error(request), StartsWith("max_tokens: "));
  request.set_max_tokens(1);
  EXPECT_THAT(Error(request), HasSubstr("prompt: "));
}

}  // namespace
}  // namespace tandem::gateway
