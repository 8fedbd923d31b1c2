// Chat rendering: turns a conversation (system, user, assistant and tool
// messages, and the request's tools) into the prompt text a chat model was
// trained on. A template built from the model (FromModel/FromGguf) renders
// the model's own `tokenizer.chat_template` with the Jinja interpreter
// (jinja/template.h) as HF transformers would; when that template does not
// parse or fails on a conversation without tools, the family recognised
// from its markers renders it by code instead, as llama.cpp's built-in
// templates do, and the reason is logged once. Detect/FromName give the
// family rendering only; a model without a template gets a plain "User:" /
// "Assistant:" rendering. The rendered text is then tokenized with special
// tokens parsed (so "<|im_start|>" is one token) and the tokenizer's BOS
// where it adds one (a leading bos_token the Jinja template writes is
// dropped for that reason). Immutable; thread-safe.
#ifndef TANDEM_ENGINE_TOKENIZER_CHAT_TEMPLATE_H_
#define TANDEM_ENGINE_TOKENIZER_CHAT_TEMPLATE_H_

#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/tokenizer/jinja/template.h"

namespace tandem::engine {

class GgufFile;
class Tokenizer;

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

// An assistant message's call of one of the request's tools (OpenAI's
// `tool_calls[i]`).
struct ChatToolCall {
  std::string id;
  std::string name;
  std::string arguments;  // a JSON object's text, as OpenAI sends it
};

struct ChatMessage {
  std::string role;  // "system", "user", "assistant" or "tool"
  std::string content;
  // Only the model's own template renders these; every field has a default
  // so that `{role, content}` initializers stay complete.
  bool content_is_null = false;            // OpenAI's `"content": null`
  std::vector<ChatToolCall> tool_calls = {};  // assistant: the calls it made
  std::string tool_call_id = {};           // tool: the call this answers
  std::string name = {};                   // tool: the function's name
};

// What a render may add besides the messages.
struct ChatRenderOptions {
  // The request's `tools`, a JSON array in OpenAI's shape; empty for none.
  std::string tools_json;
  // strftime_now() in templates (Llama 3.x prints today's date).
  jinja::RenderTime now;
  jinja::RenderLimits limits;
};

// The special tokens a model's template refers to, from its vocabulary.
struct ChatTemplateTokens {
  std::string bos_token;
  std::string eos_token;
  // The tokenizer adds BOS itself, so a rendered leading bos_token is dropped.
  bool strip_leading_bos = false;
};

class ChatTemplate {
 public:
  // The family a model's `tokenizer.chat_template` is written for; an empty
  // or unrecognised template renders plainly (`recognised()` says which).
  static ChatTemplate Detect(std::string_view jinja);
  // By name, as `name()` spells it ("chatml", "llama3", "plain", ...).
  // InvalidArgument listing the names for an unknown one.
  static absl::StatusOr<ChatTemplate> FromName(std::string_view name);
  // The model's own Jinja template, rendered by the interpreter, with the
  // family recognised from it as the fallback. An empty template renders
  // plainly; one that does not parse falls back (logged).
  static ChatTemplate FromModel(std::string_view jinja, const ChatTemplateTokens& tokens);
  // FromModel with the tokens of `tokenizer` (BOS/EOS text, whether it adds BOS).
  static ChatTemplate FromModel(std::string_view jinja, const Tokenizer& tokenizer);
  // FromModel for a model file's `tokenizer.chat_template` and vocabulary.
  static absl::StatusOr<ChatTemplate> FromGguf(const GgufFile& model);

  ChatFamily family() const { return family_; }
  std::string_view name() const;
  // False when a non-empty template matched no family and the interpreter
  // does not render it either.
  bool recognised() const { return recognised_ || jinja_ != nullptr; }
  // True when the model's own template is rendered by the interpreter.
  bool renders_jinja() const { return jinja_ != nullptr; }

  // The prompt text for `messages` in order, ending with the opening of an
  // assistant turn when `add_generation_prompt`. The family rendering
  // refuses, with InvalidArgument naming "messages[i].role", a role other
  // than system, user and assistant, and refuses tools and tool calls; a
  // Jinja template that fails on a request with tools or tool messages
  // returns InvalidArgument "messages: chat template: line:column: ...".
  absl::StatusOr<std::string> Render(std::span<const ChatMessage> messages,
                                     bool add_generation_prompt) const;
  absl::StatusOr<std::string> Render(std::span<const ChatMessage> messages, bool add_generation_prompt,
                                     const ChatRenderOptions& options) const;
  // The interpreter's rendering alone, without the fallback: the error of a
  // failing template with its position. FailedPrecondition when the
  // template does not render by the interpreter.
  absl::StatusOr<std::string> RenderJinja(std::span<const ChatMessage> messages, bool add_generation_prompt,
                                          const ChatRenderOptions& options) const;

  // Bounds on every render of this template that does not pass its own
  // ChatRenderOptions (the gateway's --chat-template-max-steps and
  // --chat-template-max-output-bytes).
  void set_render_limits(const jinja::RenderLimits& limits) { render_limits_ = limits; }
  const jinja::RenderLimits& render_limits() const { return render_limits_; }

 private:
  struct Jinja;

  ChatTemplate(ChatFamily family, bool recognised) : family_(family), recognised_(recognised) {}
  absl::StatusOr<std::string> RenderFamily(std::span<const ChatMessage> messages,
                                           bool add_generation_prompt) const;

  ChatFamily family_;
  bool recognised_;
  std::shared_ptr<const Jinja> jinja_;  // null: family rendering only
  jinja::RenderLimits render_limits_;
};

}  // namespace tandem::engine

#endif  // TANDEM_ENGINE_TOKENIZER_CHAT_TEMPLATE_H_
