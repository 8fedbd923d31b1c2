// Structured output and tools on the OpenAI front: response_format and its
// extensions become sampling.response_format; tools, tool_choice and tool
// messages become the gRPC request's fields (a forced call a JSON schema);
// replies are read back into message.tool_calls and streamed tool-call
// deltas in OpenAI's shapes.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "engine/constrain/constraint.h"
#include "gateway/http/openai_api.h"

namespace tandem::gateway::openai {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;
using Json = nlohmann::json;

constexpr char kUser[] = R"("messages": [{"role": "user", "content": "Weather in Paris?"}])";
constexpr char kTools[] =
    R"("tools": [{"type": "function", "function": {"name": "get_weather",)"
    R"( "description": "Weather now", "parameters": {"type": "object", "properties":)"
    R"( {"city": {"type": "string"}}, "required": ["city"]}}},)"
    R"( {"type": "function", "function": {"name": "get_time"}}])";

Request Parse(Endpoint e, const std::string& body,
              tools::ToolCallFormat format = tools::ToolCallFormat::kHermes) {
  absl::StatusOr<Request> r = ParseRequest(e, body, format);
  EXPECT_TRUE(r.ok()) << r.status() << "\n" << body;
  return r.ok() ? *r : Request{};
}

std::string Error(Endpoint e, const std::string& body) {
  absl::StatusOr<Request> r = ParseRequest(e, body);
  EXPECT_FALSE(r.ok()) << body;
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(r.status().message());
}

std::string Chat(const std::string& extra) { return absl::StrCat("{", kUser, ", ", extra, "}"); }

TEST(OpenAiStructuredTest, ResponseFormats) {
  Request r = Parse(Endpoint::kChat, Chat(R"("response_format": {"type": "text"})"));
  EXPECT_FALSE(r.generate.sampling().has_response_format());
  r = Parse(Endpoint::kChat, Chat(R"("response_format": {"type": "json_object"})"));
  EXPECT_TRUE(r.generate.sampling().response_format().json_object());
  r = Parse(Endpoint::kChat, Chat(R"("response_format": {"type": "json_schema", "json_schema":
      {"name": "p", "strict": true, "schema": {"type": "object", "properties": {"a": {"type": "integer"}}}}})"));
  EXPECT_EQ(Json::parse(r.generate.sampling().response_format().json_schema()),
            Json::parse(R"({"type": "object", "properties": {"a": {"type": "integer"}}})"));
  // /v1/completions takes it too.
  r = Parse(Endpoint::kCompletions, R"({"prompt": "x", "response_format": {"type": "json_object"}})");
  EXPECT_TRUE(r.generate.sampling().response_format().json_object());
}

TEST(OpenAiStructuredTest, VllmAndLlamaCppExtensions) {
  Request r = Parse(Endpoint::kCompletions, R"({"prompt": "x", "guided_json": {"type": "string"}})");
  EXPECT_EQ(r.generate.sampling().response_format().json_schema(), R"({"type":"string"})");
  r = Parse(Endpoint::kCompletions, R"({"prompt": "x", "guided_json": "{\"type\": \"number\"}"})");
  EXPECT_EQ(r.generate.sampling().response_format().json_schema(), R"({"type":"number"})");
  r = Parse(Endpoint::kCompletions, R"({"prompt": "x", "json_schema": {"type": "array"}})");
  EXPECT_EQ(r.generate.sampling().response_format().json_schema(), R"({"type":"array"})");
  r = Parse(Endpoint::kCompletions, R"({"prompt": "x", "guided_regex": "[a-z]+"})");
  EXPECT_EQ(r.generate.sampling().response_format().regex(), "[a-z]+");
  r = Parse(Endpoint::kChat, Chat(R"("guided_grammar": "root ::= \"yes\" | \"no\"")"));
  EXPECT_EQ(r.generate.sampling().response_format().grammar(), R"(root ::= "yes" | "no")");
  r = Parse(Endpoint::kCompletions,
            R"({"prompt": "x", "response_format": {"type": "json_object", "schema": {"type": "object"}}})");
  EXPECT_EQ(r.generate.sampling().response_format().json_schema(), R"({"type":"object"})");
  r = Parse(Endpoint::kCompletions, R"({"prompt": "x", "grammar": "root ::= \"a\""})");
  EXPECT_EQ(r.generate.sampling().response_format().grammar(), R"(root ::= "a")");
  r = Parse(Endpoint::kCompletions, R"({"prompt": "x", "guided_choice": ["yes", "a.b"]})");
  EXPECT_EQ(r.generate.sampling().response_format().regex(), R"((yes|a\.b))");
}

TEST(OpenAiStructuredTest, BadShapesNameTheField) {
  EXPECT_THAT(Error(Endpoint::kChat, Chat(R"("response_format": "json")")),
              StartsWith("response_format: "));
  EXPECT_THAT(Error(Endpoint::kChat, Chat(R"("response_format": {"type": "xml"})")),
              StartsWith("response_format.type: "));
  EXPECT_THAT(Error(Endpoint::kChat, Chat(R"("response_format": {"type": "json_schema"})")),
              StartsWith("response_format.json_schema: "));
  EXPECT_THAT(
      Error(Endpoint::kChat, Chat(R"("response_format": {"type": "json_schema", "json_schema": {"name": "x"}})")),
      StartsWith("response_format.json_schema.schema: "));
  EXPECT_THAT(Error(Endpoint::kChat, Chat(R"("response_format": {"type": "json_schema",
                                              "json_schema": {"schema": "{}"}})")),
              StartsWith("response_format.json_schema.schema: "));
  EXPECT_THAT(Error(Endpoint::kChat, Chat(R"("response_format": {"type": "json_schema",
                                              "json_schema": {"schema": {}, "strict": 1}})")),
              StartsWith("response_format.json_schema.strict: "));
  EXPECT_THAT(Error(Endpoint::kCompletions, R"({"prompt": "x", "guided_json": "{"})"),
              StartsWith("guided_json: "));
  EXPECT_THAT(Error(Endpoint::kCompletions, R"({"prompt": "x", "guided_regex": 5})"),
              StartsWith("guided_regex: "));
  EXPECT_THAT(Error(Endpoint::kCompletions, R"({"prompt": "x", "guided_choice": []})"),
              StartsWith("guided_choice: "));
  EXPECT_THAT(Error(Endpoint::kCompletions, R"({"prompt": "x", "guided_regex": "a",
                                                "response_format": {"type": "json_object"}})"),
              StartsWith("guided_regex: set together with response_format"));
}

TEST(OpenAiToolsTest, ToolsAreRenderedAndParsedInTheModelsFormat) {
  Request r = Parse(Endpoint::kChat, Chat(kTools));
  EXPECT_TRUE(r.tools.parse);
  EXPECT_FALSE(r.tools.forced);
  EXPECT_TRUE(r.tools.parallel);
  EXPECT_EQ(r.tool_format, tools::ToolCallFormat::kHermes);
  EXPECT_FALSE(r.generate.sampling().has_response_format());
  const Json tools = Json::parse(r.generate.tools_json());
  ASSERT_EQ(tools.size(), 2u);
  EXPECT_EQ(tools[0]["function"]["name"], "get_weather");
}

TEST(OpenAiToolsTest, NoneRendersToolsButParsesNothing) {
  Request r = Parse(Endpoint::kChat, Chat(absl::StrCat(kTools, R"(, "tool_choice": "none")")));
  EXPECT_FALSE(r.tools.parse);
  EXPECT_EQ(r.tool_format, tools::ToolCallFormat::kNone);
  EXPECT_FALSE(r.generate.tools_json().empty());
  // Without tools nothing changes.
  r = Parse(Endpoint::kChat, Chat(R"("tool_choice": "auto")"));
  EXPECT_FALSE(r.tools.parse);
  EXPECT_TRUE(r.generate.tools_json().empty());
}

TEST(OpenAiToolsTest, RequiredConstrainsTheReplyToCallsOfAnyTool) {
  Request r = Parse(Endpoint::kChat,
                    Chat(absl::StrCat(kTools, R"(, "tool_choice": "required",
                                                  "parallel_tool_calls": false)")));
  EXPECT_TRUE(r.tools.forced);
  EXPECT_FALSE(r.tools.parallel);
  EXPECT_EQ(r.tool_format, tools::ToolCallFormat::kJson);
  const Json schema = Json::parse(r.generate.sampling().response_format().json_schema());
  EXPECT_EQ(schema["type"], "array");
  EXPECT_EQ(schema["minItems"], 1);
  EXPECT_EQ(schema["maxItems"], 1);
  ASSERT_EQ(schema["items"]["anyOf"].size(), 2u);
  const Json& weather = schema["items"]["anyOf"][0];
  EXPECT_EQ(weather["properties"]["name"]["const"], "get_weather");
  EXPECT_EQ(weather["properties"]["arguments"]["required"], Json::array({"city"}));
  EXPECT_EQ(weather["required"], Json::array({"name", "arguments"}));
  EXPECT_EQ(weather["additionalProperties"], false);
  // A tool without parameters takes any object.
  EXPECT_EQ(schema["items"]["anyOf"][1]["properties"]["arguments"], Json::parse(R"({"type": "object"})"));
}

TEST(OpenAiToolsTest, ANamedFunctionConstrainsTheReplyToOneCallOfIt) {
  Request r = Parse(Endpoint::kChat, Chat(absl::StrCat(kTools, R"(, "tool_choice":
      {"type": "function", "function": {"name": "get_weather"}})")));
  EXPECT_TRUE(r.tools.forced);
  const Json schema = Json::parse(r.generate.sampling().response_format().json_schema());
  EXPECT_EQ(schema["type"], "object");
  EXPECT_EQ(schema["properties"]["name"]["const"], "get_weather");
}

// Parameters' definitions ($defs, as pydantic writes them) move to the
// forced schema's root, where their $refs resolve.
TEST(OpenAiToolsTest, ForcedSchemaKeepsTheParametersDefinitions) {
  Request r = Parse(Endpoint::kChat, Chat(R"("tools": [{"type": "function", "function": {
      "name": "book", "parameters": {"type": "object", "$defs": {"City": {"enum": ["Rome"]}},
      "properties": {"to": {"$ref": "#/$defs/City"}, "via": {"items": {"$ref": "#/definitions/City"}}}}}}],
      "tool_choice": "required")"));
  const Json schema = Json::parse(r.generate.sampling().response_format().json_schema());
  EXPECT_EQ(schema["$defs"]["book.City"], Json::parse(R"({"enum": ["Rome"]})"));
  const Json& args = schema["items"]["properties"]["arguments"];
  EXPECT_FALSE(args.contains("$defs"));
  EXPECT_EQ(args["properties"]["to"]["$ref"], "#/$defs/book.City");
  EXPECT_EQ(args["properties"]["via"]["items"]["$ref"], "#/$defs/book.City");
}

// Every forced schema the front writes compiles with the engine's JSON
// Schema compiler (const, anyOf, additionalProperties, $defs).
TEST(OpenAiToolsTest, ForcedSchemasCompile) {
  for (const std::string& extra :
       {std::string(R"("tool_choice": "required")"),
        std::string(R"("tool_choice": "required", "parallel_tool_calls": false)"),
        std::string(R"("tool_choice": {"type": "function", "function": {"name": "get_time"}})")}) {
    Request r = Parse(Endpoint::kChat, Chat(absl::StrCat(kTools, ", ", extra)));
    const engine::OutputConstraint constraint{
        .kind = engine::OutputConstraint::Kind::kJsonSchema,
        .source = r.generate.sampling().response_format().json_schema()};
    absl::StatusOr<std::string> gbnf = engine::constrain::ConstraintToGbnf(constraint);
    EXPECT_TRUE(gbnf.ok()) << gbnf.status() << "\n" << constraint.source;
  }
  Request r = Parse(Endpoint::kChat, Chat(R"("tools": [{"type": "function", "function": {
      "name": "book", "parameters": {"type": "object", "$defs": {"City": {"enum": ["Rome"]}},
      "properties": {"to": {"$ref": "#/$defs/City"}}}}}], "tool_choice": "required")"));
  const engine::OutputConstraint with_defs{
      .kind = engine::OutputConstraint::Kind::kJsonSchema,
      .source = r.generate.sampling().response_format().json_schema()};
  absl::StatusOr<std::string> gbnf = engine::constrain::ConstraintToGbnf(with_defs);
  EXPECT_TRUE(gbnf.ok()) << gbnf.status() << "\n" << with_defs.source;
}

TEST(OpenAiToolsTest, AForcedSchemaRefusedNamesTools) {
  const ToolUse forced{.parse = true, .forced = true, .parallel = true};
  const absl::Status refused = absl::InvalidArgumentError(
      "sampling.response_format.json_schema: at /items/properties/arguments/properties/n: "
      "`minimum` is not supported");
  const absl::Status s = ExplainForcedCallError(forced, refused);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), StartsWith("tools: the forced call's JSON schema"));
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("is refused: at /items/properties/arguments/properties/n: `minimum`"));
  EXPECT_EQ(ExplainForcedCallError(ToolUse{}, refused), refused);
  const absl::Status other = absl::UnavailableError("no worker");
  EXPECT_EQ(ExplainForcedCallError(forced, other), other);
}

