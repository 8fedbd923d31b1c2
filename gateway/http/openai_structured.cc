#include "gateway/http/openai_structured.h"

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "common/json.h"
#include "gateway/http/openai_json.h"

namespace tandem::gateway::openai {
namespace {

// A schema given as an object, or (guided_json) as its JSON text.
absl::Status SchemaText(const Json& value, std::string_view field, bool text_allowed,
                        std::string* out) {
  if (value.is_object() || value.is_boolean()) {
    *out = Dump(value);
    return absl::OkStatus();
  }
  if (text_allowed && value.is_string()) {
    const Json parsed = Json::parse(value.get<std::string>(), nullptr, false);
    if (parsed.is_discarded() || !(parsed.is_object() || parsed.is_boolean())) {
      return FieldError(field, "must be a JSON Schema (an object, or its JSON text)");
    }
    *out = Dump(parsed);
    return absl::OkStatus();
  }
  return FieldError(field, text_allowed ? "must be a JSON Schema (an object, or its JSON text)"
                                        : "must be a JSON Schema object");
}

absl::Status ResponseFormat(const Json& format, tandem::v1::ResponseFormat& out, bool* set) {
  if (!format.is_object() || !format.contains("type") || !format["type"].is_string()) {
    return FieldError("response_format", "must be an object with a string \"type\"");
  }
  const std::string type = format["type"].get<std::string>();
  if (type == "text") return absl::OkStatus();
  if (type == "json_object") {
    *set = true;
    // llama.cpp's server takes a schema here too.
    if (Has(format, "schema")) {
      std::string schema;
      if (absl::Status s = SchemaText(format["schema"], "response_format.schema",
                                      /*text_allowed=*/false, &schema);
          !s.ok()) {
        return s;
      }
      out.set_json_schema(std::move(schema));
      return absl::OkStatus();
    }
    out.set_json_object(true);
    return absl::OkStatus();
  }
  if (type != "json_schema") {
    return FieldError("response_format.type",
                      absl::StrCat("\"", SanitizeUtf8(type),
                                   "\" is not one of text, json_object, json_schema"));
  }
  if (!format.contains("json_schema") || !format["json_schema"].is_object()) {
    return FieldError("response_format.json_schema", "must be an object with a \"schema\"");
  }
  const Json& spec = format["json_schema"];
  if (spec.contains("name") && !spec["name"].is_string()) {
    return FieldError("response_format.json_schema.name", "must be a string");
  }
  if (spec.contains("strict") && !spec["strict"].is_boolean() && !spec["strict"].is_null()) {
    return FieldError("response_format.json_schema.strict", "must be true or false");
  }
  if (!Has(spec, "schema")) {
    return FieldError("response_format.json_schema.schema", "is required");
  }
  std::string schema;
  if (absl::Status s = SchemaText(spec["schema"], "response_format.json_schema.schema",
                                  /*text_allowed=*/false, &schema);
      !s.ok()) {
    return s;
  }
  // Tandem always enforces the schema: "strict" false or absent is served
  // as strictly as true (as vLLM does).
  out.set_json_schema(std::move(schema));
  *set = true;
  return absl::OkStatus();
}

absl::Status String(const Json& body, const char* key, std::string* out) {
  if (!body[key].is_string() || body[key].get<std::string>().empty()) {
    return FieldError(key, "must be a non-empty string");
  }
  *out = body[key].get<std::string>();
  return absl::OkStatus();
}

// guided_choice: a regex matching exactly one of the strings.
absl::Status ChoiceRegex(const Json& choices, std::string* out) {
  if (!choices.is_array() || choices.empty()) {
    return FieldError("guided_choice", "must be a non-empty array of strings");
  }
  std::string regex = "(";
  for (size_t i = 0; i < choices.size(); ++i) {
    if (!choices[i].is_string()) return FieldError("guided_choice", "must hold strings");
    if (i > 0) regex += '|';
    for (char c : choices[i].get<std::string>()) {
      if (std::string_view("\\^$.|?*+()[]{}").find(c) != std::string_view::npos) regex += '\\';
      regex += c;
    }
  }
  *out = regex + ")";
  return absl::OkStatus();
}

}  // namespace

absl::Status ParseStructuredOutput(const Json& body, tandem::v1::SamplingParams& sampling) {
  tandem::v1::ResponseFormat format;
  const char* given = nullptr;  // the field that set `format`
  auto claim = [&](const char* key) -> absl::Status {
    if (given != nullptr) {
      return FieldError(key, absl::StrCat("set together with ", given, "; send one"));
    }
    given = key;
    return absl::OkStatus();
  };
  if (Has(body, "response_format")) {
    bool set = false;
    if (absl::Status s = ResponseFormat(body["response_format"], format, &set); !s.ok()) return s;
    if (set) given = "response_format";
  }
  std::string text;
  for (const char* key : {"guided_json", "json_schema"}) {
    if (!Has(body, key)) continue;
    if (absl::Status s = claim(key); !s.ok()) return s;
    if (absl::Status s = SchemaText(body[key], key, /*text_allowed=*/true, &text); !s.ok()) {
      return s;
    }
    format.set_json_schema(text);
  }
  for (const char* key : {"guided_regex", "guided_grammar", "grammar", "guided_choice"}) {
    if (!Has(body, key)) continue;
    if (absl::Status s = claim(key); !s.ok()) return s;
    const std::string_view name = key;
    if (name == "guided_choice") {
      if (absl::Status s = ChoiceRegex(body[key], &text); !s.ok()) return s;
    } else if (absl::Status s = String(body, key, &text); !s.ok()) {
      return s;
    }
    if (name == "guided_regex" || name == "guided_choice") {
      format.set_regex(text);
    } else {
      format.set_grammar(text);
    }
  }
  if (given != nullptr) *sampling.mutable_response_format() = std::move(format);
  return absl::OkStatus();
}

}  // namespace tandem::gateway::openai
