// ChatTemplate over a model's own Jinja template: real templates render
// messages, tools and tool calls through the interpreter; the family
// rendering stands in when the template does not parse or fails on a
// conversation without tools; a failure with tools is the request's error.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <thread>
#include <sstream>
#include <string>
#include <vector>

#include "engine/gguf/gguf.h"
#include "engine/tokenizer/chat_template.h"
#include "engine/tokenizer/tokenizer.h"
#include "tests/test_paths.h"

namespace tandem::engine {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

std::string ReadTemplate(const std::string& name) {
  std::ifstream in(tandem::test_paths::SourceDir() + "/tests/engine/tokenizer/chat_templates/" +
                   name);
  std::stringstream ss;
  ss << in.rdbuf();
  EXPECT_FALSE(ss.str().empty()) << name;
  return ss.str();
}

constexpr char kTools[] = R"([{"type": "function", "function": {"name": "get_weather",
  "description": "Weather in a city.", "parameters": {"type": "object",
  "properties": {"city": {"type": "string"}}, "required": ["city"]}}}])";

std::vector<ChatMessage> ToolConversation() {
  std::vector<ChatMessage> m = {{"user", "Weather in Paris?"}};
  ChatMessage call{"assistant", ""};
  call.content_is_null = true;
  call.tool_calls.push_back({.id = "abcDEF123", .name = "get_weather", .arguments = R"({"city": "Paris"})"});
  m.push_back(call);
  ChatMessage result{"tool", R"({"temp": 21})"};
  result.tool_call_id = "abcDEF123";
  result.name = "get_weather";
  m.push_back(result);
  return m;
}

ChatRenderOptions Options() {
  ChatRenderOptions o;
  o.now = {2024, 7, 26, 0, 0, 0};
  return o;
}

TEST(ChatTemplateJinjaTest, RendersTheModelsTemplateWithoutItsLeadingBos) {
  const ChatTemplate t = ChatTemplate::FromModel(ReadTemplate("meta-llama-Llama-3.1-8B-Instruct.jinja"),
                                                 {.bos_token = "<|begin_of_text|>", .eos_token = "<|eot_id|>",
                                                  .strip_leading_bos = true});
  ASSERT_TRUE(t.renders_jinja());
  EXPECT_TRUE(t.recognised());
  EXPECT_EQ(t.family(), ChatFamily::kLlama3);
  const std::vector<ChatMessage> m = {{"system", "Be brief."}, {"user", "Hi"}};
  absl::StatusOr<std::string> out = t.Render(m, true, Options());
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out,
            "<|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\n"
            "Today Date: 26 Jul 2024\n\nBe brief.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\n"
            "Hi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n");
  // Without strip_leading_bos the template's own BOS stays.
  const ChatTemplate keep = ChatTemplate::FromModel(ReadTemplate("meta-llama-Llama-3.1-8B-Instruct.jinja"),
                                                    {.bos_token = "<|begin_of_text|>", .eos_token = "<|eot_id|>"});
  EXPECT_THAT(*keep.Render(m, true, Options()), StartsWith("<|begin_of_text|><|start_header_id|>"));
}

TEST(ChatTemplateJinjaTest, RendersToolsAndToolCalls) {
  const ChatTemplate t = ChatTemplate::FromModel(ReadTemplate("Qwen-Qwen2.5-7B-Instruct.jinja"),
                                                 {.bos_token = "", .eos_token = "<|im_end|>"});
  ChatRenderOptions o = Options();
  o.tools_json = kTools;
  absl::StatusOr<std::string> out = t.Render(ToolConversation(), true, o);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_THAT(*out, HasSubstr("<tools>\n{\"type\": \"function\", \"function\": {\"name\": \"get_weather\""));
  EXPECT_THAT(*out, HasSubstr("<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>"));
  EXPECT_THAT(*out, HasSubstr("<tool_response>\n{\"temp\": 21}\n</tool_response>"));
  EXPECT_THAT(*out, testing::EndsWith("<|im_start|>assistant\n"));
}

TEST(ChatTemplateJinjaTest, FamilyRenderingStandsInWhenTheTemplateFails) {
  // Gemma's template refuses a system message; the family code folds it
  // into the first user turn.
  const std::string gemma = ReadTemplate("google-gemma-7b-it.jinja");
  const ChatTemplate t = ChatTemplate::FromModel(gemma, {.bos_token = "<bos>", .eos_token = "<eos>"});
  ASSERT_TRUE(t.renders_jinja());
  const std::vector<ChatMessage> m = {{"system", "Be brief."}, {"user", "Hi"}};
  absl::StatusOr<std::string> jinja = t.RenderJinja(m, true, Options());
  EXPECT_EQ(jinja.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(jinja.status().message(), HasSubstr("messages: chat template: 1:"));
  EXPECT_THAT(jinja.status().message(), HasSubstr("System role not supported"));
  absl::StatusOr<std::string> out = t.Render(m, true, Options());
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out, *ChatTemplate::Detect(gemma).Render(m, true));
  // With tools the family code cannot stand in: the template's error is the
  // request's.
  ChatRenderOptions o = Options();
  o.tools_json = kTools;
  EXPECT_THAT(t.Render(m, true, o).status().message(), HasSubstr("System role not supported"));
}

