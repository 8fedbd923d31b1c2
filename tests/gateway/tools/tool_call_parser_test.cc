// Tool calls read from generated text per model family, whole and streamed
// (every split of the text into pieces must give the same content and calls,
// and content must never be held longer than a marker could need).
#include "gateway/tools/tool_call_parser.h"
#include "tests/test_paths.h"

#include <fstream>
#include <random>
#include <sstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace tandem::gateway::tools {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

MATCHER_P2(Call, name, arguments, "") {
  return arg.name == name && arg.arguments == arguments;
}

ToolCallChunk Whole(ToolCallFormat format, std::string_view text, bool parallel = true) {
  return ToolCallParser::ParseAll(format, parallel, text);
}

// The text fed in pieces of `step` bytes.
ToolCallChunk Streamed(ToolCallFormat format, std::string_view text, size_t step,
                       bool parallel = true) {
  ToolCallParser parser(format, parallel);
  ToolCallChunk all;
  auto add = [&](ToolCallChunk c) {
    all.content += c.content;
    for (ParsedToolCall& call : c.calls) all.calls.push_back(std::move(call));
    for (ToolCallDelta& d : c.deltas) all.deltas.push_back(std::move(d));
  };
  for (size_t i = 0; i < text.size(); i += step) add(parser.Feed(text.substr(i, step)));
  add(parser.Finish());
  return all;
}

// The calls the deltas add up to: a call starts with its name, then its
// arguments accumulate; indices come in order.
std::vector<ParsedToolCall> FromDeltas(const std::vector<ToolCallDelta>& deltas) {
  std::vector<ParsedToolCall> calls;
  for (const ToolCallDelta& d : deltas) {
    if (!d.name.empty()) {
      EXPECT_EQ(d.index, static_cast<int>(calls.size()));
      EXPECT_EQ(d.arguments, "");
      calls.push_back({.name = d.name, .arguments = ""});
      continue;
    }
    EXPECT_LT(d.index, static_cast<int>(calls.size()));
    if (d.index < static_cast<int>(calls.size())) calls[d.index].arguments += d.arguments;
  }
  return calls;
}

// Whole and every piece size agree, and the deltas add up to the calls.
void ExpectSameStreamed(ToolCallFormat format, std::string_view text) {
  const ToolCallChunk whole = Whole(format, text);
  for (size_t step = 1; step <= text.size(); ++step) {
    const ToolCallChunk s = Streamed(format, text, step);
    const std::vector<ParsedToolCall> from_deltas = FromDeltas(s.deltas);
    ASSERT_EQ(from_deltas.size(), whole.calls.size()) << "step " << step << ": " << text;
    for (size_t i = 0; i < from_deltas.size(); ++i) {
      EXPECT_EQ(from_deltas[i].name, whole.calls[i].name) << "step " << step;
      EXPECT_EQ(from_deltas[i].arguments, whole.calls[i].arguments) << "step " << step;
    }
    EXPECT_EQ(s.content, whole.content) << "step " << step << ": " << text;
    ASSERT_EQ(s.calls.size(), whole.calls.size()) << "step " << step << ": " << text;
    for (size_t i = 0; i < s.calls.size(); ++i) {
      EXPECT_EQ(s.calls[i].name, whole.calls[i].name);
      EXPECT_EQ(s.calls[i].arguments, whole.calls[i].arguments);
    }
  }
}

TEST(ToolCallParserTest, HermesCallsAfterContent) {
  const std::string text =
      "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
      "\"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": "
      "{}}\n</tool_call>";
  const ToolCallChunk r = Whole(ToolCallFormat::kHermes, text);
  EXPECT_EQ(r.content, "Let me check.\n");
  EXPECT_THAT(r.calls, ElementsAre(Call("get_weather", R"({"city":"Paris"})"),
                                   Call("get_time", "{}")));
  ExpectSameStreamed(ToolCallFormat::kHermes, text);
}

