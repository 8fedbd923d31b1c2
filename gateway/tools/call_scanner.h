// Reads tool calls out of JSON text that may still be arriving: the calls of
// a {"name", "arguments"} object or an array of them, each with its name
// once that is complete and as much of its arguments object as has come,
// so a call can stream before it is complete (ToolCallParser's deltas).
// Pure functions; thread-safe.
#ifndef TANDEM_GATEWAY_TOOLS_CALL_SCANNER_H_
#define TANDEM_GATEWAY_TOOLS_CALL_SCANNER_H_

#include <string>
#include <string_view>
#include <vector>

namespace tandem::gateway::tools {

struct ScannedCall {
  // Empty until the name's string is complete.
  std::string name;
  // The arguments object so far, whitespace outside strings removed; only
  // when the name came before it ("arguments" or "parameters" key) and it
  // is an object (a string of JSON, say, is left to the whole parse).
  std::string arguments;
  bool arguments_started = false;
  bool arguments_complete = false;
  // The call's object closed.
  bool complete = false;
};

// The calls in `json` (starting at an object or an array of objects,
// whitespace before it allowed), in order, as far as the text goes; scanning
// stops at the first thing that is no call's JSON.
std::vector<ScannedCall> ScanCalls(std::string_view json);

// `json` without the whitespace outside its strings.
std::string MinifyJson(std::string_view json);

}  // namespace tandem::gateway::tools

#endif  // TANDEM_GATEWAY_TOOLS_CALL_SCANNER_H_