TEST(OpenAiToolsTest, ToolMessagesAndAssistantCalls) {
  Request r = Parse(Endpoint::kChat, absl::StrCat(R"({"messages": [
      {"role": "user", "content": "Weather in Paris?"},
      {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
          "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
      {"role": "tool", "tool_call_id": "call_1", "name": "get_weather", "content": "18C"}], )",
                                                  kTools, "}"));
  ASSERT_EQ(r.generate.messages_size(), 3);
  const tandem::v1::ChatMessage& a = r.generate.messages(1);
  EXPECT_TRUE(a.content_is_null());
  ASSERT_EQ(a.tool_calls_size(), 1);
  EXPECT_EQ(a.tool_calls(0).id(), "call_1");
  EXPECT_EQ(a.tool_calls(0).name(), "get_weather");
  EXPECT_EQ(a.tool_calls(0).arguments(), R"({"city": "Paris"})");
  const tandem::v1::ChatMessage& t = r.generate.messages(2);
  EXPECT_EQ(t.role(), "tool");
  EXPECT_EQ(t.tool_call_id(), "call_1");
  EXPECT_EQ(t.name(), "get_weather");
  EXPECT_EQ(t.content(), "18C");
  EXPECT_FALSE(t.content_is_null());
}

TEST(OpenAiToolsTest, BadToolsNameTheField) {
  EXPECT_THAT(Error(Endpoint::kChat, Chat(R"("tools": {})")), StartsWith("tools: "));
  EXPECT_THAT(Error(Endpoint::kChat, Chat(R"("tools": [{"type": "retrieval"}])")),
              StartsWith("tools[0].type: "));
  EXPECT_THAT(Error(Endpoint::kChat, Chat(R"("tools": [{"type": "function", "function": {"name": "a b"}}])")),
              StartsWith("tools[0].function.name: "));
  EXPECT_THAT(Error(Endpoint::kChat, Chat(R"("tools": [{"type": "function", "function":
                                              {"name": "a", "parameters": []}}])")),
              StartsWith("tools[0].function.parameters: "));
  EXPECT_THAT(Error(Endpoint::kChat, Chat(absl::StrCat(kTools, R"(, "tool_choice": "always")"))),
              StartsWith("tool_choice: "));
  EXPECT_THAT(Error(Endpoint::kChat, Chat(absl::StrCat(kTools, R"(, "tool_choice":
                                              {"type": "function", "function": {"name": "x"}})"))),
              StartsWith("tool_choice.function.name: "));
  EXPECT_THAT(Error(Endpoint::kChat, Chat(R"("tool_choice": "required")")),
              StartsWith("tool_choice: "));
  EXPECT_THAT(Error(Endpoint::kChat, Chat(absl::StrCat(kTools, R"(, "parallel_tool_calls": 1)"))),
              StartsWith("parallel_tool_calls: "));
  EXPECT_THAT(Error(Endpoint::kChat, Chat(absl::StrCat(kTools, R"(, "tool_choice": "required",
                                              "response_format": {"type": "json_object"})"))),
              StartsWith("tool_choice: "));
  EXPECT_THAT(Error(Endpoint::kChat, Chat(R"("functions": [{"name": "f"}])")),
              StartsWith("functions: "));
  EXPECT_THAT(Error(Endpoint::kCompletions, absl::StrCat(R"({"prompt": "x", )", kTools, "}")),
              StartsWith("tools: "));
  EXPECT_THAT(Error(Endpoint::kChat, R"({"messages": [{"role": "user", "content": "a",
                                         "tool_calls": []}]})"),
              StartsWith("messages[0].tool_calls: "));
  EXPECT_THAT(Error(Endpoint::kChat, R"({"messages": [{"role": "assistant", "content": null,
                                         "tool_calls": [{"id": "c", "function": {"name": "f",
                                         "arguments": 3}}]}]})"),
              StartsWith("messages[0].tool_calls[0].function.arguments: "));
}