TEST(ChatTemplateJinjaTest, TemplateThatDoesNotParseRendersByFamily) {
  const ChatTemplate t = ChatTemplate::FromModel("<|im_start|>{% if %}", ChatTemplateTokens{});
  EXPECT_FALSE(t.renders_jinja());
  EXPECT_EQ(t.family(), ChatFamily::kChatMl);
  const std::vector<ChatMessage> m = {{"user", "Hi"}};
  EXPECT_EQ(*t.Render(m, true), "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  ChatRenderOptions o = Options();
  o.tools_json = kTools;
  EXPECT_THAT(t.Render(m, true, o).status().message(), HasSubstr("tools: the chatml chat template cannot render tools"));
  EXPECT_EQ(t.RenderJinja(m, true, o).status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(ChatTemplateJinjaTest, ModelTemplateAgreesWithTheFamilyOnAPlainConversation) {
  const std::string chatml = ReadTemplate("teknium-OpenHermes-2.5-Mistral-7B.jinja");
  const ChatTemplate t = ChatTemplate::FromModel(chatml, ChatTemplateTokens{});
  const std::vector<ChatMessage> m = {{"system", "S"}, {"user", "U"}, {"assistant", "A"}, {"user", "V"}};
  for (bool prompt : {true, false}) {
    EXPECT_EQ(*t.Render(m, prompt), *ChatTemplate::Detect(chatml).Render(m, prompt));
  }
  EXPECT_EQ(ChatTemplate::FromModel("", ChatTemplateTokens{}).family(), ChatFamily::kPlain);
  EXPECT_FALSE(ChatTemplate::FromModel("", ChatTemplateTokens{}).renders_jinja());
}

TEST(ChatTemplateJinjaTest, BadToolsJsonNamesTheField) {
  const ChatTemplate t = ChatTemplate::FromModel(ReadTemplate("Qwen-Qwen2.5-7B-Instruct.jinja"), ChatTemplateTokens{});
  ChatRenderOptions o = Options();
  o.tools_json = "{\"not\": \"a list\"}";
  const std::vector<ChatMessage> m = {{"user", "Hi"}};
  EXPECT_THAT(std::string(t.Render(m, true, o).status().message()), StartsWith("tools: not a JSON array"));
}

TEST(ChatTemplateJinjaTest, OneTemplateRendersOnManyThreads) {
  const ChatTemplate t = ChatTemplate::FromModel(ReadTemplate("Qwen-Qwen3-0.6B.jinja"), ChatTemplateTokens{});
  ChatRenderOptions o = Options();
  o.tools_json = kTools;
  std::vector<ChatMessage> m = ToolConversation();
  m[1].content_is_null = false;  // Qwen3's template needs a string
  const absl::StatusOr<std::string> first = t.Render(m, true, o);
  ASSERT_TRUE(first.ok()) << first.status();
  const std::string want = *first;
  std::vector<std::thread> threads;
  std::vector<int> mismatches(4, 0);
  for (int k = 0; k < 4; ++k) {
    threads.emplace_back([&, k] {
      for (int i = 0; i < 50; ++i) {
        absl::StatusOr<std::string> got = t.Render(m, true, o);
        if (!got.ok() || *got != want) ++mismatches[static_cast<size_t>(k)];
      }
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(mismatches, std::vector<int>(4, 0));
}

TEST(ChatTemplateJinjaTest, TakesItsTokensFromTheModel) {
  const std::string path = tandem::test_paths::StoriesPath();
  absl::StatusOr<std::unique_ptr<GgufFile>> file = GgufFile::Open(path, {.require_tensor_data = false});
  if (!file.ok()) GTEST_SKIP() << path << ": " << file.status();
  absl::StatusOr<ChatTemplate> from_file = ChatTemplate::FromGguf(**file);
  ASSERT_TRUE(from_file.ok()) << from_file.status();
  EXPECT_FALSE(from_file->renders_jinja());  // stories260K has no chat template
  EXPECT_EQ(from_file->family(), ChatFamily::kPlain);
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer = Tokenizer::FromGguf(**file);
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  ASSERT_TRUE((*tokenizer)->add_bos());
  const ChatTemplate t = ChatTemplate::FromModel(
      "{{ bos_token }}{% for m in messages %}{{ m.content }}{{ eos_token }}{% endfor %}", **tokenizer);
  const std::vector<ChatMessage> m = {{"user", "Hi"}};
  // The tokenizer adds BOS itself, so the template's is dropped.
  EXPECT_EQ(*t.Render(m, true), "Hi" + (*tokenizer)->TokenText((*tokenizer)->eos_id()));
}

}  // namespace
}  // namespace tandem::engine