TEST(ToolCallParserTest, ArgumentsStreamBeforeTheCallIsComplete) {
  ToolCallParser parser(ToolCallFormat::kHermes, true);
  ToolCallChunk c = parser.Feed("<tool_call>\n{\"name\": \"write\", ");
  EXPECT_TRUE(c.deltas.empty());
  c = parser.Feed("\"arguments\": {\"text\": \"Once upon");
  ASSERT_EQ(c.deltas.size(), 2u);
  EXPECT_EQ(c.deltas[0].index, 0);
  EXPECT_EQ(c.deltas[0].name, "write");
  EXPECT_EQ(c.deltas[1].arguments, "{\"text\":\"Once upon");
  EXPECT_TRUE(c.calls.empty());
  c = parser.Feed(" a time\"}}\n</tool_call>");
  ASSERT_EQ(c.calls.size(), 1u);
  EXPECT_EQ(c.calls[0].arguments, "{\"text\":\"Once upon a time\"}");
  ASSERT_EQ(c.deltas.size(), 1u);
  EXPECT_EQ(c.deltas[0].arguments, " a time\"}");
  // The forced path's array: each call streams in turn.
  ToolCallParser forced(ToolCallFormat::kJson, true);
  c = forced.Feed("[{\"name\": \"a\", \"arguments\": {\"x\": 1}}, {\"name\": \"b\", \"arguments\": {");
  ASSERT_EQ(c.deltas.size(), 4u);
  EXPECT_EQ(c.deltas[2].index, 1);
  EXPECT_EQ(c.deltas[2].name, "b");
  EXPECT_EQ(c.deltas[3].arguments, "{");
  // Arguments before the name: the call comes whole once complete.
  ToolCallParser late(ToolCallFormat::kHermes, true);
  EXPECT_TRUE(late.Feed("<tool_call>{\"arguments\": {\"x\": 1}, \"name\": \"f\"").deltas.empty());
  ExpectSameStreamed(ToolCallFormat::kHermes,
                     "<tool_call>{\"arguments\": {\"x\": 1}, \"name\": \"f\"}</tool_call>");
}

TEST(ToolCallParserTest, HermesWithoutParallelKeepsTheFirstCall) {
  const std::string text =
      "<tool_call>{\"name\": \"a\", \"arguments\": {}}</tool_call>\n"
      "<tool_call>{\"name\": \"b\", \"arguments\": {}}</tool_call>";
  const ToolCallChunk r = Whole(ToolCallFormat::kHermes, text, /*parallel=*/false);
  EXPECT_EQ(r.content, "");
  EXPECT_THAT(r.calls, ElementsAre(Call("a", "{}")));
  for (size_t step = 1; step <= text.size(); ++step) {
    const ToolCallChunk s = Streamed(ToolCallFormat::kHermes, text, step, /*parallel=*/false);
    EXPECT_THAT(s.calls, ElementsAre(Call("a", "{}")));
    EXPECT_THAT(FromDeltas(s.deltas), ElementsAre(Call("a", "{}"))) << step;
  }
  const std::string forced = R"([{"name": "a", "arguments": {}}, {"name": "b", "arguments": {}}])";
  for (size_t step = 1; step <= forced.size(); ++step) {
    const ToolCallChunk s = Streamed(ToolCallFormat::kJson, forced, step, /*parallel=*/false);
    EXPECT_THAT(FromDeltas(s.deltas), ElementsAre(Call("a", "{}"))) << step;
  }
}

TEST(ToolCallParserTest, HermesUnclosedCallAtTheEndStillCounts) {
  const std::string text = "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": 1}}\n";
  const ToolCallChunk r = Whole(ToolCallFormat::kHermes, text);
  EXPECT_THAT(r.calls, ElementsAre(Call("f", R"({"x":1})")));
  EXPECT_EQ(r.content, "");
  ExpectSameStreamed(ToolCallFormat::kHermes, text);
}

TEST(ToolCallParserTest, HermesBrokenCallIsContent) {
  const std::string text = "a <tool_call>not json</tool_call> b";
  const ToolCallChunk r = Whole(ToolCallFormat::kHermes, text);
  EXPECT_THAT(r.calls, IsEmpty());
  EXPECT_EQ(r.content, text);
  ExpectSameStreamed(ToolCallFormat::kHermes, text);
  // Cut off inside the call (max_tokens): the text as generated.
  EXPECT_EQ(Whole(ToolCallFormat::kHermes, "x<tool_call>{\"name\": \"f\", \"argu").content,
            "x<tool_call>{\"name\": \"f\", \"argu");
}