tandem::v1::GenerateResponse Text(const std::string& text, tandem::v1::FinishReason finish) {
  tandem::v1::GenerateResponse m;
  tandem::v1::Token* t = m.add_tokens();
  t->set_id(1);
  t->set_text(text);
  t->set_raw(text);
  m.set_finish_reason(finish);
  if (finish != tandem::v1::FINISH_REASON_UNSPECIFIED) m.mutable_usage()->set_completion_tokens(3);
  return m;
}

TEST(OpenAiToolsTest, WholeReplyCarriesToolCallsAndNullContent) {
  const Request request = Parse(Endpoint::kChat, Chat(kTools));
  ResponseBuilder b(request, "r1", "m", 1);
  b.Add(Text("<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n"
             "</tool_call>",
             tandem::v1::FINISH_REASON_EOS));
  const Json body = Json::parse(b.Body());
  const Json& choice = body["choices"][0];
  EXPECT_EQ(choice["finish_reason"], "tool_calls");
  EXPECT_TRUE(choice["message"]["content"].is_null());
  ASSERT_EQ(choice["message"]["tool_calls"].size(), 1u);
  const Json& call = choice["message"]["tool_calls"][0];
  EXPECT_THAT(call["id"].get<std::string>(), StartsWith("call_"));
  EXPECT_EQ(call["type"], "function");
  EXPECT_EQ(call["function"]["name"], "get_weather");
  EXPECT_EQ(call["function"]["arguments"], R"({"city":"Paris"})");
}

