// Tool calls in a chat model's generated text, read per model family as
// llama.cpp's server (common/chat.cpp) and vLLM's tool parsers do: the text
// streams in, content before a call streams out at once, and text that may
// be the start of a call is held back until it is decided. Used by the
// OpenAI HTTP front (openai_api.h) for each choice of a chat request with
// tools; the family comes from the model's chat template (DetectToolCallFormat)
// or --tool-call-parser. Thread-compatible: one parser per choice.
#ifndef TANDEM_GATEWAY_TOOLS_TOOL_CALL_PARSER_H_
#define TANDEM_GATEWAY_TOOLS_TOOL_CALL_PARSER_H_

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "gateway/tools/xml_call.h"

namespace tandem::gateway::tools {

// How a model writes a tool call. Every format but kNone also takes a reply
// that is nothing but JSON calls (the generic form, kJson below), because a
// model's markers are often control tokens whose text the generated text
// drops (Llama's <|python_tag|>, Mistral's [TOOL_CALLS]).
enum class ToolCallFormat {
  kNone,        // never parsed: the text stays content
  kJson,        // the whole reply is JSON: {"name", "arguments"} (or
                // "parameters"), an array of those, {"tool_calls": [...]} or
                // {"tool_call": {...}}; the forced path and the generic
                // system-prompt description produce it
  kHermes,      // <tool_call>{"name", "arguments"}</tool_call>, repeated:
                // Hermes 2/3, Qwen 2.5, Qwen 3, QwQ
  kLlama3Json,  // [<|python_tag|>]{"name", "parameters"}[; {...}]: Llama 3.1-3.3
  kMistral,     // [TOOL_CALLS][{"name", "arguments"}, ...] (v3), or
                // [TOOL_CALLS]name[CALL_ID]id[ARGS]{...} (v11+, CALL_ID optional)
  kGranite,     // <|tool_call|>[{"name", "arguments"}, ...]: Granite 3.x
  kQwen3Coder,  // <tool_call><function=name><parameter=k>v</parameter>...
                // </function></tool_call> (xml_call.h): Qwen3-Coder, Qwen 3.5,
                // Nemotron 3, Step 3.5
};

// "none", "json", "hermes", "llama3_json", "mistral", "granite", "qwen3_coder".
std::string_view ToolCallFormatName(ToolCallFormat format);
// The inverse of ToolCallFormatName; InvalidArgument listing the names
// (and "auto", which the caller resolves with DetectToolCallFormat).
absl::StatusOr<ToolCallFormat> ToolCallFormatFromName(std::string_view name);
// The format a chat template's own markers announce: <tool_call> with
// <function= (Qwen3-Coder's XML), <tool_call> (Hermes, Qwen), [TOOL_CALLS]
// (Mistral), <|tool_call|> (Granite), <|python_tag|> or
// Llama 3.2's "{"name": function name, "parameters": ...}" instruction
// (Llama 3.x); kJson for any other template, which is what the gateway's
// system-prompt description of tools asks for.
ToolCallFormat DetectToolCallFormat(std::string_view chat_template);

struct ParsedToolCall {
  std::string name;
  // A JSON object's text (compact), as OpenAI's function.arguments.
  std::string arguments;
};

// A streamed piece of a call: its start (`name` set, as OpenAI's first
// delta of a call has it) or text appended to its arguments.
struct ToolCallDelta {
  int index = 0;  // the call's place among the reply's calls
  std::string name;
  std::string arguments;
};

// What a piece of generated text turned out to be: content to pass on now
// (it precedes the calls in the text, save for whitespace between calls),
// the calls it completed, and the same calls as deltas: a call whose name
// comes before its arguments object starts streaming once the name is
// known, its arguments as they come (whitespace outside strings removed);
// the others come whole when complete. The deltas of a reply add up to its
// calls.
struct ToolCallChunk {
  std::string content;
  std::vector<ParsedToolCall> calls;
  std::vector<ToolCallDelta> deltas;
};

class ToolCallParser {
 public:
  // `parallel` false: only the first call is kept (OpenAI's
  // parallel_tool_calls: false); later ones are dropped with their text.
  // `types`: the tools' parameter types, which kQwen3Coder's text values
  // are converted by (null: none known).
  ToolCallParser(ToolCallFormat format, bool parallel,
                 std::shared_ptr<const ParameterTypes> types = nullptr);