TEST(ToolCallParserTest, AnArrayCutShortKeepsItsCompleteCalls) {
  const std::string text =
      R"([ { "name" : "f" , "arguments" : { "n" : -30 } }, { "name" : "f")";
  const ToolCallChunk r = Whole(ToolCallFormat::kJson, text);
  EXPECT_THAT(r.calls, ElementsAre(Call("f", R"({"n":-30})")));
  EXPECT_EQ(r.content, "");
  ExpectSameStreamed(ToolCallFormat::kJson, text);
  // Nothing complete: the text as generated.
  EXPECT_EQ(Whole(ToolCallFormat::kJson, R"([{"name": "f", "argu)").content,
            R"([{"name": "f", "argu)");
}

TEST(ToolCallParserTest, ContentStreamsAtOnceAndOnlyAMarkerPrefixIsHeld) {
  ToolCallParser parser(ToolCallFormat::kHermes, true);
  EXPECT_EQ(parser.Feed("Hello").content, "Hello");
  EXPECT_EQ(parser.Feed(" wor").content, " wor");
  EXPECT_EQ(parser.Feed("ld <tool").content, "ld ");  // "<tool" may open a call
  EXPECT_EQ(parser.Feed("s>").content, "<tools>");     // it did not
  ToolCallChunk c = parser.Feed("<tool_call>{\"name\": \"f\", ");
  EXPECT_EQ(c.content, "");
  EXPECT_THAT(c.calls, IsEmpty());
  c = parser.Feed("\"arguments\": {}}</tool_call>");
  EXPECT_THAT(c.calls, ElementsAre(Call("f", "{}")));
  EXPECT_EQ(parser.calls(), 1);
  c = parser.Finish();
  EXPECT_EQ(c.content, "");
}

TEST(ToolCallParserTest, Llama3JsonWithAndWithoutPythonTag) {
  const std::string plain = "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\"}}";
  EXPECT_THAT(Whole(ToolCallFormat::kLlama3Json, plain).calls,
              ElementsAre(Call("get_weather", R"({"city":"Oslo"})")));
  ExpectSameStreamed(ToolCallFormat::kLlama3Json, plain);
  const std::string tagged = "<|python_tag|>" + plain + "; {\"name\": \"b\", \"parameters\": {}}";
  const ToolCallChunk r = Whole(ToolCallFormat::kLlama3Json, tagged);
  EXPECT_EQ(r.content, "");
  EXPECT_THAT(r.calls, ElementsAre(Call("get_weather", R"({"city":"Oslo"})"), Call("b", "{}")));
  ExpectSameStreamed(ToolCallFormat::kLlama3Json, tagged);
}

TEST(ToolCallParserTest, JsonThatIsNoCallIsContent) {
  const std::string text = "{\"answer\": 42} and more";
  const ToolCallChunk r = Whole(ToolCallFormat::kLlama3Json, text);
  EXPECT_THAT(r.calls, IsEmpty());
  EXPECT_EQ(r.content, text);
  ExpectSameStreamed(ToolCallFormat::kLlama3Json, text);
  // Python code after the tag (a built-in tool) is not a JSON call.
  EXPECT_EQ(Whole(ToolCallFormat::kLlama3Json, "<|python_tag|>brave_search.call(q=\"x\")").content,
            "<|python_tag|>brave_search.call(q=\"x\")");
}

TEST(ToolCallParserTest, MistralArrayAfterMarker) {
  const std::string text =
      "[TOOL_CALLS] [{\"name\": \"a\", \"arguments\": {\"k\": [1, 2]}, \"id\": \"abcdefghi\"}, "
      "{\"name\": \"b\", \"arguments\": \"{\\\"s\\\": \\\"]}\\\"}\"}]";
  const ToolCallChunk r = Whole(ToolCallFormat::kMistral, text);
  EXPECT_EQ(r.content, "");
  EXPECT_THAT(r.calls, ElementsAre(Call("a", R"({"k":[1,2]})"), Call("b", R"({"s":"]}"})")));
  ExpectSameStreamed(ToolCallFormat::kMistral, text);
}