// Qwen3-Coder writes values as text: the tools' parameter types convert them.
TEST(OpenAiToolsTest, Qwen3CoderValuesFollowTheToolsTypes) {
  const Request request = Parse(
      Endpoint::kChat, Chat(R"("tools": [{"type": "function", "function": {"name": "zip",
          "parameters": {"type": "object", "properties": {"code": {"type": "string"}}}}}])"),
      tools::ToolCallFormat::kQwen3Coder);
  ResponseBuilder b(request, "r1", "m", 1);
  b.Add(Text("<tool_call>\n<function=zip>\n<parameter=code>\n01234\n</parameter>\n</function>\n"
             "</tool_call>",
             tandem::v1::FINISH_REASON_EOS));
  const Json body = Json::parse(b.Body());
  EXPECT_EQ(body["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"],
            R"({"code":"01234"})");
}

TEST(OpenAiToolsTest, WholeReplyWithoutACallIsContent) {
  const Request request = Parse(Endpoint::kChat, Chat(kTools));
  ResponseBuilder b(request, "r1", "m", 1);
  b.Add(Text("It is sunny.", tandem::v1::FINISH_REASON_EOS));
  const Json body = Json::parse(b.Body());
  EXPECT_EQ(body["choices"][0]["message"]["content"], "It is sunny.");
  EXPECT_FALSE(body["choices"][0]["message"].contains("tool_calls"));
  EXPECT_EQ(body["choices"][0]["finish_reason"], "stop");
}