  // The next piece of generated text.
  ToolCallChunk Feed(std::string_view text);
  // The text has ended: what is still held is decided (a call that never
  // completed, or a marker prefix, becomes content).
  ToolCallChunk Finish();

  // Calls returned so far.
  int calls() const { return calls_; }

  // Feed(text) and Finish() at once, the content and calls joined.
  static ToolCallChunk ParseAll(ToolCallFormat format, bool parallel, std::string_view text,
                                std::shared_ptr<const ParameterTypes> types = nullptr);

 private:
  enum class State {
    kStart,   // nothing but whitespace yet; a JSON reply may begin here
    kText,    // content, scanned for the format's opening marker
    kJson,    // held: a JSON reply (or, after a marker, a call's JSON)
    kMarker,  // held: a marker seen, the call after it not yet complete
  };

  // Moves what `buffer_` decides into `out`; false when it must wait for
  // more text (or, with `final`, never does).
  bool Step(bool final, ToolCallChunk& out);
  bool StepStart(bool final, ToolCallChunk& out);
  bool StepText(bool final, ToolCallChunk& out);
  bool StepJson(bool final, ToolCallChunk& out);
  bool StepMarker(bool final, ToolCallChunk& out);
  // Adds content, dropping whitespace that only separates calls.
  void Content(std::string_view text, ToolCallChunk& out);
  // Adds calls (all, or the first only once one is kept without parallel).
  void Calls(std::vector<ParsedToolCall> calls, ToolCallChunk& out);
  // After a call's text: more calls may follow.
  void AfterCall();
  // The calls between <tool_call> and </tool_call> (JSON, or XML).
  std::vector<ParsedToolCall> TaggedCalls(std::string_view body) const;
  // Deltas of the calls held but not complete (ScanCalls over HeldJson).
  void Preview(ToolCallChunk& out);
  // The JSON text of the call(s) being held, or empty.
  std::string_view HeldJson() const;
  // The held value was no call after all: what was previewed of it stays.
  void DropPreview() { previewed_.clear(); }

  ToolCallFormat format_;
  bool parallel_;
  std::shared_ptr<const ParameterTypes> types_;
  State state_ = State::kStart;
  // Text received and not yet decided (content before it has gone out).
  std::string buffer_;
  // Text of the marker that opened the call in kMarker / kJson, given back
  // as content when the call turns out not to be one.
  std::string marker_;
  int calls_ = 0;
  // Calls streamed ahead of the held value's completion, in order: each
  // one's index and the arguments text sent.
  struct Previewed {
    int index;
    std::string sent;
  };
  std::vector<Previewed> previewed_;
  int next_index_ = 0;
  // Whitespace after a call is dropped (until other content comes).
  bool after_call_ = false;
};

// Calls in a JSON value's text as kJson reads it: {"name", "arguments" |
// "parameters"}, an array of those, {"tool_calls": [...]}, {"tool_call":
// {...}}. Empty when the text is not JSON or not of that shape. An
// arguments object is its text without whitespace outside strings (as the
// deltas stream it), other arguments re-serialized compactly.
std::vector<ParsedToolCall> CallsFromJson(std::string_view json);

// Where the JSON object or array starting at text[0] ends (one past its
// closing bracket), or npos when the text ends first; strings and escapes
// are honoured. text[0] must be '{' or '['.
size_t JsonValueEnd(std::string_view text);

// An id for a call: "call_" and 24 alphanumerics derived from `seed` (the
// response id, the choice and the call's index), or, for Mistral, whose
// templates refuse any other, 9 alphanumerics.
std::string ToolCallId(std::string_view seed, ToolCallFormat format);

}  // namespace tandem::gateway::tools

#endif  // TANDEM_GATEWAY_TOOLS_TOOL_CALL_PARSER_H_