TEST(ToolCallParserTest, MistralV11NameArgs) {
  const std::string text =
      "Sure.[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Rome\"}[TOOL_CALLS]get_time[CALL_ID]"
      "a1b2c3d4e[ARGS]{}";
  const ToolCallChunk r = Whole(ToolCallFormat::kMistral, text);
  EXPECT_EQ(r.content, "Sure.");
  EXPECT_THAT(r.calls, ElementsAre(Call("get_weather", R"({"city":"Rome"})"),
                                   Call("get_time", "{}")));
  ExpectSameStreamed(ToolCallFormat::kMistral, text);
}

TEST(ToolCallParserTest, MistralWithTheMarkerTextDropped) {
  // [TOOL_CALLS] is a control token: the generated text may lack it.
  const std::string text = " [{\"name\": \"a\", \"arguments\": {}}]";
  EXPECT_THAT(Whole(ToolCallFormat::kMistral, text).calls, ElementsAre(Call("a", "{}")));
  ExpectSameStreamed(ToolCallFormat::kMistral, text);
  // A bracket that opens no call is content, and is not held for long.
  ToolCallParser parser(ToolCallFormat::kMistral, true);
  EXPECT_EQ(parser.Feed("[").content, "");
  EXPECT_EQ(parser.Feed("x] y").content, "[x] y");
}

TEST(ToolCallParserTest, GraniteArray) {
  const std::string text = "<|tool_call|>[{\"name\": \"f\", \"arguments\": {\"a\": true}}]";
  EXPECT_THAT(Whole(ToolCallFormat::kGranite, text).calls, ElementsAre(Call("f", R"({"a":true})")));
  ExpectSameStreamed(ToolCallFormat::kGranite, text);
}

TEST(ToolCallParserTest, Qwen3CoderXml) {
  const std::string text =
      "I will look.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
      "<parameter=days>\n3\n</parameter>\n<parameter=zip>\n75001\n</parameter>\n"
      "<parameter=opts>\n{\"metric\": true}\n</parameter>\n</function>\n</tool_call>";
  // Without the tools' types: JSON where the text is JSON.
  ToolCallChunk r = Whole(ToolCallFormat::kQwen3Coder, text);
  EXPECT_EQ(r.content, "I will look.\n");
  EXPECT_THAT(r.calls, ElementsAre(Call(
                           "get_weather", R"({"city":"Paris","days":3,"zip":75001,"opts":{"metric":true}})")));
  ExpectSameStreamed(ToolCallFormat::kQwen3Coder, text);
  // With them: a string parameter stays a string.
  auto types = std::make_shared<const ParameterTypes>(ParameterTypesFromTools(
      R"([{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
          "properties": {"city": {"type": "string"}, "zip": {"type": "string"}, "days": {"type": "integer"}}}}}])"));
  r = ToolCallParser::ParseAll(ToolCallFormat::kQwen3Coder, true, text, types);
  EXPECT_THAT(r.calls, ElementsAre(Call(
                           "get_weather", R"({"city":"Paris","days":3,"zip":"75001","opts":{"metric":true}})")));
  // Not of the shape: content.
  const std::string bad = "<tool_call>\n<func>x</func>\n</tool_call>";
  EXPECT_EQ(Whole(ToolCallFormat::kQwen3Coder, bad).content, bad);
}

