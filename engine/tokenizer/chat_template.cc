#include "engine/tokenizer/chat_template.h"

#include <array>
#include <atomic>
#include <cctype>
#include <ctime>
#include <initializer_list>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "engine/gguf/gguf.h"
#include "engine/tokenizer/jinja/json.h"
#include "engine/tokenizer/tokenizer.h"

namespace tandem::engine {
namespace {

constexpr std::array<std::pair<ChatFamily, std::string_view>, 14> kNames = {{
    {ChatFamily::kPlain, "plain"},
    {ChatFamily::kChatMl, "chatml"},
    {ChatFamily::kLlama2, "llama2"},
    {ChatFamily::kLlama2Sys, "llama2-sys"},
    {ChatFamily::kLlama2SysBos, "llama2-sys-bos"},
    {ChatFamily::kLlama2SysStrip, "llama2-sys-strip"},
    {ChatFamily::kMistralV1, "mistral-v1"},
    {ChatFamily::kMistralV3, "mistral-v3"},
    {ChatFamily::kMistralV3Tekken, "mistral-v3-tekken"},
    {ChatFamily::kMistralV7, "mistral-v7"},
    {ChatFamily::kLlama3, "llama3"},
    {ChatFamily::kGemma, "gemma"},
    {ChatFamily::kPhi3, "phi3"},
    {ChatFamily::kZephyr, "zephyr"},
}};

// Appends each part (absl::StrAppend takes no std::string_view where absl
// has its own string_view).
void Append(std::string* out, std::initializer_list<std::string_view> parts) {
  for (std::string_view p : parts) out->append(p);
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

// The family of a non-empty template, by the markers its text contains;
// checked in this order because some families share markers (every Mistral
// template has "[INST]", as Llama 2's do).
std::optional<ChatFamily> Recognise(std::string_view t) {
  auto has = [t](std::string_view marker) { return t.find(marker) != std::string_view::npos; };
  if (has("<|im_start|>")) return ChatFamily::kChatMl;
  if (t.substr(0, 7) == "mistral" || has("[INST]")) {
    if (has("[SYSTEM_PROMPT]")) return ChatFamily::kMistralV7;
    // Mistral's own v1 / v3 / v3-tekken templates.
    if (has("' [INST] ' + system_message") || has("[AVAILABLE_TOOLS]")) {
      if (has(" [INST]")) return ChatFamily::kMistralV1;
      if (has("\"[INST]\"")) return ChatFamily::kMistralV3Tekken;
      return ChatFamily::kMistralV3;
    }
    if (has("content.strip()")) return ChatFamily::kLlama2SysStrip;
    if (has("bos_token + '[INST]")) return ChatFamily::kLlama2SysBos;
    if (has("<<SYS>>")) return ChatFamily::kLlama2Sys;
    return ChatFamily::kLlama2;
  }
  if (has("<|assistant|>") && has("<|end|>")) return ChatFamily::kPhi3;
  if (has("<|user|>") && has("<|endoftext|>")) return ChatFamily::kZephyr;
  if (has("<start_of_turn>")) return ChatFamily::kGemma;
  if (has("<|start_header_id|>") && has("<|end_header_id|>")) return ChatFamily::kLlama3;
  return std::nullopt;
}

void RenderLlama2(ChatFamily family, std::span<const ChatMessage> messages, std::string* out) {
  const bool system_blocks = family != ChatFamily::kLlama2;
  const bool bos_between_turns = family == ChatFamily::kLlama2SysBos;
  const bool strip = family == ChatFamily::kLlama2SysStrip;
  out->append("[INST] ");  // the first turn's BOS comes from the tokenizer
  bool in_turn = true;
  for (const ChatMessage& m : messages) {
    const std::string_view content = strip ? Trim(m.content) : std::string_view(m.content);
    if (!in_turn) {
      out->append(bos_between_turns ? "<s>[INST] " : "[INST] ");
      in_turn = true;
    }
    if (m.role == "system") {
      if (system_blocks) {
        Append(out, {"<<SYS>>\n", content, "\n<</SYS>>\n\n"});
      } else {
        Append(out, {content, "\n"});
      }
    } else if (m.role == "user") {
      Append(out, {content, " [/INST]"});
    } else {
      Append(out, {content, "</s>"});
      in_turn = false;
    }
  }
}

void RenderMistral(ChatFamily family, std::span<const ChatMessage> messages, std::string* out) {
  const std::string_view before = family == ChatFamily::kMistralV1 ? " " : "";
  const std::string_view after = family == ChatFamily::kMistralV3Tekken ? "" : " ";
  bool in_turn = false;
  for (const ChatMessage& m : messages) {
    if (!in_turn) {
      Append(out, {before, "[INST]", after});
      in_turn = true;
    }
    if (m.role == "system") {
      Append(out, {m.content, "\n\n"});
    } else if (m.role == "user") {
      Append(out, {m.content, before, "[/INST]"});
    } else {
      const std::string_view reply =
          family == ChatFamily::kMistralV3 ? Trim(m.content) : std::string_view(m.content);
      Append(out, {after, reply, "</s>"});
      in_turn = false;
    }
  }
}

void RenderGemma(std::span<const ChatMessage> messages, bool add_generation_prompt,
                 std::string* out) {
  // Gemma has no system turn: system text opens the next user turn.
  std::string system;
  for (const ChatMessage& m : messages) {
    if (m.role == "system") {
      system += Trim(m.content);
      continue;
    }
    const bool model = m.role == "assistant";
    Append(out, {"<start_of_turn>", model ? "model" : m.role, "\n"});
    if (!system.empty() && !model) {
      Append(out, {system, "\n\n"});
      system.clear();
    }
    Append(out, {Trim(m.content), "<end_of_turn>\n"});
  }
  if (add_generation_prompt) out->append("<start_of_turn>model\n");
}

void LogOnce(std::atomic<bool>* logged, const std::string& line) {
  if (logged->exchange(true)) return;
  if (common::LogEnabled(common::LogLevel::kWarning)) common::LogLine("chat template") << line;
}

jinja::RenderTime NowUtc() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  return jinja::RenderTime{tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec};
}

// A message as HF transformers hands it to a template: OpenAI's shape, with
// a tool call's arguments as an object (its JSON text when it is not one).
jinja::Value MessageValue(const ChatMessage& m) {
  jinja::Dict d;
  d.Set("role", jinja::Value(m.role));
  d.Set("content", m.content_is_null ? jinja::Value::None() : jinja::Value(m.content));
  if (!m.tool_calls.empty()) {
    jinja::List calls;
    for (const ChatToolCall& c : m.tool_calls) {
      absl::StatusOr<jinja::Value> args = jinja::ParseJson(c.arguments);
      jinja::Dict function;
      function.Set("name", jinja::Value(c.name));
      function.Set("arguments", args.ok() && args->is_dict() ? *args : jinja::Value(c.arguments));
      jinja::Dict call;
      call.Set("id", jinja::Value(c.id));
      call.Set("type", jinja::Value("function"));
      call.Set("function", jinja::Value(std::move(function)));
      calls.push_back(jinja::Value(std::move(call)));
    }
    d.Set("tool_calls", jinja::Value(std::move(calls)));
  }
  if (!m.tool_call_id.empty()) d.Set("tool_call_id", jinja::Value(m.tool_call_id));
  if (!m.name.empty()) d.Set("name", jinja::Value(m.name));
  return jinja::Value(std::move(d));
}

bool UsesTools(std::span<const ChatMessage> messages, const ChatRenderOptions& options) {
  if (!options.tools_json.empty()) return true;
  for (const ChatMessage& m : messages) {
    if (m.role == "tool" || !m.tool_calls.empty()) return true;
  }
  return false;
}

}  // namespace

struct ChatTemplate::Jinja {
  Jinja(jinja::Template t, ChatTemplateTokens k) : tmpl(std::move(t)), tokens(std::move(k)) {}
  jinja::Template tmpl;
  ChatTemplateTokens tokens;
  mutable std::atomic<bool> logged_fallback{false};
};

ChatTemplate ChatTemplate::FromModel(std::string_view source, const ChatTemplateTokens& tokens) {
  ChatTemplate t = Detect(source);
  if (source.empty()) return t;
  absl::StatusOr<jinja::Template> parsed = jinja::Template::Parse(source);
  if (!parsed.ok()) {
    if (common::LogEnabled(common::LogLevel::kWarning)) {
      common::LogLine("chat template") << "the model's template does not parse (" << parsed.status().message()
                                       << "); rendering it as " << t.name();
    }
    return t;
  }
  t.jinja_ = std::make_shared<const Jinja>(std::move(*parsed), tokens);
  return t;
}

ChatTemplate ChatTemplate::FromModel(std::string_view source, const Tokenizer& tokenizer) {
  ChatTemplateTokens tokens;
  if (tokenizer.IsValidId(tokenizer.bos_id())) tokens.bos_token = tokenizer.TokenText(tokenizer.bos_id());
  if (tokenizer.IsValidId(tokenizer.eos_id())) tokens.eos_token = tokenizer.TokenText(tokenizer.eos_id());
  tokens.strip_leading_bos = tokenizer.add_bos();
  return FromModel(source, tokens);
}

absl::StatusOr<ChatTemplate> ChatTemplate::FromGguf(const GgufFile& model) {
  absl::StatusOr<std::string_view> source = model.GetString("tokenizer.chat_template");
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer = Tokenizer::FromGguf(model);
  if (!tokenizer.ok()) return tokenizer.status();
  return FromModel(source.ok() ? *source : "", **tokenizer);
}

absl::StatusOr<std::string> ChatTemplate::RenderJinja(std::span<const ChatMessage> messages,
                                                      bool add_generation_prompt,
                                                      const ChatRenderOptions& options) const {
  if (jinja_ == nullptr) return absl::FailedPreconditionError("the chat template is rendered by family");
  jinja::List list;
  for (const ChatMessage& m : messages) list.push_back(MessageValue(m));
  jinja::Dict context;
  context.Set("messages", jinja::Value(std::move(list)));
  jinja::Value tools = jinja::Value::None();
  if (!options.tools_json.empty()) {
    absl::StatusOr<jinja::Value> parsed = jinja::ParseJson(options.tools_json);
    if (!parsed.ok() || !parsed->is_list()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tools: not a JSON array", parsed.ok() ? "" : absl::StrCat(" (", parsed.status().message(), ")")));
    }
    tools = std::move(*parsed);
  }
  context.Set("tools", tools);
  context.Set("documents", jinja::Value::None());
  context.Set("add_generation_prompt", jinja::Value(add_generation_prompt));
  context.Set("bos_token", jinja::Value(jinja_->tokens.bos_token));
  context.Set("eos_token", jinja::Value(jinja_->tokens.eos_token));
  absl::StatusOr<std::string> text =
      jinja_->tmpl.Render(context, jinja::RenderOptions{.limits = options.limits, .now = options.now});
  if (!text.ok()) {
    return absl::Status(text.status().code(), absl::StrCat("messages: chat template: ", text.status().message()));
  }
  const std::string& bos = jinja_->tokens.bos_token;
  if (jinja_->tokens.strip_leading_bos && !bos.empty() && text->compare(0, bos.size(), bos) == 0) {
    text->erase(0, bos.size());
  }
  return text;
}

absl::StatusOr<std::string> ChatTemplate::Render(std::span<const ChatMessage> messages,
                                                 bool add_generation_prompt) const {
  ChatRenderOptions options;
  options.now = NowUtc();
  options.limits = render_limits_;
  return Render(messages, add_generation_prompt, options);
}

absl::StatusOr<std::string> ChatTemplate::Render(std::span<const ChatMessage> messages,
                                                 bool add_generation_prompt,
                                                 const ChatRenderOptions& options) const {
  if (jinja_ != nullptr) {
    absl::StatusOr<std::string> text = RenderJinja(messages, add_generation_prompt, options);
    // The family code cannot render tools, so a failure with them is the
    // request's; without them the family rendering stands in.
    if (text.ok() || UsesTools(messages, options)) return text;
    std::string reason(text.status().message());
    if (reason.rfind("messages: chat template: ", 0) == 0) reason.erase(0, 25);
    LogOnce(&jinja_->logged_fallback, absl::StrCat("the model's template failed (", reason, "); rendering as ",
                                                   std::string(name()), " instead (logged once)"));
  } else if (!options.tools_json.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("tools: the ", std::string(name()), " chat template cannot render tools"));
  }
  return RenderFamily(messages, add_generation_prompt);
}

