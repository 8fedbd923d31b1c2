// Structured output through the engine with the real stories260K model: every
// sampled output follows its response format, a continued sequence (another
// process, a migration) re-derives its place and produces what one run
// would, and bad formats are refused naming response_format.
#include <regex>
#include <string>
#include <vector>

#include "engine/constrain/json_schema.h"
#include "engine/engine.h"
#include "engine/model/model.h"
#include "engine/tokenizer/jinja/json.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/engine/test_backends.h"
#include "tests/engine/test_models.h"

namespace tandem::engine {
namespace {

using ::testing::HasSubstr;
using Kind = OutputConstraint::Kind;

struct Output {
  std::vector<TokenEvent> events;
  std::string text;
  FinishReason finish = FinishReason::kNone;
};

class ConstrainedEngineTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto m = Model::Load(testing::StoriesPath());
    ASSERT_TRUE(m.ok()) << m.status();
    model_ = m->release();
  }
  static void TearDownTestSuite() { delete model_; }

  static std::unique_ptr<Engine> NewEngine() {
    auto eng = Engine::Create(*model_, testing::MakeTestBackend(2), EngineOptions{});
    EXPECT_TRUE(eng.ok()) << eng.status();
    return std::move(*eng);
  }

  static GenerationRequest Request(OutputConstraint c, float temperature, uint64_t seed) {
    GenerationRequest r;
    r.prompt = model_->tokenizer().Encode("Once upon a time",
                                          {.add_special = true, .parse_special = true});
    r.max_tokens = 400;
    r.sampling.temperature = temperature;
    r.sampling.seed = seed;
    r.sampling.constraint = std::move(c);
    r.top_logprobs = 5;
    return r;
  }

  static Output Generate(Engine& eng, GenerationRequest r) {
    Output run;
    std::vector<int32_t> before = r.generated;
    absl::StatusOr<int64_t> id = eng.Add(std::move(r));
    EXPECT_TRUE(id.ok()) << id.status();
    for (int32_t t : before) run.text += model_->tokenizer().TokenBytes(t);
    while (eng.HasWork()) {
      auto events = testing::Tokens(eng.Step());
      EXPECT_TRUE(events.ok()) << events.status();
      for (TokenEvent& e : *events) {
        if (!model_->tokenizer().IsEog(e.token.id)) {
          run.text += model_->tokenizer().TokenBytes(e.token.id);
        }
        run.finish = e.finish;
        run.events.push_back(std::move(e));
      }
    }
    return run;
  }

  static Model* model_;
};
Model* ConstrainedEngineTest::model_ = nullptr;

constexpr char kSchema[] = R"({
  "type": "object",
  "properties": {
    "name": {"type": "string", "maxLength": 12},
    "age": {"type": "integer"},
    "mood": {"enum": ["happy", "sad", "sleepy"]},
    "friends": {"type": "array", "items": {"type": "string", "maxLength": 6}, "maxItems": 3},
    "pet": {"anyOf": [{"type": "null"}, {"type": "boolean"}]}
  },
  "required": ["name", "age", "mood"],
  "additionalProperties": false
})";

TEST_F(ConstrainedEngineTest, SampledJsonFollowsTheSchemaOnEverySeed) {
  std::unique_ptr<Engine> eng = NewEngine();
  for (uint64_t seed = 1; seed <= 40; ++seed) {
    const Output run = Generate(*eng, Request({Kind::kJsonSchema, kSchema}, 1.0f, seed));
    ASSERT_EQ(run.finish, FinishReason::kStop) << "seed " << seed << ": " << run.text << " n=" << run.events.size() << " last=" << run.events.back().token.id;
    absl::StatusOr<jinja::Value> v = jinja::ParseJson(run.text);
    ASSERT_TRUE(v.ok()) << "seed " << seed << ": " << run.text;
    ASSERT_TRUE(v->is_dict()) << run.text;
    const jinja::Dict& d = v->as_dict();
    ASSERT_NE(d.Find("name"), nullptr) << run.text;
    EXPECT_TRUE(d.Find("name")->is_string());
    ASSERT_NE(d.Find("age"), nullptr) << run.text;
    EXPECT_TRUE(d.Find("age")->is_int()) << run.text;
    ASSERT_NE(d.Find("mood"), nullptr) << run.text;
    EXPECT_THAT(d.Find("mood")->as_string(), ::testing::AnyOf("happy", "sad", "sleepy"));
    for (const auto& [key, value] : d.items) {
      EXPECT_THAT(key.as_string(), ::testing::AnyOf("name", "age", "mood", "friends", "pet"));
    }
  }
}

