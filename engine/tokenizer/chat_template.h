// Chat rendering: turns a conversation (system, user and assistant
// messages) into the prompt text a chat model was trained on. Like
// llama.cpp's built-in templates, the family is recognised from the model's
// `tokenizer.chat_template` (a Jinja source, which is not executed) by the
// markers it contains, and each family is rendered by code; a model without
// a template gets a plain "User:" / "Assistant:" rendering. The rendered text
// is then tokenized with special tokens parsed (so "<|im_start|>" is one
// token) and the tokenizer's BOS where it adds one (the templates leave it
// out). Immutable; thread-safe.
#ifndef TANDEM_ENGINE_TOKENIZER_CHAT_TEMPLATE_H_
#define TANDEM_ENGINE_TOKENIZER_CHAT_TEMPLATE_H_

#include <span>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace tandem::engine {

enum class ChatFamily {
  kPlain,           // no template: "User: ..." / "Assistant: ..."
  kChatMl,          // <|im_start|>role\n...<|im_end|>
  kLlama2,          // [INST] ... [/INST] (system text folded into the turn)
  kLlama2Sys,       // ... with <<SYS>> blocks
  kLlama2SysBos,    // ... and <s> before every later [INST]
  kLlama2SysStrip,  // ... with contents stripped
  kMistralV1,       // " [INST] ... [/INST]"
  kMistralV3,       // "[INST] ... [/INST]", replies trimmed
  kMistralV3Tekken, // "[INST]...[/INST]" without spaces
  kMistralV7,       // [SYSTEM_PROMPT] ... [/SYSTEM_PROMPT][INST] ... [/INST]
  kLlama3,          // <|start_header_id|>role<|end_header_id|>\n\n...<|eot_id|>
  kGemma,           // <start_of_turn>user|model\n...<end_of_turn>
  kPhi3,            // <|role|>\n...<|end|>
  kZephyr,          // <|role|>\n...<|endoftext|>
};

struct ChatMessage {
  std::string role;  // "system", "user" or "assistant"
  std::string content;
};

class ChatTemplate {
 public:
  // The family a model's `tokenizer.chat_template` is written for; an empty
  // or unrecognised template renders plainly (`recognised()` says which).
  static ChatTemplate Detect(std::string_view jinja);
  // By name, as `name()` spells it ("chatml", "llama3", "plain", ...).
  // InvalidArgument listing the names for an unknown one.
  static absl::StatusOr<ChatTemplate> FromName(std::string_view name);

  ChatFamily family() const { return family_; }
  std::string_view name() const;
  // False when a non-empty template matched no family.
  bool recognised() const { return recognised_; }

  // The prompt text for `messages` in order, ending with the opening of an
  // assistant turn when `add_generation_prompt`. InvalidArgument naming
  // "messages[i].role" for a role other than system, user and assistant.
  absl::StatusOr<std::string> Render(std::span<const ChatMessage> messages,
                                     bool add_generation_prompt) const;

 private:
  ChatTemplate(ChatFamily family, bool recognised) : family_(family), recognised_(recognised) {}

  ChatFamily family_;
  bool recognised_;
};

}  // namespace tandem::engine

#endif  // TANDEM_ENGINE_TOKENIZER_CHAT_TEMPLATE_H_
