// Tools for chat templates that cannot render them. The model's own template
// renders a request's `tools` and tool messages where it knows how; where it
// does not (the family fallback, or a template that ignores `tools`), the
// gateway rewrites the conversation so that any template renders it, as
// vLLM and llama.cpp do for generic models: a system message describes the
// tools and asks for a JSON reply {"tool_calls": [{"name", "arguments"}]}
// (which tools::ToolCallFormat::kJson reads back), an assistant's calls
// become that JSON in its content, and a tool's result becomes a user
// message. Called by the gateway's request validation
// (calls/validated_request.cc). Pure functions; thread-safe.
#ifndef TANDEM_GATEWAY_TOOLS_TOOL_PROMPT_H_
#define TANDEM_GATEWAY_TOOLS_TOOL_PROMPT_H_

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/tokenizer/chat_template.h"

namespace tandem::gateway::tools {

// InvalidArgument naming `field` unless `tools_json` is empty or a JSON
// array of {"type": "function", "function": {"name": non-empty string,
// "description"?: string, "parameters"?: object}} objects.
absl::Status ValidateToolsJson(std::string_view tools_json, std::string_view field);

// Whether the conversation needs tools rendered: tools given, a tool
// message, or an assistant's tool calls.
bool UsesTools(std::span<const engine::ChatMessage> messages, std::string_view tools_json);

// `messages` with the tools described in the first system message (one is
// added when there is none), tool calls written as JSON and tool results as
// user messages; no message then has the role "tool" or tool calls.
// `tools_json` must have passed ValidateToolsJson.
std::vector<engine::ChatMessage> DescribeTools(std::span<const engine::ChatMessage> messages,
                                               std::string_view tools_json);

// The prompt text of `messages` with `tools_json`: the template's own
// rendering when it renders tools (its output changes with them), else the
// rendering of DescribeTools(messages). Errors are the template's
// (InvalidArgument naming "messages").
absl::StatusOr<std::string> RenderWithTools(const engine::ChatTemplate& chat,
                                            std::span<const engine::ChatMessage> messages,
                                            std::string_view tools_json);

}  // namespace tandem::gateway::tools

#endif  // TANDEM_GATEWAY_TOOLS_TOOL_PROMPT_H_