TEST_F(ConstrainedEngineTest, ReportedAlternativesAreAllowedTokens) {
  std::unique_ptr<Engine> eng = NewEngine();
  const Output run = Generate(*eng, Request({Kind::kRegex, "(yes|no)"}, 0.8f, 3));
  ASSERT_FALSE(run.events.empty());
  EXPECT_THAT(run.text, ::testing::AnyOf("yes", "no"));
  EXPECT_EQ(run.finish, FinishReason::kStop);
  // The first token must start "yes" or "no": every alternative reported
  // is one the format allows (logprobs are those of the masked row).
  for (const TokenLogprob& alt : run.events[0].token.top) {
    if (std::isinf(alt.logprob)) continue;
    const std::string b = model_->tokenizer().TokenBytes(alt.id);
    EXPECT_TRUE(std::string("yes").starts_with(b) || std::string("no").starts_with(b))
        << "token " << alt.id << " '" << b << "'";
  }
}

TEST_F(ConstrainedEngineTest, RegexAndGrammarOutputsMatch) {
  std::unique_ptr<Engine> eng = NewEngine();
  const std::string re = "(Tom|Sue) (ran|sat) [a-z]{2,8}( [a-z]{1,8}){0,3}\\.";
  const std::regex check(re);
  for (uint64_t seed = 1; seed <= 10; ++seed) {
    const Output run = Generate(*eng, Request({Kind::kRegex, re}, 1.0f, seed));
    EXPECT_TRUE(std::regex_match(run.text, check)) << run.text;
    EXPECT_EQ(run.finish, FinishReason::kStop);
  }
  const std::string grammar = R"(root ::= item ("," " "? item){1,3}
item ::= "cat" | "dog" | [0-9]{1,2})";
  const std::regex items("(cat|dog|[0-9]{1,2})(, ?(cat|dog|[0-9]{1,2})){1,3}");
  for (uint64_t seed = 1; seed <= 10; ++seed) {
    const Output run = Generate(*eng, Request({Kind::kGrammar, grammar}, 1.0f, seed));
    EXPECT_TRUE(std::regex_match(run.text, items)) << run.text;
  }
}

TEST_F(ConstrainedEngineTest, AContinuedSequenceProducesWhatOneRunWould) {
  for (float temperature : {0.0f, 1.0f}) {
    std::unique_ptr<Engine> whole = NewEngine();
    const Output full = Generate(*whole, Request({Kind::kJsonSchema, kSchema}, temperature, 7));
    ASSERT_GT(full.events.size(), 6u) << full.text;
    // Another engine continues after the first 5 tokens, as a decode worker
    // after a migration does.
    GenerationRequest r = Request({Kind::kJsonSchema, kSchema}, temperature, 7);
    for (int i = 0; i < 5; ++i) r.generated.push_back(full.events[i].token.id);
    std::unique_ptr<Engine> other = NewEngine();
    const Output rest = Generate(*other, std::move(r));
    EXPECT_EQ(rest.text, full.text) << "temperature " << temperature;
    ASSERT_EQ(rest.events.size(), full.events.size() - 5);
    for (size_t i = 0; i < rest.events.size(); ++i) {
      EXPECT_EQ(rest.events[i].token.id, full.events[i + 5].token.id);
    }
  }
}

TEST_F(ConstrainedEngineTest, TokensTheFormatRefusesAreRefusedWhenCarriedIn) {
  std::unique_ptr<Engine> eng = NewEngine();
  GenerationRequest r = Request({Kind::kRegex, "[0-9]+"}, 0.0f, 1);
  r.generated = model_->tokenizer().Encode("abc", {.add_special = false, .parse_special = false});
  absl::StatusOr<int64_t> id = eng->Add(std::move(r));
  ASSERT_FALSE(id.ok());
  EXPECT_EQ(id.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(id.status().message(), HasSubstr("generated[0]"));
}

TEST_F(ConstrainedEngineTest, BadFormatsAreRefusedNamingResponseFormat) {
  std::unique_ptr<Engine> eng = NewEngine();
  for (const OutputConstraint& c : std::vector<OutputConstraint>{
           {Kind::kJsonSchema, R"({"type": "object", "properties": {"a": {"minimum": 1}}})"},
           {Kind::kRegex, "(a"},
           {Kind::kGrammar, "root ::= undefined-rule"},
           {Kind::kGrammar, "root ::= x\nx ::= \"a\" x"}}) {
    absl::StatusOr<int64_t> id = eng->Add(Request(c, 0.0f, 1));
    ASSERT_FALSE(id.ok()) << c.source;
    EXPECT_EQ(id.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(id.status().message(), HasSubstr("response_format")) << id.status();
  }
}

}  // namespace
}  // namespace tandem::engine