TEST(ToolCallParserTest, GenericJsonShapes) {
  EXPECT_THAT(Whole(ToolCallFormat::kJson,
                    R"({"tool_calls": [{"name": "a", "arguments": {}}, {"name": "b", "arguments": {"x": "y"}}]})")
                  .calls,
              ElementsAre(Call("a", "{}"), Call("b", R"({"x":"y"})")));
  EXPECT_THAT(Whole(ToolCallFormat::kJson, R"({"tool_call": {"name": "a", "arguments": {}}})").calls,
              ElementsAre(Call("a", "{}")));
  EXPECT_THAT(Whole(ToolCallFormat::kJson, R"( [{"name": "a", "arguments": {}}] )").calls,
              ElementsAre(Call("a", "{}")));
  EXPECT_THAT(
      Whole(ToolCallFormat::kJson, R"({"type": "function", "function": {"name": "a", "arguments": "{}"}})")
          .calls,
      ElementsAre(Call("a", "{}")));
  // Other keys, or no arguments: some other JSON, kept as content.
  EXPECT_THAT(Whole(ToolCallFormat::kJson, R"({"name": "Bob", "age": 3})").calls, IsEmpty());
  EXPECT_THAT(Whole(ToolCallFormat::kJson, R"({"name": "Bob"})").calls, IsEmpty());
  EXPECT_THAT(Whole(ToolCallFormat::kJson, "[]").calls, IsEmpty());
  const std::string plain = "Just text, with {braces} inside.";
  EXPECT_EQ(Whole(ToolCallFormat::kJson, plain).content, plain);
  ExpectSameStreamed(ToolCallFormat::kJson, plain);
}

TEST(ToolCallParserTest, EveryFormatReadsABareJsonReply) {
  for (ToolCallFormat f : {ToolCallFormat::kJson, ToolCallFormat::kHermes,
                           ToolCallFormat::kLlama3Json, ToolCallFormat::kMistral,
                           ToolCallFormat::kGranite, ToolCallFormat::kQwen3Coder}) {
    EXPECT_THAT(Whole(f, R"([{"name": "a", "arguments": {"n": 1}}])").calls,
                ElementsAre(Call("a", R"({"n":1})")))
        << ToolCallFormatName(f);
  }
  EXPECT_THAT(Whole(ToolCallFormat::kNone, R"({"name": "a", "arguments": {}})").calls, IsEmpty());
}

TEST(ToolCallParserTest, WhitespaceBetweenCallsIsDroppedButTextAfterIsKept) {
  const std::string text =
      "<tool_call>{\"name\": \"a\", \"arguments\": {}}</tool_call>\n\nDone: see above.";
  const ToolCallChunk r = Whole(ToolCallFormat::kHermes, text);
  EXPECT_THAT(r.calls, ElementsAre(Call("a", "{}")));
  EXPECT_EQ(r.content, "Done: see above.");
  ExpectSameStreamed(ToolCallFormat::kHermes, text);
}

TEST(ToolCallParserTest, JsonValueEndHonoursStrings) {
  EXPECT_EQ(JsonValueEnd(R"({"a": "}"} tail)"), 10u);
  EXPECT_EQ(JsonValueEnd(R"(["\"]", [1]] x)"), 12u);
  EXPECT_EQ(JsonValueEnd(R"({"a": [)"), std::string_view::npos);
}

TEST(ToolCallParserTest, NamesRoundTripAndIdsAreStable) {
  for (std::string_view name :
       {"none", "json", "hermes", "llama3_json", "mistral", "granite", "qwen3_coder"}) {
    absl::StatusOr<ToolCallFormat> f = ToolCallFormatFromName(name);
    ASSERT_TRUE(f.ok()) << name;
    EXPECT_EQ(ToolCallFormatName(*f), name);
  }
  EXPECT_FALSE(ToolCallFormatFromName("qwen").ok());
  const std::string id = ToolCallId("r1/0/0", ToolCallFormat::kHermes);
  EXPECT_EQ(id, ToolCallId("r1/0/0", ToolCallFormat::kHermes));
  EXPECT_NE(id, ToolCallId("r1/0/1", ToolCallFormat::kHermes));
  EXPECT_EQ(id.size(), 29u);
  EXPECT_EQ(id.substr(0, 5), "call_");
  EXPECT_EQ(ToolCallId("r1/0/0", ToolCallFormat::kMistral).size(), 9u);
}

