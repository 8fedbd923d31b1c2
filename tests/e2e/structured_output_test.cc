// Structured output through the real processes: a response format compiled
// by the gateway, enforced by the prefill worker's first token and the decode
// worker's masks, carried across the hand-off and across a migration, and
// every sampled output valid under Python's jsonschema.
#include <csignal>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "engine/engine.h"
#include "engine/model/model.h"
#include "engine/tokenizer/jinja/json.h"
#include "tests/e2e/reference.h"
#include "tests/e2e/stack.h"
#include "tests/e2e/synthetic.h"
#include "tests/test_paths.h"

namespace tandem::testing {
namespace {

using ::testing::HasSubstr;

using tandem::test_paths::StoriesPath;

// Bounded so that every sampled output completes well within max_tokens.
constexpr char kSchema[] = R"({
  "type": "object",
  "properties": {
    "name": {"type": "string", "minLength": 1, "maxLength": 12},
    "age": {"type": "integer"},
    "mood": {"enum": ["happy", "sad", "sleepy"]},
    "height": {"type": "number"},
    "friends": {"type": "array", "items": {"type": "string", "maxLength": 8}, "maxItems": 3},
    "pet": {"anyOf": [{"type": "null"}, {"type": "boolean"},
                      {"$ref": "#/$defs/pet"}]}
  },
  "required": ["name", "age", "mood"],
  "additionalProperties": false,
  "$defs": {"pet": {"type": "object", "properties": {"kind": {"enum": ["cat", "dog"]}},
                    "required": ["kind"]}}
})";

class StructuredOutputTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    StackOptions options;
    options.model = StoriesPath();
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

  static tandem::v1::GenerateRequest SchemaRequest(uint64_t seed) {
    tandem::v1::GenerateRequest req;
    req.set_prompt("Once upon a time");
    req.set_max_tokens(400);
    req.set_top_logprobs(2);
    req.mutable_sampling()->set_temperature(1.0f);
    req.mutable_sampling()->set_seed(seed);
    req.mutable_sampling()->mutable_response_format()->set_json_schema(kSchema);
    return req;
  }

  static Stack* stack_;
  static engine::Model* model_;
};
Stack* StructuredOutputTest::stack_ = nullptr;
engine::Model* StructuredOutputTest::model_ = nullptr;

TEST_F(StructuredOutputTest, EverySeededSampledRunIsValidUnderTheSchema) {
  const std::string dir = ::testing::TempDir();
  const std::string schema_path = dir + "/tandem_structured_schema.json";
  const std::string outputs_path = dir + "/tandem_structured_outputs.jsonl";
  std::ofstream(schema_path) << kSchema;
  std::ofstream outputs(outputs_path);
  for (uint64_t seed = 1; seed <= 100; ++seed) {
    const Completion c = Generate(stack_->gateway(), SchemaRequest(seed));
    ASSERT_TRUE(c.status.ok()) << c.status.error_message();
    EXPECT_EQ(c.finish, tandem::v1::FINISH_REASON_STOP) << "seed " << seed << ": " << c.text;
    absl::StatusOr<std::string> line = engine::jinja::ToJson(engine::jinja::Value(c.text));
    ASSERT_TRUE(line.ok());
    outputs << *line << "\n";
  }
  outputs.close();
  const std::string command =
      absl::StrCat("/usr/bin/python3 ", tandem::test_paths::SourceDir(),
                   "/tests/e2e/check_json_schema.py ", schema_path, " ", outputs_path);
  EXPECT_EQ(std::system(command.c_str()), 0) << command;
}

TEST_F(StructuredOutputTest, TheStreamIsWhatTheEngineProducesInOneProcess) {
  for (float temperature : {0.0f, 0.9f}) {
    tandem::v1::GenerateRequest req = SchemaRequest(11);
    req.mutable_sampling()->set_temperature(temperature);
    const Completion c = Generate(stack_->gateway(), req);
    ASSERT_TRUE(c.status.ok()) << c.status.error_message();
    engine::GenerationRequest r;
    r.max_tokens = 400;
    r.top_logprobs = 2;
    r.sampling.temperature = temperature;
    r.sampling.seed = 11;
    r.sampling.constraint = {.kind = engine::OutputConstraint::Kind::kJsonSchema,
                             .source = kSchema};
    const std::vector<engine::TokenEvent> want = EngineReference(*model_, "Once upon a time", r);
    ASSERT_EQ(c.tokens.size(), want.size()) << c.text;
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_EQ(c.tokens[i].id(), want[i].token.id) << i;
      EXPECT_NEAR(c.tokens[i].logprob(), want[i].token.logprob, 1e-4) << i;
    }
  }
}

TEST_F(StructuredOutputTest, RegexAndGrammarFormatsOverGrpc) {
  tandem::v1::GenerateRequest req;
  req.set_prompt("Once upon a time");
  req.set_max_tokens(64);
  req.mutable_sampling()->set_temperature(1.0f);
  req.mutable_sampling()->set_seed(5);
  req.mutable_sampling()->mutable_response_format()->set_regex("(Lily|Tom) (is|was) [0-9]{1,2}");
  Completion c = Generate(stack_->gateway(), req);
  ASSERT_TRUE(c.status.ok()) << c.status.error_message();
  EXPECT_THAT(c.text, ::testing::MatchesRegex("(Lily|Tom) (is|was) [0-9]{1,2}"));
  req.mutable_sampling()->mutable_response_format()->set_grammar(
      "root ::= \"[\" num (\", \" num)* \"]\"\nnum ::= [1-9] [0-9]?");
  c = Generate(stack_->gateway(), req);
  ASSERT_TRUE(c.status.ok()) << c.status.error_message();
  EXPECT_THAT(c.text, ::testing::MatchesRegex("\\[[1-9][0-9]?(, [1-9][0-9]?)*\\]?.*"));
  req.mutable_sampling()->mutable_response_format()->set_json_object(true);
  c = Generate(stack_->gateway(), req);
  ASSERT_TRUE(c.status.ok()) << c.status.error_message();
  EXPECT_TRUE(c.text.starts_with("{")) << c.text;
}

