#include "gateway/tools/xml_call.h"

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "gateway/tools/tool_call_parser.h"

namespace tandem::gateway::tools {
namespace {

using Json = nlohmann::ordered_json;

constexpr std::string_view kFunction = "<function=";
constexpr std::string_view kFunctionEnd = "</function>";
constexpr std::string_view kParameter = "<parameter=";
constexpr std::string_view kParameterEnd = "</parameter>";

bool IsSpace(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

std::string_view TrimSpace(std::string_view s) {
  while (!s.empty() && IsSpace(s.front())) s.remove_prefix(1);
  while (!s.empty() && IsSpace(s.back())) s.remove_suffix(1);
  return s;
}

Json Value(std::string_view text, const std::string* type) {
  // The template writes a newline after the opening tag and before the
  // closing one.
  if (!text.empty() && text.front() == '\n') text.remove_prefix(1);
  if (!text.empty() && text.back() == '\n') text.remove_suffix(1);
  if (type != nullptr && *type == "string") return Json(std::string(text));
  const Json parsed = Json::parse(TrimSpace(text), nullptr, false);
  if (!parsed.is_discarded()) return parsed;
  return Json(std::string(text));
}

}  // namespace

ParameterTypes ParameterTypesFromTools(std::string_view tools_json) {
  ParameterTypes types;
  const Json tools = Json::parse(tools_json, nullptr, false);
  if (!tools.is_array()) return types;
  for (const Json& tool : tools) {
    if (!tool.is_object() || !tool.contains("function") || !tool["function"].is_object()) continue;
    const Json& f = tool["function"];
    if (!f.contains("name") || !f["name"].is_string()) continue;
    if (!f.contains("parameters") || !f["parameters"].is_object()) continue;
    const Json& p = f["parameters"];
    if (!p.contains("properties") || !p["properties"].is_object()) continue;
    for (const auto& [key, schema] : p["properties"].items()) {
      if (schema.is_object() && schema.contains("type") && schema["type"].is_string()) {
        types[absl::StrCat(f["name"].get<std::string>(), "\n", key)] =
            schema["type"].get<std::string>();
      }
    }
  }
  return types;
}

std::optional<ParsedToolCall> XmlCall(std::string_view body, const ParameterTypes& types) {
  body = TrimSpace(body);
  if (!body.starts_with(kFunction)) return std::nullopt;
  body.remove_prefix(kFunction.size());
  const size_t name_end = body.find('>');
  if (name_end == std::string_view::npos || name_end == 0) return std::nullopt;
  ParsedToolCall call;
  call.name = std::string(TrimSpace(body.substr(0, name_end)));
  body.remove_prefix(name_end + 1);
  Json arguments = Json::object();
  while (true) {
    body = TrimSpace(body);
    if (body.empty() || body.starts_with(kFunctionEnd)) break;  // a missing </function> is forgiven
    if (!body.starts_with(kParameter)) return std::nullopt;
    body.remove_prefix(kParameter.size());
    const size_t key_end = body.find('>');
    if (key_end == std::string_view::npos || key_end == 0) return std::nullopt;
    const std::string key(TrimSpace(body.substr(0, key_end)));
    body.remove_prefix(key_end + 1);
    const size_t value_end = body.find(kParameterEnd);
    if (value_end == std::string_view::npos) return std::nullopt;
    const auto type = types.find(absl::StrCat(call.name, "\n", key));
    arguments[key] = Value(body.substr(0, value_end), type == types.end() ? nullptr : &type->second);
    body.remove_prefix(value_end + kParameterEnd.size());
  }
  call.arguments = arguments.dump(-1, ' ', false, Json::error_handler_t::replace);
  return call;
}

}  // namespace tandem::gateway::tools
