// ChatTemplate: each family recognised from the markers of a real model's
// `tokenizer.chat_template` (Jinja sources of ChatML, Llama 2, Mistral,
// Llama 3, Gemma, Phi-3 and Zephyr models), and rendered exactly as
// llama.cpp's built-in templates render the same conversation.
#include "engine/tokenizer/chat_template.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace tandem::engine {
namespace {

using ::testing::HasSubstr;

const std::vector<ChatMessage>& Conversation() {
  static const std::vector<ChatMessage> c = {
      {"system", "You are a helpful assistant"},
      {"user", "Hello"},
      {"assistant", "Hi there"},
      {"user", "Who are you"},
      {"assistant", "   I am an assistant   "},
      {"user", "Another question"},
  };
  return c;
}

std::string Render(std::string_view name, bool add_generation_prompt = true) {
  absl::StatusOr<ChatTemplate> t = ChatTemplate::FromName(name);
  EXPECT_TRUE(t.ok()) << t.status();
  absl::StatusOr<std::string> s = t->Render(Conversation(), add_generation_prompt);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? *s : "";
}

TEST(ChatTemplateTest, RendersEachFamily) {
  EXPECT_EQ(Render("chatml"),
            "<|im_start|>system\nYou are a helpful assistant<|im_end|>\n"
            "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\nHi there<|im_end|>\n"
            "<|im_start|>user\nWho are you<|im_end|>\n"
            "<|im_start|>assistant\n   I am an assistant   <|im_end|>\n"
            "<|im_start|>user\nAnother question<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(Render("llama2"),
            "[INST] You are a helpful assistant\nHello [/INST]Hi there</s>"
            "[INST] Who are you [/INST]   I am an assistant   </s>[INST] Another question [/INST]");
  EXPECT_EQ(Render("llama2-sys"),
            "[INST] <<SYS>>\nYou are a helpful assistant\n<</SYS>>\n\nHello [/INST]Hi there</s>"
            "[INST] Who are you [/INST]   I am an assistant   </s>[INST] Another question [/INST]");
  EXPECT_EQ(Render("llama2-sys-bos"),
            "[INST] <<SYS>>\nYou are a helpful assistant\n<</SYS>>\n\nHello [/INST]Hi there</s>"
            "<s>[INST] Who are you [/INST]   I am an assistant   </s>"
            "<s>[INST] Another question [/INST]");
  EXPECT_EQ(Render("llama2-sys-strip"),
            "[INST] <<SYS>>\nYou are a helpful assistant\n<</SYS>>\n\nHello [/INST]Hi there</s>"
            "[INST] Who are you [/INST]I am an assistant</s>[INST] Another question [/INST]");
  EXPECT_EQ(Render("mistral-v1"),
            " [INST] You are a helpful assistant\n\nHello [/INST] Hi there</s>"
            " [INST] Who are you [/INST]    I am an assistant   </s>"
            " [INST] Another question [/INST]");
  EXPECT_EQ(Render("mistral-v3"),
            "[INST] You are a helpful assistant\n\nHello[/INST] Hi there</s>"
            "[INST] Who are you[/INST] I am an assistant</s>[INST] Another question[/INST]");
  EXPECT_EQ(Render("mistral-v3-tekken"),
            "[INST]You are a helpful assistant\n\nHello[/INST]Hi there</s>"
            "[INST]Who are you[/INST]   I am an assistant   </s>[INST]Another question[/INST]");
  EXPECT_EQ(Render("mistral-v7"),
            "[SYSTEM_PROMPT] You are a helpful assistant[/SYSTEM_PROMPT][INST] Hello[/INST]"
            " Hi there</s>[INST] Who are you[/INST]    I am an assistant   </s>"
            "[INST] Another question[/INST]");
  EXPECT_EQ(Render("llama3"),
            "<|start_header_id|>system<|end_header_id|>\n\nYou are a helpful assistant<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nHello<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\nHi there<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nWho are you<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\nI am an assistant<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nAnother question<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
  EXPECT_EQ(Render("gemma"),
            "<start_of_turn>user\nYou are a helpful assistant\n\nHello<end_of_turn>\n"
            "<start_of_turn>model\nHi there<end_of_turn>\n"
            "<start_of_turn>user\nWho are you<end_of_turn>\n"
            "<start_of_turn>model\nI am an assistant<end_of_turn>\n"
            "<start_of_turn>user\nAnother question<end_of_turn>\n<start_of_turn>model\n");
  EXPECT_EQ(Render("phi3"),
            "<|system|>\nYou are a helpful assistant<|end|>\n<|user|>\nHello<|end|>\n"
            "<|assistant|>\nHi there<|end|>\n<|user|>\nWho are you<|end|>\n"
            "<|assistant|>\n   I am an assistant   <|end|>\n<|user|>\nAnother question<|end|>\n"
            "<|assistant|>\n");
  EXPECT_EQ(Render("zephyr"),
            "<|system|>\nYou are a helpful assistant<|endoftext|>\n<|user|>\nHello<|endoftext|>\n"
            "<|assistant|>\nHi there<|endoftext|>\n<|user|>\nWho are you<|endoftext|>\n"
            "<|assistant|>\n   I am an assistant   <|endoftext|>\n"
            "<|user|>\nAnother question<|endoftext|>\n<|assistant|>\n");
  EXPECT_EQ(Render("plain"),
            "You are a helpful assistant\n\nUser: Hello\nAssistant: Hi there\n"
            "User: Who are you\nAssistant: I am an assistant   \n"
            "User: Another question\nAssistant:");
}

// A plain reply as generated (" Hi") continues the previous turn's prompt
// ("...Assistant:") byte for byte.
TEST(ChatTemplateTest, APlainConversationExtendsItsPreviousPrompt) {
  const ChatTemplate plain = ChatTemplate::Detect("");
  std::vector<ChatMessage> turns = {{"user", "Hello"}};
  const std::string first = *plain.Render(turns, true);
  turns.push_back({"assistant", " Hi"});
  turns.push_back({"user", "Bye"});
  const std::string second = *plain.Render(turns, true);
  EXPECT_EQ(second.substr(0, first.size() + 3), first + " Hi");
}

TEST(ChatTemplateTest, TheGenerationPromptIsOptional) {
  EXPECT_THAT(Render("chatml", false), ::testing::EndsWith("Another question<|im_end|>\n"));
  EXPECT_THAT(Render("llama3", false), ::testing::EndsWith("Another question<|eot_id|>"));
  EXPECT_THAT(Render("plain", false), ::testing::EndsWith("User: Another question\n"));
}

TEST(ChatTemplateTest, RecognisesTheFamiliesOfRealTemplates) {
  struct Case {
    const char* jinja;
    const char* family;
  };
  const Case cases[] = {
      // Qwen2 / OpenHermes (ChatML).
      {"{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + "
       "message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}"
       "{{ '<|im_start|>assistant\n' }}{% endif %}",
       "chatml"},
      // Llama 2 chat.
      {"{% if messages[0]['role'] == 'system' %}{% set system_message = '<<SYS>>\\n' + "
       "messages[0]['content'] | trim + '\\n<</SYS>>\\n\\n' %}{% endif %}{% for message in "
       "messages %}{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content | trim + "
       "' [/INST]' }}{% endif %}{% endfor %}",
       "llama2-sys-bos"},
      {"{{ bos_token }}{% for message in messages %}{% if message['role'] == 'user' %}"
       "{{ '[INST] ' + message['content'] + ' [/INST]' }}{% elif message['role'] == 'assistant' %}"
       "{{ message['content'] + eos_token}}{% endif %}{% endfor %}",
       "llama2"},
      {"{% set content = message['content'] %}{{ '[INST] <<SYS>>\\n' + content.strip() }}",
       "llama2-sys-strip"},
      {"{% if message['role'] == 'system' %}<<SYS>>{% endif %}[INST]", "llama2-sys"},
      // Mistral's own templates.
      {"{{ bos_token }}{% for message in loop_messages %}{{ ' [INST] ' + system_message }}",
       "mistral-v1"},
      {"{%- if not tools is none %}[AVAILABLE_TOOLS]{%- endif %}{{- \"[INST] \" + "
       "message[\"content\"] + \"[/INST]\" }}",
       "mistral-v3"},
      {"[AVAILABLE_TOOLS]{{- \"[INST]\" + message[\"content\"] + \"[/INST]\" }}",
       "mistral-v3-tekken"},
      {"{{- '[SYSTEM_PROMPT]' + system_message + '[/SYSTEM_PROMPT]' }}[INST]", "mistral-v7"},
      // Llama 3 instruct.
      {"{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ "
       "message['content'] | trim + '<|eot_id|>' %}",
       "llama3"},
      // Gemma instruct.
      {"{% for message in messages %}{{ '<start_of_turn>' + role + '\n' + "
       "message['content'] | trim + '<end_of_turn>\n' }}{% endfor %}",
       "gemma"},
      // Phi-3 mini instruct.
      {"{% for message in messages %}{% if message['role'] == 'user' %}{{'<|user|>' + '\n' + "
       "message['content'] + '<|end|>' + '\n' + '<|assistant|>' + '\n'}}{% endif %}{% endfor %}",
       "phi3"},
      // Zephyr / StableLM.
      {"{% for message in messages %}\n{% if message['role'] == 'user' %}\n{{ '<|user|>\n' + "
       "message['content'] + '<|endoftext|>' }}\n{% endif %}{% endfor %}",
       "zephyr"},
  };
  for (const Case& c : cases) {
    const ChatTemplate t = ChatTemplate::Detect(c.jinja);
    EXPECT_EQ(std::string(t.name()), std::string(c.family)) << c.jinja;
    EXPECT_TRUE(t.recognised());
  }
  EXPECT_EQ(ChatTemplate::Detect("").name(), "plain");
  EXPECT_TRUE(ChatTemplate::Detect("").recognised());
  const ChatTemplate unknown = ChatTemplate::Detect("{{ messages | tojson }}");
  EXPECT_EQ(unknown.name(), "plain");
  EXPECT_FALSE(unknown.recognised());
}

TEST(ChatTemplateTest, BadRolesAndNamesAreRefusedByName) {
  const ChatTemplate t = ChatTemplate::Detect("");
  const std::vector<ChatMessage> bad = {{"user", "hi"}, {"tool", "x"}};
  const absl::StatusOr<std::string> s = t.Render(bad, true);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.status().message()), HasSubstr("messages[1].role: \"tool\""));
  const absl::StatusOr<ChatTemplate> none = ChatTemplate::FromName("jinja");
  EXPECT_EQ(none.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(none.status().message()), HasSubstr("chatml"));
}

}  // namespace
}  // namespace tandem::engine
