// Tools for templates that cannot render them: the system-prompt
// description, the rewritten tool messages, and the choice between the
// model's own rendering and the description.
#include "gateway/tools/tool_prompt.h"
#include "tests/test_paths.h"

#include <fstream>
#include <sstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace tandem::gateway::tools {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kTools[] =
    R"([{"type": "function", "function": {"name": "get_weather", "description": "Weather now",)"
    R"( "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}])";

std::vector<engine::ChatMessage> Conversation() {
  std::vector<engine::ChatMessage> m;
  m.push_back({.role = "system", .content = "Be brief."});
  m.push_back({.role = "user", .content = "Weather in Paris?"});
  engine::ChatMessage call{.role = "assistant", .content = "", .content_is_null = true};
  call.tool_calls.push_back({.id = "call_1", .name = "get_weather", .arguments = R"({"city":"Paris"})"});
  m.push_back(call);
  m.push_back({.role = "tool", .content = "18C", .tool_call_id = "call_1", .name = "get_weather"});
  return m;
}

TEST(ToolPromptTest, ValidatesTheToolsArray) {
  EXPECT_TRUE(ValidateToolsJson("", "tools_json").ok());
  EXPECT_TRUE(ValidateToolsJson(kTools, "tools_json").ok());
  for (const char* bad : {"{}", "[1]", R"([{"type": "function"}])",
                          R"([{"type": "function", "function": {"name": ""}}])",
                          R"([{"type": "function", "function": {"name": "f", "parameters": 3}}])",
                          "not json"}) {
    const absl::Status s = ValidateToolsJson(bad, "tools_json");
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(std::string(s.message()), ::testing::StartsWith("tools_json")) << bad;
  }
}

TEST(ToolPromptTest, DescribesToolsAndRewritesToolMessages) {
  const std::vector<engine::ChatMessage> out = DescribeTools(Conversation(), kTools);
  ASSERT_EQ(out.size(), 4u);
  EXPECT_EQ(out[0].role, "system");
  EXPECT_THAT(out[0].content, ::testing::StartsWith("Be brief.\n\nYou can call"));
  EXPECT_THAT(out[0].content, HasSubstr(R"({"name":"get_weather","description":"Weather now")"));
  EXPECT_THAT(out[0].content, HasSubstr(R"({"tool_calls": [{"name": )"));
  EXPECT_EQ(out[2].role, "assistant");
  EXPECT_EQ(out[2].content, R"({"tool_calls":[{"name":"get_weather","arguments":{"city":"Paris"}}]})");
  EXPECT_TRUE(out[2].tool_calls.empty());
  EXPECT_EQ(out[3].role, "user");
  EXPECT_EQ(out[3].content,
            R"({"tool_result":{"tool_call_id":"call_1","name":"get_weather","content":"18C"}})");
  // No system message: one is added.
  const std::vector<engine::ChatMessage> user_only =
      DescribeTools(std::vector<engine::ChatMessage>{{.role = "user", .content = "hi"}}, kTools);
  ASSERT_EQ(user_only.size(), 2u);
  EXPECT_EQ(user_only[0].role, "system");
}

TEST(ToolPromptTest, FamilyRenderingGetsTheDescription) {
  const engine::ChatTemplate plain = engine::ChatTemplate::Detect("");
  absl::StatusOr<std::string> text = RenderWithTools(plain, Conversation(), kTools);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_THAT(*text, HasSubstr("get_weather"));
  EXPECT_THAT(*text, HasSubstr("tool_result"));
  EXPECT_TRUE(UsesTools(Conversation(), ""));
  EXPECT_FALSE(UsesTools(std::vector<engine::ChatMessage>{{.role = "user", .content = "x"}}, ""));
}

std::string Template(const std::string& name) {
  std::ifstream in(tandem::test_paths::SourceDir() + "/tests/engine/tokenizer/chat_templates/" +
                   name + ".jinja");
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(ToolPromptTest, ATemplateWithToolsRendersThemItself) {
  const engine::ChatTemplate qwen = engine::ChatTemplate::FromModel(
      Template("Qwen-Qwen2.5-7B-Instruct"), engine::ChatTemplateTokens{.bos_token = "", .eos_token = "<|im_end|>", .strip_leading_bos = false});
  ASSERT_TRUE(qwen.renders_jinja());
  absl::StatusOr<std::string> text = RenderWithTools(qwen, Conversation(), kTools);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_THAT(*text, HasSubstr("<tools>"));
  EXPECT_THAT(*text, HasSubstr("<tool_call>"));
  EXPECT_THAT(*text, HasSubstr("<tool_response>\n18C\n</tool_response>"));
  EXPECT_THAT(*text, Not(HasSubstr("You can call the following functions")));
}

TEST(ToolPromptTest, LlamaAndMistralTemplatesRenderToolsThemselves) {
  const engine::ChatTemplate llama = engine::ChatTemplate::FromModel(
      Template("meta-llama-Llama-3.1-8B-Instruct"),
      engine::ChatTemplateTokens{.bos_token = "<|begin_of_text|>", .eos_token = "<|eot_id|>",
                                 .strip_leading_bos = false});
  ASSERT_TRUE(llama.renders_jinja());
  absl::StatusOr<std::string> text = RenderWithTools(llama, Conversation(), kTools);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_THAT(*text, HasSubstr("\"name\": \"get_weather\""));
  EXPECT_THAT(*text, HasSubstr("<|start_header_id|>ipython<|end_header_id|>"));
  EXPECT_THAT(*text, Not(HasSubstr("You can call the following functions")));

  // Mistral's templates take only 9-character call ids (what the front
  // makes for a Mistral model).
  std::vector<engine::ChatMessage> m = Conversation();
  m[2].tool_calls[0].id = "a1B2c3D4e";
  m[3].tool_call_id = "a1B2c3D4e";
  const engine::ChatTemplate mistral = engine::ChatTemplate::FromModel(
      Template("mistralai-Mistral-Nemo-Instruct-2407"),
      engine::ChatTemplateTokens{.bos_token = "<s>", .eos_token = "</s>",
                                 .strip_leading_bos = false});
  ASSERT_TRUE(mistral.renders_jinja());
  text = RenderWithTools(mistral, m, kTools);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_THAT(*text, HasSubstr("[AVAILABLE_TOOLS]"));
  EXPECT_THAT(*text, HasSubstr("[TOOL_CALLS]"));
  EXPECT_THAT(*text, HasSubstr("[TOOL_RESULTS]"));
}

TEST(ToolPromptTest, ATemplateThatIgnoresToolsGetsTheDescription) {
  const engine::ChatTemplate gemma = engine::ChatTemplate::FromModel(
      Template("google-gemma-2-2b-it"), engine::ChatTemplateTokens{.bos_token = "<bos>", .eos_token = "<eos>", .strip_leading_bos = false});
  ASSERT_TRUE(gemma.renders_jinja());
  const std::vector<engine::ChatMessage> user = {{.role = "user", .content = "Weather in Paris?"}};
  absl::StatusOr<std::string> text = RenderWithTools(gemma, user, kTools);
  // Gemma 2's template refuses a system role: the description then goes
  // through the family rendering, which folds it into the user's turn.
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_THAT(*text, HasSubstr("get_weather"));
  EXPECT_THAT(*text, HasSubstr("<start_of_turn>model\n"));
}

}  // namespace
}  // namespace tandem::gateway::tools
