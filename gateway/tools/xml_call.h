// Qwen3-Coder's XML-like tool call, also written by Qwen 3.5, Nemotron 3
// and Step 3.5 templates: inside <tool_call>...</tool_call>,
//   <function=NAME>
//   <parameter=KEY>
//   VALUE
//   </parameter>
//   </function>
// Values are text; each becomes JSON by the type the tool's parameters
// schema gives it (as vLLM's qwen3_coder parser does), or, without one, JSON
// where the text is JSON and a string otherwise. Used by ToolCallParser.
// Pure functions; thread-safe.
#ifndef TANDEM_GATEWAY_TOOLS_XML_CALL_H_
#define TANDEM_GATEWAY_TOOLS_XML_CALL_H_

#include <optional>
#include <string>
#include <string_view>

#include "absl/container/flat_hash_map.h"

namespace tandem::gateway::tools {

struct ParsedToolCall;

// "function\nparameter" -> the parameter's JSON Schema "type" ("string",
// "integer", ...), from a request's tools (OpenAI's shape, JSON text).
using ParameterTypes = absl::flat_hash_map<std::string, std::string>;
ParameterTypes ParameterTypesFromTools(std::string_view tools_json);

// The call in `body` (the text between the tags), or nullopt when it is not
// of that shape.
std::optional<ParsedToolCall> XmlCall(std::string_view body, const ParameterTypes& types);

}  // namespace tandem::gateway::tools

#endif  // TANDEM_GATEWAY_TOOLS_XML_CALL_H_