TEST(OpenAiToolsTest, ForcedReplyIsReadAsJsonCalls) {
  const Request request = Parse(
      Endpoint::kChat, Chat(absl::StrCat(kTools, R"(, "tool_choice": "required")")),
      tools::ToolCallFormat::kMistral);
  ResponseBuilder b(request, "r1", "m", 1);
  b.Add(Text(R"([{"name": "get_time", "arguments": {}}, {"name": "get_weather", "arguments": {"city": "Oslo"}}])",
             tandem::v1::FINISH_REASON_STOP));
  const Json body = Json::parse(b.Body());
  const Json& calls = body["choices"][0]["message"]["tool_calls"];
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(calls[0]["function"]["name"], "get_time");
  EXPECT_EQ(calls[1]["function"]["arguments"], R"({"city":"Oslo"})");
  EXPECT_NE(calls[0]["id"], calls[1]["id"]);
  // The model is Mistral's, whose templates take back only 9-character ids.
  EXPECT_EQ(calls[0]["id"].get<std::string>().size(), 9u);
}

std::vector<Json> Chunks(const std::vector<std::string>& events) {
  std::vector<Json> out;
  for (const std::string& e : events) {
    if (e != "data: [DONE]\n\n") out.push_back(Json::parse(e.substr(6)));
  }
  return out;
}