// n choices each follow the format; a session's turn does too, and the turn
// after it (whose prompt holds the first reply) is constrained again.
TEST_F(StructuredOutputTest, ChoicesAndSessionTurnsFollowTheFormat) {
  tandem::v1::GenerateRequest req = SchemaRequest(21);
  req.set_n(3);
  req.mutable_sampling()->set_presence_penalty(0.5f);
  req.mutable_sampling()->set_repetition_penalty(1.2f);
  grpc::ClientContext ctx;
  auto reader = stack_->gateway().Generate(&ctx, req);
  std::vector<std::string> texts(3);
  tandem::v1::GenerateResponse message;
  while (reader->Read(&message)) {
    for (const auto& t : message.tokens()) texts[message.index()] += t.text();
  }
  ASSERT_TRUE(reader->Finish().ok());
  for (const std::string& text : texts) {
    absl::StatusOr<engine::jinja::Value> v = engine::jinja::ParseJson(text);
    ASSERT_TRUE(v.ok() && v->is_dict()) << text;
    EXPECT_NE(v->as_dict().Find("mood"), nullptr) << text;
  }
  EXPECT_NE(texts[0], texts[1]);

  tandem::v1::CreateSessionRequest create;
  create.set_system_prompt("You answer in JSON.");
  grpc::ClientContext cctx;
  tandem::v1::SessionInfo session;
  ASSERT_TRUE(stack_->gateway().CreateSession(&cctx, create, &session).ok());
  for (const char* turn : {"Tell me about a cat.", "And a dog?"}) {
    tandem::v1::ChatRequest chat;
    chat.set_session_id(session.session_id());
    chat.set_message(turn);
    chat.set_max_tokens(400);
    chat.mutable_sampling()->set_temperature(1.0f);
    chat.mutable_sampling()->set_seed(3);
    chat.mutable_sampling()->mutable_response_format()->set_json_schema(kSchema);
    const Completion reply = Chat(stack_->gateway(), chat);
    ASSERT_TRUE(reply.status.ok()) << reply.status.error_message();
    EXPECT_EQ(reply.finish, tandem::v1::FINISH_REASON_STOP) << reply.text;
    absl::StatusOr<engine::jinja::Value> v = engine::jinja::ParseJson(reply.text);
    ASSERT_TRUE(v.ok() && v->is_dict()) << reply.text;
  }
}

TEST_F(StructuredOutputTest, BadFormatsAreInvalidArgumentNamingTheField) {
  tandem::v1::GenerateRequest req = SchemaRequest(1);
  req.mutable_sampling()->mutable_response_format()->set_json_schema(
      R"({"type": "object", "properties": {"n": {"type": "integer", "multipleOf": 2}}})");
  Completion c = Generate(stack_->gateway(), req);
  EXPECT_EQ(c.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(c.status.error_message(),
              HasSubstr("sampling.response_format.json_schema: at /properties/n"));
  req.mutable_sampling()->mutable_response_format()->set_grammar("root ::= [");
  c = Generate(stack_->gateway(), req);
  EXPECT_EQ(c.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(c.status.error_message(), HasSubstr("sampling.response_format.grammar: 1:"));
}

// A decode worker killed mid-stream: the resumed stream re-derives the
// format's state from the tokens produced, and the client sees one stream.
TEST(StructuredOutputMigrationTest, AConstrainedStreamSurvivesItsDecodeWorkerDying) {
  StackOptions o;
  o.model = ModelPath();
  o.decode_workers = 2;
  auto stack = Stack::Start(o);
  ASSERT_NE(stack, nullptr);
  const std::vector<int32_t> ids = Prompt(40, 8, 11);
  constexpr int32_t kTokens = 1200;
  const std::string re = "([a-z]+ ){2,}";
  tandem::v1::GenerateRequest req = Request(ids, kTokens);
  req.mutable_sampling()->set_temperature(0.8f);
  req.mutable_sampling()->set_seed(9);
  req.mutable_sampling()->mutable_response_format()->set_regex(re);
  engine::SamplingParams sampling;
  sampling.temperature = 0.8f;
  sampling.seed = 9;
  sampling.constraint = {.kind = engine::OutputConstraint::Kind::kRegex, .source = re};

  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
  auto reader = stack->gateway().Generate(&ctx, req);
  tandem::v1::GenerateResponse resp;
  std::vector<int32_t> got;
  tandem::v1::Usage usage;
  bool killed = false;
  while (reader->Read(&resp)) {
    for (const auto& t : resp.tokens()) got.push_back(t.id());
    if (resp.has_usage()) usage = resp.usage();
    if (!killed && got.size() >= 3) {
      killed = true;
      if (const int busy = BusyDecodeWorker(*stack, 2); busy >= 0) {
        stack->decode_process(busy).Signal(SIGSTOP);
        stack->decode_process(busy).Signal(SIGKILL);
      }
    }
  }
  ASSERT_TRUE(reader->Finish().ok());
  const std::vector<engine::SampledToken> want = Reference(ids, kTokens, sampling);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ(got[i], want[i].id) << i;
  EXPECT_EQ(usage.migrations(), 1);
  stack->Stop();
}

}  // namespace
}  // namespace tandem::testing