ChatTemplate ChatTemplate::Detect(std::string_view jinja) {
  if (jinja.empty()) return ChatTemplate(ChatFamily::kPlain, true);
  const std::optional<ChatFamily> family = Recognise(jinja);
  return ChatTemplate(family.value_or(ChatFamily::kPlain), family.has_value());
}

absl::StatusOr<ChatTemplate> ChatTemplate::FromName(std::string_view name) {
  std::string message = "chat template \"";
  Append(&message, {name, "\" is not one of "});
  for (const auto& [family, n] : kNames) {
    if (n == name) return ChatTemplate(family, true);
    Append(&message, {n, family == ChatFamily::kZephyr ? "" : ", "});
  }
  return absl::InvalidArgumentError(message);
}

std::string_view ChatTemplate::name() const {
  for (const auto& [family, n] : kNames) {
    if (family == family_) return n;
  }
  return "plain";
}

absl::StatusOr<std::string> ChatTemplate::RenderFamily(std::span<const ChatMessage> messages,
                                                       bool add_generation_prompt) const {
  for (size_t i = 0; i < messages.size(); ++i) {
    const std::string& role = messages[i].role;
    if (role != "system" && role != "user" && role != "assistant") {
      return absl::InvalidArgumentError(absl::StrCat(
          "messages[", i, "].role: \"", role, "\" is not system, user or assistant"));
    }
  }
  std::string out;
  switch (family_) {
    case ChatFamily::kPlain:
      // A reply generated after "Assistant:" starts with its own space; it
      // is dropped here so that the next turn's prompt extends the previous
      // one byte for byte (the prefix cache reuses its KV), as
      // `tandem chat` renders its transcript.
      for (const ChatMessage& m : messages) {
        if (m.role == "system") {
          Append(&out, {m.content, "\n\n"});
        } else if (m.role == "user") {
          Append(&out, {"User: ", m.content, "\n"});
        } else {
          std::string_view reply = m.content;
          while (!reply.empty() && reply.front() == ' ') reply.remove_prefix(1);
          Append(&out, {"Assistant: ", reply, "\n"});
        }
      }
      if (add_generation_prompt) out.append("Assistant:");
      break;
    case ChatFamily::kChatMl:
      for (const ChatMessage& m : messages) {
        Append(&out, {"<|im_start|>", m.role, "\n", m.content, "<|im_end|>\n"});
      }
      if (add_generation_prompt) out.append("<|im_start|>assistant\n");
      break;
    case ChatFamily::kLlama2:
    case ChatFamily::kLlama2Sys:
    case ChatFamily::kLlama2SysBos:
    case ChatFamily::kLlama2SysStrip:
      RenderLlama2(family_, messages, &out);
      break;
    case ChatFamily::kMistralV1:
    case ChatFamily::kMistralV3:
    case ChatFamily::kMistralV3Tekken:
      RenderMistral(family_, messages, &out);
      break;
    case ChatFamily::kMistralV7:
      for (const ChatMessage& m : messages) {
        if (m.role == "system") {
          Append(&out, {"[SYSTEM_PROMPT] ", m.content, "[/SYSTEM_PROMPT]"});
        } else if (m.role == "user") {
          Append(&out, {"[INST] ", m.content, "[/INST]"});
        } else {
          Append(&out, {" ", m.content, "</s>"});
        }
      }
      break;
    case ChatFamily::kLlama3:
      for (const ChatMessage& m : messages) {
        Append(&out, {"<|start_header_id|>", m.role, "<|end_header_id|>\n\n",
                      Trim(m.content), "<|eot_id|>"});
      }
      if (add_generation_prompt) out.append("<|start_header_id|>assistant<|end_header_id|>\n\n");
      break;
    case ChatFamily::kGemma:
      RenderGemma(messages, add_generation_prompt, &out);
      break;
    case ChatFamily::kPhi3:
      for (const ChatMessage& m : messages) {
        Append(&out, {"<|", m.role, "|>\n", m.content, "<|end|>\n"});
      }
      if (add_generation_prompt) out.append("<|assistant|>\n");
      break;
    case ChatFamily::kZephyr:
      for (const ChatMessage& m : messages) {
        Append(&out, {"<|", m.role, "|>\n", m.content, "<|endoftext|>\n"});
      }
      if (add_generation_prompt) out.append("<|assistant|>\n");
      break;
  }
  return out;
}

}  // namespace tandem::engine
