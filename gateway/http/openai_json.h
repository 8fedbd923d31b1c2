// Small helpers every part of the OpenAI front shares (openai_api.cc,
// openai_request.cc, openai_structured.cc, openai_tools.cc): the JSON type,
// serialization that survives a token's partial UTF-8, member presence, and
// the field-naming error every bad request gets. Header-only; stateless.
#ifndef TANDEM_GATEWAY_HTTP_OPENAI_JSON_H_
#define TANDEM_GATEWAY_HTTP_OPENAI_JSON_H_

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace tandem::gateway::openai {

using Json = nlohmann::ordered_json;

// InvalidArgument "field: message" (the HTTP front answers it with a 400).
inline absl::Status FieldError(std::string_view field, std::string_view message) {
  return absl::InvalidArgumentError(absl::StrCat(std::string(field), ": ", std::string(message)));
}

// Serialized, any invalid UTF-8 (a token's partial bytes) replaced.
inline std::string Dump(const Json& json) {
  return json.dump(-1, ' ', false, Json::error_handler_t::replace);
}

// Whether `key` is present and not null (absent and null are both "unset").
inline bool Has(const Json& body, const char* key) {
  return body.contains(key) && !body[key].is_null();
}

}  // namespace tandem::gateway::openai

#endif  // TANDEM_GATEWAY_HTTP_OPENAI_JSON_H_