TEST(OpenAiToolsTest, StreamedContentThenCallDeltasThenToolCallsFinish) {
  const Request request = Parse(Endpoint::kChat, Chat(absl::StrCat(kTools, R"(, "stream": true)")));
  ResponseBuilder b(request, "r1", "m", 1);
  std::vector<Json> chunks = Chunks(b.Events(Text("Checking. <tool", tandem::v1::FINISH_REASON_UNSPECIFIED)));
  // The content goes out; "<tool" is held as a possible call.
  ASSERT_EQ(chunks.size(), 1u);
  EXPECT_EQ(chunks[0]["choices"][0]["delta"]["role"], "assistant");
  EXPECT_EQ(chunks[0]["choices"][0]["delta"]["content"], "Checking. ");
  // Inside the call: it starts once its name is known, and its arguments
  // stream as they come.
  chunks = Chunks(b.Events(Text("_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Ro",
                                tandem::v1::FINISH_REASON_UNSPECIFIED)));
  ASSERT_EQ(chunks.size(), 2u);
  const Json opening = chunks[0]["choices"][0]["delta"]["tool_calls"][0];
  EXPECT_EQ(opening["index"], 0);
  EXPECT_THAT(opening["id"].get<std::string>(), StartsWith("call_"));
  EXPECT_EQ(opening["type"], "function");
  EXPECT_EQ(opening["function"]["name"], "get_weather");
  EXPECT_EQ(opening["function"]["arguments"], "");
  const Json& first_piece = chunks[1]["choices"][0]["delta"]["tool_calls"][0];
  EXPECT_EQ(first_piece["index"], 0);
  EXPECT_FALSE(first_piece.contains("id"));
  EXPECT_EQ(first_piece["function"]["arguments"], R"({"city":"Ro)");
  EXPECT_TRUE(chunks[1]["choices"][0]["finish_reason"].is_null());
  chunks = Chunks(b.Events(Text("me\"}}</tool_call>", tandem::v1::FINISH_REASON_EOS)));
  ASSERT_EQ(chunks.size(), 2u);
  EXPECT_EQ(chunks[0]["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"], R"(me"})");
  EXPECT_EQ(chunks[1]["choices"][0]["finish_reason"], "tool_calls");
  EXPECT_EQ(chunks[1]["choices"][0]["delta"], Json::object());
  // The whole response names the call by the same id.
  ResponseBuilder whole(request, "r1", "m", 1);
  whole.Add(Text("Checking. <tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": "
                 "\"Rome\"}}</tool_call>",
                 tandem::v1::FINISH_REASON_EOS));
  const Json whole_call = Json::parse(whole.Body())["choices"][0]["message"]["tool_calls"][0];
  EXPECT_EQ(whole_call["id"], opening["id"]);
  EXPECT_EQ(whole_call["function"]["arguments"], R"({"city":"Rome"})");
}

TEST(OpenAiToolsTest, StreamedWithoutParallelCallsSendsTheFirstOnly) {
  const Request request = Parse(
      Endpoint::kChat, Chat(absl::StrCat(kTools, R"(, "stream": true, "parallel_tool_calls": false)")));
  ResponseBuilder b(request, "r1", "m", 1);
  const std::vector<Json> chunks = Chunks(b.Events(Text(
      "<tool_call>{\"name\": \"get_time\", \"arguments\": {}}</tool_call>"
      "<tool_call>{\"name\": \"get_weather\", \"arguments\": {}}</tool_call>",
      tandem::v1::FINISH_REASON_EOS)));
  int calls = 0;
  for (const Json& c : chunks) {
    const Json& delta = c["choices"][0]["delta"];
    if (delta.contains("tool_calls") && delta["tool_calls"][0].contains("id")) ++calls;
  }
  EXPECT_EQ(calls, 1);
}

TEST(OpenAiToolsTest, StreamedReplyWithoutToolsIsUnchanged) {
  const Request request = Parse(Endpoint::kChat, Chat(R"("stream": true)"));
  ResponseBuilder b(request, "r1", "m", 1);
  const std::vector<Json> chunks =
      Chunks(b.Events(Text("<tool_call>{}", tandem::v1::FINISH_REASON_LENGTH)));
  ASSERT_EQ(chunks.size(), 1u);
  EXPECT_EQ(chunks[0]["choices"][0]["delta"]["content"], "<tool_call>{}");
  EXPECT_EQ(chunks[0]["choices"][0]["finish_reason"], "length");
}

}  // namespace
}  // namespace tandem::gateway::openai