// Seeded random replies made of the pieces calls are made of: whatever
// they are, streamed in random pieces they read as they do whole
// (tests/fuzz/tool_call_fuzz.cc does the same with libFuzzer).
TEST(ToolCallParserTest, RandomRepliesReadTheSameStreamed) {
  const std::vector<std::string> pieces = {
      "<tool_call>", "</tool_call>", "[TOOL_CALLS]", "[ARGS]", "[CALL_ID]", "<|python_tag|>",
      "<|tool_call|>", "<function=f>", "<parameter=x>", "</parameter>", "</function>", "{",
      "}", "[", "]", "\"", "\\", ",", ":", ";", " ", "\n", "\"name\"", "\"arguments\"",
      "\"parameters\"", "\"f\"", "1", "x", "<tool", "[TOOL", "é"};
  const ToolCallFormat formats[] = {ToolCallFormat::kNone,       ToolCallFormat::kJson,
                                    ToolCallFormat::kHermes,     ToolCallFormat::kLlama3Json,
                                    ToolCallFormat::kMistral,    ToolCallFormat::kGranite,
                                    ToolCallFormat::kQwen3Coder};
  std::mt19937 rng(7);
  for (int i = 0; i < 3000; ++i) {
    std::string text;
    const int n = 1 + static_cast<int>(rng() % 24);
    for (int j = 0; j < n; ++j) text += pieces[rng() % pieces.size()];
    const ToolCallFormat format = formats[rng() % 7];
    const bool parallel = rng() % 2 == 0;
    const ToolCallChunk whole = Whole(format, text, parallel);
    const ToolCallChunk streamed = Streamed(format, text, 1 + rng() % 8, parallel);
    ASSERT_EQ(streamed.content, whole.content) << ToolCallFormatName(format) << ": " << text;
    ASSERT_EQ(streamed.calls.size(), whole.calls.size()) << ToolCallFormatName(format) << ": " << text;
    for (size_t k = 0; k < whole.calls.size(); ++k) {
      EXPECT_EQ(streamed.calls[k].name, whole.calls[k].name);
      EXPECT_EQ(streamed.calls[k].arguments, whole.calls[k].arguments);
    }
  }
}

std::string Template(const std::string& name) {
  std::ifstream in(tandem::test_paths::SourceDir() + "/tests/engine/tokenizer/chat_templates/" +
                   name + ".jinja");
  std::stringstream s;
  s << in.rdbuf();
  EXPECT_FALSE(s.str().empty()) << name;
  return s.str();
}

TEST(ToolCallParserTest, DetectsTheFamilyFromRealTemplates) {
  EXPECT_EQ(DetectToolCallFormat(Template("Qwen-Qwen2.5-7B-Instruct")), ToolCallFormat::kHermes);
  EXPECT_EQ(DetectToolCallFormat(Template("Qwen-Qwen3-0.6B")), ToolCallFormat::kHermes);
  EXPECT_EQ(DetectToolCallFormat(Template("Qwen3-Coder")), ToolCallFormat::kQwen3Coder);
  EXPECT_EQ(DetectToolCallFormat(Template("Qwen3.5-4B")), ToolCallFormat::kQwen3Coder);
  EXPECT_EQ(DetectToolCallFormat(Template("NousResearch-Hermes-3-Llama-3.1-8B-tool_use")),
            ToolCallFormat::kHermes);
  EXPECT_EQ(DetectToolCallFormat(Template("meta-llama-Llama-3.1-8B-Instruct")),
            ToolCallFormat::kLlama3Json);
  EXPECT_EQ(DetectToolCallFormat(Template("meta-llama-Llama-3.2-3B-Instruct")),
            ToolCallFormat::kLlama3Json);
  EXPECT_EQ(DetectToolCallFormat(Template("meta-llama-Llama-3.3-70B-Instruct")),
            ToolCallFormat::kLlama3Json);
  EXPECT_EQ(DetectToolCallFormat(Template("mistralai-Mistral-Nemo-Instruct-2407")),
            ToolCallFormat::kMistral);
  EXPECT_EQ(DetectToolCallFormat(Template("Mistral-Small-3.2-24B-Instruct-2506")),
            ToolCallFormat::kMistral);
  EXPECT_EQ(DetectToolCallFormat(Template("ibm-granite-granite-3.0-8b-instruct")),
            ToolCallFormat::kGranite);
  EXPECT_EQ(DetectToolCallFormat(Template("google-gemma-2-2b-it")), ToolCallFormat::kJson);
  EXPECT_EQ(DetectToolCallFormat(""), ToolCallFormat::kJson);
}

}  // namespace
}  // namespace tandem::gateway::tools
