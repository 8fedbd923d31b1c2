#include "gateway/http/openai_tools.h"

#include <utility>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "common/json.h"
#include "gateway/http/openai_json.h"

namespace tandem::gateway::openai {
namespace {

// OpenAI's rule for function names: a-z, A-Z, 0-9, '_' and '-', at most 64.
bool ValidFunctionName(const std::string& name) {
  if (name.empty() || name.size() > 64) return false;
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                    (c >= '0' && c <= '9') || c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

absl::Status CheckTools(const Json& tools) {
  if (!tools.is_array()) return FieldError("tools", "must be an array of tools");
  if (tools.empty()) return FieldError("tools", "must hold at least one tool");
  for (size_t i = 0; i < tools.size(); ++i) {
    const std::string at = absl::StrCat("tools[", i, "]");
    const Json& tool = tools[i];
    if (!tool.is_object() || !tool.contains("type") || tool["type"] != "function") {
      return FieldError(absl::StrCat(at, ".type"), "must be \"function\"");
    }
    if (!tool.contains("function") || !tool["function"].is_object()) {
      return FieldError(absl::StrCat(at, ".function"), "must be an object");
    }
    const Json& f = tool["function"];
    if (!f.contains("name") || !f["name"].is_string() ||
        !ValidFunctionName(f["name"].get<std::string>())) {
      return FieldError(absl::StrCat(at, ".function.name"),
                        "must be 1 to 64 of a-z, A-Z, 0-9, '_' and '-'");
    }
    for (size_t j = 0; j < i; ++j) {
      if (tools[j]["function"]["name"] == f["name"]) {
        return FieldError(absl::StrCat(at, ".function.name"),
                          absl::StrCat("\"", f["name"].get<std::string>(), "\" is repeated"));
      }
    }
    if (Has(f, "description") && !f["description"].is_string()) {
      return FieldError(absl::StrCat(at, ".function.description"), "must be a string");
    }
    if (Has(f, "parameters") && !f["parameters"].is_object()) {
      return FieldError(absl::StrCat(at, ".function.parameters"),
                        "must be a JSON Schema object");
    }
    if (Has(f, "strict") && !f["strict"].is_boolean()) {
      return FieldError(absl::StrCat(at, ".function.strict"), "must be true or false");
    }
  }
  return absl::OkStatus();
}

// Rewrites every "#/$defs/X..." and "#/definitions/X..." $ref under `v` to
// "#/$defs/<prefix>X...".
void PrefixRefs(Json& v, const std::string& prefix) {
  if (v.is_array()) {
    for (Json& e : v) PrefixRefs(e, prefix);
    return;
  }
  if (!v.is_object()) return;
  for (auto& [key, value] : v.items()) {
    if (key == "$ref" && value.is_string()) {
      const std::string ref = value.get<std::string>();
      for (const char* root : {"#/$defs/", "#/definitions/"}) {
        if (ref.rfind(root, 0) == 0) {
          value = absl::StrCat("#/$defs/", prefix, ref.substr(std::string_view(root).size()));
        }
      }
    } else {
      PrefixRefs(value, prefix);
    }
  }
}

// One call of `function` as the forced reply writes it. The parameters'
// own definitions ($defs, definitions) move to the root `defs`, named
// "<function>.<name>", since their $refs are relative to the document's root,
// which is now the forced schema.
Json CallSchema(const Json& function, Json& defs) {
  Json parameters = Has(function, "parameters") ? function["parameters"] : Json::object();
  if (!parameters.contains("type")) parameters["type"] = "object";
  const std::string prefix = absl::StrCat(function["name"].get<std::string>(), ".");
  PrefixRefs(parameters, prefix);
  for (const char* key : {"$defs", "definitions"}) {
    if (!parameters.contains(key)) continue;
    if (parameters[key].is_object()) {
      for (auto& [name, def] : parameters[key].items()) defs[absl::StrCat(prefix, name)] = def;
    }
    parameters.erase(key);
  }
  return Json{{"type", "object"},
              {"properties",
               {{"name", {{"const", function["name"]}}}, {"arguments", std::move(parameters)}}},
              {"required", {"name", "arguments"}},
              {"additionalProperties", false}};
}

}  // namespace

std::string ForcedCallSchema(const Json& tools, std::string_view name, bool parallel) {
  Json defs = Json::object();
  Json schema;
  for (const Json& tool : tools) {
    if (!name.empty() && tool["function"]["name"] == name) schema = CallSchema(tool["function"], defs);
  }
  if (schema.is_null()) {
    Json any = Json::array();
    for (const Json& tool : tools) any.push_back(CallSchema(tool["function"], defs));
    Json items = any.size() == 1 ? any[0] : Json{{"anyOf", std::move(any)}};
    schema = {{"type", "array"}, {"items", std::move(items)}, {"minItems", 1}};
    if (!parallel) schema["maxItems"] = 1;
  }
  if (!defs.empty()) schema["$defs"] = std::move(defs);
  return Dump(schema);
}

absl::StatusOr<ToolUse> ParseTools(const Json& body, bool chat,
                                   tandem::v1::GenerateRequest& request) {
  for (const char* key : {"functions", "function_call"}) {
    if (Has(body, key)) {
      return FieldError(key, "the deprecated functions API is not supported; send tools and "
                             "tool_choice");
    }
  }
  ToolUse use;
  if (Has(body, "parallel_tool_calls")) {
    if (!body["parallel_tool_calls"].is_boolean()) {
      return FieldError("parallel_tool_calls", "must be true or false");
    }
    use.parallel = body["parallel_tool_calls"].get<bool>();
  }
  const bool has_tools = Has(body, "tools");
  if (has_tools && !chat) return FieldError("tools", "only /v1/chat/completions takes tools");
  if (has_tools) {
    if (absl::Status s = CheckTools(body["tools"]); !s.ok()) return s;
  }
  const Json tools = has_tools ? body["tools"] : Json::array();
  // OpenAI's default: "auto" with tools, "none" without.
  std::string choice = tools.empty() ? "none" : "auto";
  std::string forced_name;
  if (Has(body, "tool_choice")) {
    const Json& c = body["tool_choice"];
    if (c.is_string()) {
      choice = c.get<std::string>();
      if (choice != "auto" && choice != "none" && choice != "required") {
        return FieldError("tool_choice", absl::StrCat("\"", SanitizeUtf8(choice),
                                                      "\" is not auto, none, required or "
                                                      "{\"type\": \"function\", ...}"));
      }
    } else if (c.is_object() && c.contains("type") && c["type"] == "function" &&
               c.contains("function") && c["function"].is_object() &&
               c["function"].contains("name") && c["function"]["name"].is_string()) {
      choice = "function";
      forced_name = c["function"]["name"].get<std::string>();
      bool known = false;
      for (const Json& tool : tools) known = known || tool["function"]["name"] == forced_name;
      if (!known) {
        return FieldError("tool_choice.function.name",
                          absl::StrCat("\"", SanitizeUtf8(forced_name), "\" is not in tools"));
      }
    } else {
      return FieldError("tool_choice", "must be auto, none, required or {\"type\": \"function\", "
                                       "\"function\": {\"name\": ...}}");
    }
  }
  if (tools.empty()) {
    if (choice == "required") return FieldError("tool_choice", "\"required\" needs tools");
    return use;
  }
  // Tools are rendered even with "none", as vLLM does by default: the
  // prompt stays the same whatever the choice, and its cache with it.
  request.set_tools_json(Dump(tools));
  if (choice == "none") return use;
  use.parse = true;
  if (choice == "auto") return use;
  if (request.sampling().has_response_format()) {
    return FieldError("tool_choice", "a required or named tool call cannot be combined with "
                                     "response_format (or guided_*)");
  }
  use.forced = true;
  request.mutable_sampling()->mutable_response_format()->set_json_schema(
      ForcedCallSchema(tools, forced_name, use.parallel));
  return use;
}

absl::Status ParseMessageToolFields(const Json& m, const std::string& field,
                                    tandem::v1::ChatMessage& out) {
  const std::string& role = out.role();
  if (role == "tool") {
    if (!m.contains("tool_call_id") || !m["tool_call_id"].is_string()) {
      return FieldError(absl::StrCat(field, ".tool_call_id"),
                        "a tool message needs the id of the call it answers");
    }
    out.set_tool_call_id(m["tool_call_id"].get<std::string>());
  }
  if (Has(m, "name")) {
    if (!m["name"].is_string()) return FieldError(absl::StrCat(field, ".name"), "must be a string");
    if (role == "tool") out.set_name(m["name"].get<std::string>());
  }
  if (!Has(m, "tool_calls")) return absl::OkStatus();
  const std::string calls_field = absl::StrCat(field, ".tool_calls");
  if (role != "assistant") return FieldError(calls_field, "only an assistant message has them");
  const Json& calls = m["tool_calls"];
  if (!calls.is_array()) return FieldError(calls_field, "must be an array");
  for (size_t i = 0; i < calls.size(); ++i) {
    const std::string at = absl::StrCat(calls_field, "[", i, "]");
    const Json& c = calls[i];
    if (!c.is_object() || !c.contains("function") || !c["function"].is_object()) {
      return FieldError(absl::StrCat(at, ".function"), "must be an object");
    }
    if (Has(c, "type") && c["type"] != "function") {
      return FieldError(absl::StrCat(at, ".type"), "must be \"function\"");
    }
    const Json& f = c["function"];
    if (!f.contains("name") || !f["name"].is_string()) {
      return FieldError(absl::StrCat(at, ".function.name"), "must be a string");
    }
    tandem::v1::ToolCall* call = out.add_tool_calls();
    if (Has(c, "id")) {
      if (!c["id"].is_string()) return FieldError(absl::StrCat(at, ".id"), "must be a string");
      call->set_id(c["id"].get<std::string>());
    }
    call->set_name(f["name"].get<std::string>());
    if (!Has(f, "arguments")) {
      call->set_arguments("{}");
    } else if (f["arguments"].is_string()) {
      call->set_arguments(f["arguments"].get<std::string>());
    } else if (f["arguments"].is_object()) {
      call->set_arguments(Dump(f["arguments"]));  // lenient: an object as its text
    } else {
      return FieldError(absl::StrCat(at, ".function.arguments"), "must be a JSON string");
    }
  }
  return absl::OkStatus();
}

Json ToolCallsJson(const std::vector<tools::ParsedToolCall>& calls, std::string_view id_seed,
                   tools::ToolCallFormat format, int first_index) {
  Json out = Json::array();
  for (size_t i = 0; i < calls.size(); ++i) {
    const int index = first_index + static_cast<int>(i);
    out.push_back({{"id", tools::ToolCallId(absl::StrCat(std::string(id_seed), "/", index), format)},
                   {"type", "function"},
                   {"function", {{"name", calls[i].name}, {"arguments", calls[i].arguments}}}});
  }
  return out;
}

absl::Status ExplainForcedCallError(const ToolUse& use, const absl::Status& status) {
  // "sampling.response_format.json_schema: at /items/...: ..." (the gateway's
  // check) or "prefill: response_format: ..." (a worker's).
  const std::string message(status.message());
  const size_t field = message.find("response_format");
  const size_t colon = field == std::string::npos ? field : message.find(": ", field);
  if (!use.forced || status.code() != absl::StatusCode::kInvalidArgument ||
      colon == std::string::npos) {
    return status;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "tools: the forced call's JSON schema, built from the tools' parameters, is refused: ",
      message.substr(colon + 2)));
}

Json ToolCallDeltaJson(const tools::ToolCallDelta& delta, std::string_view id_seed,
                       tools::ToolCallFormat format) {
  Json call;
  if (!delta.name.empty()) {
    call = {{"index", delta.index},
            {"id", tools::ToolCallId(absl::StrCat(std::string(id_seed), "/", delta.index), format)},
            {"type", "function"},
            {"function", {{"name", delta.name}, {"arguments", ""}}}};
  } else {
    call = {{"index", delta.index}, {"function", {{"arguments", delta.arguments}}}};
  }
  return Json{{"tool_calls", Json::array({std::move(call)})}};
}

}  // namespace tandem::gateway::openai
