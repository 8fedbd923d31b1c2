#include "gateway/tools/tool_prompt.h"

#include <ctime>
#include <utility>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace tandem::gateway::tools {
namespace {

using Json = nlohmann::ordered_json;

std::string Dump(const Json& json) {
  return json.dump(-1, ' ', false, Json::error_handler_t::replace);
}

absl::Status FieldError(std::string_view field, std::string_view message) {
  return absl::InvalidArgumentError(absl::StrCat(std::string(field), ": ", std::string(message)));
}

// The wording follows what llama.cpp's generic handler and vLLM's examples
// tell a model without a tool format of its own; the reply shape is the one
// ToolCallFormat::kJson reads.
constexpr char kPreamble[] =
    "You can call the following functions. To call one or more of them, reply with nothing "
    "but a JSON object of this form:\n"
    "{\"tool_calls\": [{\"name\": \"<function name>\", \"arguments\": {<its arguments>}}]}\n"
    "Otherwise reply to the user as usual.\n\nFunctions:";

std::string Description(const Json& tools) {
  std::string out = kPreamble;
  for (const Json& tool : tools) {
    const Json& f = tool["function"];
    Json entry = {{"name", f["name"]}};
    if (f.contains("description")) entry["description"] = f["description"];
    entry["parameters"] = f.contains("parameters") ? f["parameters"] : Json::object();
    absl::StrAppend(&out, "\n", Dump(entry));
  }
  return out;
}

// An OpenAI arguments string as JSON where it is JSON, else as a string.
Json Arguments(const std::string& text) {
  Json parsed = Json::parse(text, nullptr, false);
  return parsed.is_discarded() ? Json(text) : parsed;
}

engine::jinja::RenderTime NowUtc() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  return {.year = tm.tm_year + 1900, .month = tm.tm_mon + 1, .day = tm.tm_mday,
          .hour = tm.tm_hour, .minute = tm.tm_min, .second = tm.tm_sec};
}

}  // namespace

absl::Status ValidateToolsJson(std::string_view tools_json, std::string_view field) {
  if (tools_json.empty()) return absl::OkStatus();
  const Json tools = Json::parse(tools_json, nullptr, false);
  if (tools.is_discarded() || !tools.is_array()) {
    return FieldError(field, "must be a JSON array of tools");
  }
  for (size_t i = 0; i < tools.size(); ++i) {
    const std::string at = absl::StrCat(std::string(field), "[", i, "]");
    const Json& tool = tools[i];
    if (!tool.is_object() || tool.value("type", "") != "function") {
      return FieldError(at, "must be an object with \"type\": \"function\"");
    }
    if (!tool.contains("function") || !tool["function"].is_object()) {
      return FieldError(absl::StrCat(at, ".function"), "must be an object");
    }
    const Json& f = tool["function"];
    if (!f.contains("name") || !f["name"].is_string() || f["name"].get<std::string>().empty()) {
      return FieldError(absl::StrCat(at, ".function.name"), "must be a non-empty string");
    }
    if (f.contains("description") && !f["description"].is_string() &&
        !f["description"].is_null()) {
      return FieldError(absl::StrCat(at, ".function.description"), "must be a string");
    }
    if (f.contains("parameters") && !f["parameters"].is_object() && !f["parameters"].is_null()) {
      return FieldError(absl::StrCat(at, ".function.parameters"),
                        "must be a JSON Schema object");
    }
  }
  return absl::OkStatus();
}

bool UsesTools(std::span<const engine::ChatMessage> messages, std::string_view tools_json) {
  if (!tools_json.empty()) return true;
  for (const engine::ChatMessage& m : messages) {
    if (m.role == "tool" || !m.tool_calls.empty()) return true;
  }
  return false;
}

std::vector<engine::ChatMessage> DescribeTools(std::span<const engine::ChatMessage> messages,
                                               std::string_view tools_json) {
  std::vector<engine::ChatMessage> out;
  const Json tools = tools_json.empty() ? Json::array() : Json::parse(tools_json, nullptr, false);
  if (tools.is_array() && !tools.empty()) {
    const std::string description = Description(tools);
    if (!messages.empty() && messages[0].role == "system") {
      engine::ChatMessage system = messages[0];
      system.content = absl::StrCat(system.content, system.content.empty() ? "" : "\n\n",
                                    description);
      out.push_back(std::move(system));
      messages = messages.subspan(1);
    } else {
      out.push_back({.role = "system", .content = description});
    }
  }
  for (const engine::ChatMessage& m : messages) {
    if (m.role == "tool") {
      Json result = {{"tool_call_id", m.tool_call_id}};
      if (!m.name.empty()) result["name"] = m.name;
      result["content"] = m.content;
      out.push_back({.role = "user", .content = Dump(Json{{"tool_result", std::move(result)}})});
      continue;
    }
    engine::ChatMessage copy{.role = m.role, .content = m.content};
    if (!m.tool_calls.empty()) {
      Json calls = Json::array();
      for (const engine::ChatToolCall& c : m.tool_calls) {
        calls.push_back({{"name", c.name}, {"arguments", Arguments(c.arguments)}});
      }
      absl::StrAppend(&copy.content, copy.content.empty() ? "" : "\n",
                      Dump(Json{{"tool_calls", std::move(calls)}}));
    }
    out.push_back(std::move(copy));
  }
  return out;
}

absl::StatusOr<std::string> RenderWithTools(const engine::ChatTemplate& chat,
                                            std::span<const engine::ChatMessage> messages,
                                            std::string_view tools_json) {
  if (chat.renders_jinja()) {
    engine::ChatRenderOptions options;
    options.tools_json = std::string(tools_json);
    options.now = NowUtc();
    options.limits = chat.render_limits();
    ASSIGN_OR_RETURN(std::string with, chat.Render(messages, /*add_generation_prompt=*/true,
                                                   options));
    if (tools_json.empty()) return with;
    // A template that never mentions `tools` renders the same text without
    // them: the model would never learn of them.
    options.tools_json.clear();
    absl::StatusOr<std::string> without =
        chat.RenderJinja(messages, /*add_generation_prompt=*/true, options);
    if (!without.ok() || *without != with) return with;
  }
  const std::vector<engine::ChatMessage> described = DescribeTools(messages, tools_json);
  return chat.Render(described, /*add_generation_prompt=*/true);
}

}  // namespace tandem::gateway::tools
