// Tools on the OpenAI front: a chat request's `tools`, `tool_choice` and
// `parallel_tool_calls`, its tool and tool-calling messages, read into the
// gRPC request (tools_json, ChatMessage's tool fields, and for a forced call
// sampling.response_format); and the OpenAI shapes of the calls parsed back
// out of the reply (tools/tool_call_parser.h). Called by openai_api.cc.
// Pure functions; thread-safe.
#ifndef TANDEM_GATEWAY_HTTP_OPENAI_TOOLS_H_
#define TANDEM_GATEWAY_HTTP_OPENAI_TOOLS_H_

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gateway/tools/tool_call_parser.h"
#include "tandem/v1/generation.pb.h"

namespace tandem::gateway::openai {

// What the reply of a request with tools is read for.
struct ToolUse {
  // Calls are parsed out of the reply (tools given, tool_choice not "none").
  bool parse = false;
  // tool_choice "required" or a named function: the reply is constrained to
  // the JSON of the call(s) (a JSON schema built from the tools' parameters)
  // and read as tools::ToolCallFormat::kJson, whatever the model's format.
  bool forced = false;
  // parallel_tool_calls (default true); false keeps the first call only.
  bool parallel = true;
};

// Reads tools, tool_choice, parallel_tool_calls (and refuses the legacy
// functions / function_call) into `request`. `chat` false
// (/v1/completions): tools are refused. InvalidArgument naming the field.
// Call after sampling.response_format is set: a forced call cannot be
// combined with it.
absl::StatusOr<ToolUse> ParseTools(const nlohmann::ordered_json& body, bool chat,
                                   tandem::v1::GenerateRequest& request);

// The tool fields of messages[i] (`field`): a "tool" message's tool_call_id
// and name, an assistant's tool_calls.
absl::Status ParseMessageToolFields(const nlohmann::ordered_json& message,
                                    const std::string& field, tandem::v1::ChatMessage& out);

// The JSON schema a forced call's reply is constrained to: for "required"
// (`name` empty) an array of {"name", "arguments"} objects, one per tool via
// anyOf, at least one item (at most one without parallel calls); for a named
// function that one object. `tools` is the validated tools array.
std::string ForcedCallSchema(const nlohmann::ordered_json& tools, std::string_view name,
                             bool parallel);

// message.tool_calls of a whole response: [{"id", "type", "function":
// {"name", "arguments"}}], the ids made from `id_seed` and each call's index.
nlohmann::ordered_json ToolCallsJson(const std::vector<tools::ParsedToolCall>& calls,
                                     std::string_view id_seed, tools::ToolCallFormat format,
                                     int first_index = 0);

// A forced call's schema is the front's, not the client's: an error naming
// response_format (say, a keyword of a tool's parameters the constraint
// compiler does not take) is reworded to name `tools`. Other statuses pass.
absl::Status ExplainForcedCallError(const ToolUse& use, const absl::Status& status);

// One streamed piece of a call as OpenAI's delta: its start {"tool_calls":
// [{index, id, type, function: {name, arguments: ""}}]}, or a piece of its
// arguments {"tool_calls": [{index, function: {arguments}}]}.
nlohmann::ordered_json ToolCallDeltaJson(const tools::ToolCallDelta& delta,
                                         std::string_view id_seed, tools::ToolCallFormat format);

}  // namespace tandem::gateway::openai

#endif  // TANDEM_GATEWAY_HTTP_OPENAI_TOOLS_H_
