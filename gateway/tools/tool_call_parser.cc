#include "gateway/tools/tool_call_parser.h"

#include <cstdint>
#include <utility>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gateway/tools/call_scanner.h"

namespace tandem::gateway::tools {
namespace {

using Json = nlohmann::ordered_json;

constexpr std::string_view kHermesOpen = "<tool_call>";
constexpr std::string_view kHermesClose = "</tool_call>";
constexpr std::string_view kPythonTag = "<|python_tag|>";
constexpr std::string_view kMistralOpen = "[TOOL_CALLS]";
constexpr std::string_view kMistralArgs = "[ARGS]";
constexpr std::string_view kMistralCallId = "[CALL_ID]";
constexpr std::string_view kGraniteOpen = "<|tool_call|>";
// A Mistral v11 call's name longer than this without its [ARGS] is no call.
constexpr size_t kMaxMistralName = 256;

struct FormatName {
  ToolCallFormat format;
  std::string_view name;
};
constexpr FormatName kFormatNames[] = {
    {ToolCallFormat::kNone, "none"},       {ToolCallFormat::kJson, "json"},
    {ToolCallFormat::kHermes, "hermes"},   {ToolCallFormat::kLlama3Json, "llama3_json"},
    {ToolCallFormat::kMistral, "mistral"}, {ToolCallFormat::kGranite, "granite"},
    {ToolCallFormat::kQwen3Coder, "qwen3_coder"},
};

std::string_view OpeningMarker(ToolCallFormat format) {
  switch (format) {
    case ToolCallFormat::kHermes:
    case ToolCallFormat::kQwen3Coder: return kHermesOpen;
    case ToolCallFormat::kLlama3Json: return kPythonTag;
    case ToolCallFormat::kMistral: return kMistralOpen;
    case ToolCallFormat::kGranite: return kGraniteOpen;
    default: return "";
  }
}

bool IsSpace(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

size_t SkipSpace(std::string_view s, size_t from = 0) {
  while (from < s.size() && IsSpace(s[from])) ++from;
  return from;
}

std::string_view Trim(std::string_view s) {
  const size_t begin = SkipSpace(s);
  size_t end = s.size();
  while (end > begin && IsSpace(s[end - 1])) --end;
  return s.substr(begin, end - begin);
}

// The length of the longest suffix of `text` that is a proper prefix of
// `marker`: text a marker may be starting with.
size_t MarkerPrefixAtEnd(std::string_view text, std::string_view marker) {
  for (size_t n = std::min(text.size(), marker.size() - 1); n > 0; --n) {
    if (text.substr(text.size() - n) == marker.substr(0, n)) return n;
  }
  return 0;
}

bool IsNameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
         c == '_' || c == '-' || c == '.';
}

// The arguments of a call as OpenAI's text: an object compactly, a string
// that holds JSON as that JSON, null as "{}".
bool ArgumentsText(const Json& args, std::string* out) {
  if (args.is_null()) {
    *out = "{}";
    return true;
  }
  if (args.is_object()) {
    *out = args.dump(-1, ' ', false, Json::error_handler_t::replace);
    return true;
  }
  if (args.is_string()) {
    const Json inner = Json::parse(args.get<std::string>(), nullptr, false);
    *out = inner.is_object() ? inner.dump(-1, ' ', false, Json::error_handler_t::replace)
                             : args.get<std::string>();
    return true;
  }
  return false;
}

// {"name", "arguments" | "parameters"} (with "id" and "type" allowed beside
// them), or OpenAI's {"function": {...}}; any other key means it is not a
// call but some other JSON.
bool CallFromObject(const Json& o, ParsedToolCall* out) {
  if (!o.is_object()) return false;
  if (o.contains("function") && o["function"].is_object()) {
    for (const auto& [key, v] : o.items()) {
      if (key != "function" && key != "id" && key != "type") return false;
    }
    return CallFromObject(o["function"], out);
  }
  if (!o.contains("name") || !o["name"].is_string() || o["name"].get<std::string>().empty()) {
    return false;
  }
  const char* args_key = o.contains("arguments") ? "arguments"
                         : o.contains("parameters") ? "parameters"
                                                    : nullptr;
  if (args_key == nullptr) return false;
  for (const auto& [key, v] : o.items()) {
    if (key != "name" && key != args_key && key != "id" && key != "type") return false;
  }
  out->name = o["name"].get<std::string>();
  return ArgumentsText(o[args_key], &out->arguments);
}

std::vector<ParsedToolCall> CallsFromValue(const Json& v) {
  std::vector<ParsedToolCall> calls;
  if (v.is_array()) {
    for (const Json& e : v) {
      ParsedToolCall call;
      if (!CallFromObject(e, &call)) return {};
      calls.push_back(std::move(call));
    }
    return calls;
  }
  if (!v.is_object()) return {};
  if (v.size() == 1 && v.contains("tool_calls") && v["tool_calls"].is_array()) {
    return CallsFromValue(v["tool_calls"]);
  }
  if (v.size() == 1 && v.contains("tool_call") && v["tool_call"].is_object()) {
    return CallsFromValue(v["tool_call"]);
  }
  ParsedToolCall call;
  if (CallFromObject(v, &call)) calls.push_back(std::move(call));
  return calls;
}

uint64_t SplitMix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

}  // namespace

std::string_view ToolCallFormatName(ToolCallFormat format) {
  for (const FormatName& f : kFormatNames) {
    if (f.format == format) return f.name;
  }
  return "none";
}

absl::StatusOr<ToolCallFormat> ToolCallFormatFromName(std::string_view name) {
  std::vector<std::string> names = {"auto"};
  for (const FormatName& f : kFormatNames) {
    if (f.name == name) return f.format;
    names.emplace_back(f.name);
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown tool-call parser \"", std::string(name),
                                                 "\"; one of ", absl::StrJoin(names, ", ")));
}

ToolCallFormat DetectToolCallFormat(std::string_view chat_template) {
  if (chat_template.find(kHermesOpen) != std::string_view::npos &&
      chat_template.find("<function=") != std::string_view::npos) {
    return ToolCallFormat::kQwen3Coder;
  }
  if (chat_template.find(kHermesOpen) != std::string_view::npos) return ToolCallFormat::kHermes;
  if (chat_template.find(kMistralOpen) != std::string_view::npos) return ToolCallFormat::kMistral;
  if (chat_template.find(kGraniteOpen) != std::string_view::npos) return ToolCallFormat::kGranite;
  if (chat_template.find(kPythonTag) != std::string_view::npos ||
      chat_template.find("\"parameters\": dictionary of argument name") !=
          std::string_view::npos) {
    return ToolCallFormat::kLlama3Json;
  }
  return ToolCallFormat::kJson;
}

size_t JsonValueEnd(std::string_view text) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      ++depth;
    } else if (c == '}' || c == ']') {
      if (--depth == 0) return i + 1;
    }
  }
  return std::string_view::npos;
}

std::vector<ParsedToolCall> CallsFromJson(std::string_view json) {
  const Json v = Json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (v.is_discarded()) return {};
  std::vector<ParsedToolCall> calls = CallsFromValue(v);
  // The arguments as the model wrote them (less whitespace), which is what
  // the deltas stream, rather than as re-serialized.
  const std::vector<ScannedCall> scanned = ScanCalls(json);
  if (scanned.size() == calls.size()) {
    for (size_t k = 0; k < calls.size(); ++k) {
      if (scanned[k].complete && scanned[k].arguments_complete &&
          scanned[k].name == calls[k].name) {
        calls[k].arguments = scanned[k].arguments;
      }
    }
  }
  return calls;
}

std::string ToolCallId(std::string_view seed, ToolCallFormat format) {
  static constexpr char kAlphabet[] =
      "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  uint64_t state = 1469598103934665603ULL;  // FNV-1a over the seed
  for (unsigned char c : seed) state = (state ^ c) * 1099511628211ULL;
  const bool mistral = format == ToolCallFormat::kMistral;
  std::string id = mistral ? "" : "call_";
  for (int i = 0; i < (mistral ? 9 : 24); ++i) id += kAlphabet[SplitMix64(state) % 62];
  return id;
}

ToolCallParser::ToolCallParser(ToolCallFormat format, bool parallel,
                               std::shared_ptr<const ParameterTypes> types)
    : format_(format), parallel_(parallel), types_(std::move(types)) {
  if (format_ == ToolCallFormat::kNone) state_ = State::kText;
}

ToolCallChunk ToolCallParser::Feed(std::string_view text) {
  ToolCallChunk out;
  buffer_.append(text);
  while (Step(/*final=*/false, out)) {
  }
  Preview(out);
  return out;
}

std::string_view ToolCallParser::HeldJson() const {
  if (state_ == State::kJson || (state_ == State::kMarker && format_ == ToolCallFormat::kHermes)) {
    return buffer_;
  }
  return "";
}

void ToolCallParser::Preview(ToolCallChunk& out) {
  const std::string_view held = HeldJson();
  if (held.empty()) return;
  const std::vector<ScannedCall> scanned = ScanCalls(held);
  for (size_t j = 0; j < scanned.size(); ++j) {
    const ScannedCall& call = scanned[j];
    if (!call.arguments_started) break;  // in order: a later call waits for this one
    if (j == previewed_.size()) {
      if (!parallel_ && calls_ + static_cast<int>(previewed_.size()) >= 1) break;
      previewed_.push_back({.index = next_index_++, .sent = ""});
      out.deltas.push_back({.index = previewed_.back().index, .name = call.name, .arguments = ""});
    }
    Previewed& p = previewed_[j];
    if (call.arguments.size() > p.sent.size() && call.arguments.starts_with(p.sent)) {
      out.deltas.push_back(
          {.index = p.index, .name = "", .arguments = call.arguments.substr(p.sent.size())});
      p.sent = call.arguments;
    }
  }
}

ToolCallChunk ToolCallParser::Finish() {
  ToolCallChunk out;
  while (Step(/*final=*/true, out)) {
  }
  // Whatever is still held could only have become a call with more text.
  DropPreview();
  if (!marker_.empty() || !buffer_.empty()) Content(marker_ + buffer_, out);
  marker_.clear();
  buffer_.clear();
  return out;
}

ToolCallChunk ToolCallParser::ParseAll(ToolCallFormat format, bool parallel,
                                       std::string_view text,
                                       std::shared_ptr<const ParameterTypes> types) {
  ToolCallParser parser(format, parallel, std::move(types));
  ToolCallChunk out = parser.Feed(text);
  ToolCallChunk rest = parser.Finish();
  out.content += rest.content;
  for (ParsedToolCall& call : rest.calls) out.calls.push_back(std::move(call));
  for (ToolCallDelta& delta : rest.deltas) out.deltas.push_back(std::move(delta));
  return out;
}

void ToolCallParser::Content(std::string_view text, ToolCallChunk& out) {
  if (after_call_) {
    text.remove_prefix(SkipSpace(text));
    if (text.empty()) return;
    after_call_ = false;
  }
  out.content.append(text);
}

void ToolCallParser::Calls(std::vector<ParsedToolCall> calls, ToolCallChunk& out) {
  for (size_t k = 0; k < calls.size(); ++k) {
    ParsedToolCall& call = calls[k];
    if (k < previewed_.size()) {
      // Streamed already: the rest of its arguments.
      const Previewed& p = previewed_[k];
      if (call.arguments.size() > p.sent.size() && call.arguments.starts_with(p.sent)) {
        out.deltas.push_back(
            {.index = p.index, .name = "", .arguments = call.arguments.substr(p.sent.size())});
      }
    } else {
      if (!parallel_ && calls_ >= 1) break;
      const int index = next_index_++;
      out.deltas.push_back({.index = index, .name = call.name, .arguments = ""});
      out.deltas.push_back({.index = index, .name = "", .arguments = call.arguments});
    }
    out.calls.push_back(std::move(call));
    ++calls_;
  }
  previewed_.clear();
}

std::vector<ParsedToolCall> ToolCallParser::TaggedCalls(std::string_view body) const {
  if (format_ != ToolCallFormat::kQwen3Coder) return CallsFromJson(Trim(body));
  static const ParameterTypes kNone;
  std::optional<ParsedToolCall> call = XmlCall(body, types_ != nullptr ? *types_ : kNone);
  if (!call.has_value()) return CallsFromJson(Trim(body));  // some write JSON anyway
  return {*std::move(call)};
}

void ToolCallParser::AfterCall() {
  after_call_ = true;
  marker_.clear();
  state_ = State::kStart;
}

bool ToolCallParser::Step(bool final, ToolCallChunk& out) {
  switch (state_) {
    case State::kStart: return StepStart(final, out);
    case State::kText: return StepText(final, out);
    case State::kJson: return StepJson(final, out);
    case State::kMarker: return StepMarker(final, out);
  }
  return false;
}

bool ToolCallParser::StepStart(bool final, ToolCallChunk& /*out*/) {
  size_t p = SkipSpace(buffer_);
  // Llama 3.x separates its calls with ';'.
  if (after_call_ && p < buffer_.size() && buffer_[p] == ';') {
    buffer_.erase(0, p + 1);  // what separates calls is dropped
    p = SkipSpace(buffer_);
  }
  if (p == buffer_.size()) return false;  // only whitespace so far
  const std::string_view rest = std::string_view(buffer_).substr(p);
  const std::string_view marker = OpeningMarker(format_);
  if (!marker.empty() && rest.size() < marker.size() && marker.substr(0, rest.size()) == rest &&
      !final) {
    return false;  // a marker or a JSON array ("[TOOL_CALLS]" vs "[{"): wait
  }
  if ((rest[0] == '{' || rest[0] == '[') && !(!marker.empty() && rest.starts_with(marker))) {
    state_ = State::kJson;
    return true;
  }
  state_ = State::kText;
  return true;
}

bool ToolCallParser::StepText(bool final, ToolCallChunk& out) {
  const std::string_view marker = OpeningMarker(format_);
  if (marker.empty()) {
    Content(buffer_, out);
    buffer_.clear();
    return false;
  }
  const size_t at = buffer_.find(marker);
  if (at != std::string::npos) {
    Content(std::string_view(buffer_).substr(0, at), out);
    buffer_.erase(0, at + marker.size());
    marker_ = std::string(marker);
    state_ = State::kMarker;
    return true;
  }
  const size_t held = final ? 0 : MarkerPrefixAtEnd(buffer_, marker);
  Content(std::string_view(buffer_).substr(0, buffer_.size() - held), out);
  buffer_.erase(0, buffer_.size() - held);
  return false;
}

bool ToolCallParser::StepJson(bool final, ToolCallChunk& out) {
  const size_t p = SkipSpace(buffer_);
  if (p == buffer_.size()) return false;
  const size_t length = JsonValueEnd(std::string_view(buffer_).substr(p));
  if (length == std::string_view::npos) {
    if (!final) return false;
    // An array of calls cut short (max_tokens, a stop string): its complete
    // calls count and the unfinished one is dropped.
    std::vector<ParsedToolCall> complete;
    if (buffer_[p] == '[') {
      for (const ScannedCall& call : ScanCalls(std::string_view(buffer_).substr(p))) {
        if (!call.complete || !call.arguments_complete) break;
        complete.push_back({.name = call.name, .arguments = call.arguments});
      }
    }
    if (!complete.empty()) {
      Calls(std::move(complete), out);
      buffer_.clear();
      AfterCall();
      return false;
    }
    // An unfinished reply: content as generated (Finish adds it).
    DropPreview();
    state_ = State::kText;
    return false;
  }
  std::vector<ParsedToolCall> calls = CallsFromJson(std::string_view(buffer_).substr(p, length));
  if (calls.empty()) {
    // JSON, but no call: content, and the rest is scanned as text.
    DropPreview();
    Content(marker_ + buffer_.substr(0, p + length), out);
    marker_.clear();
    buffer_.erase(0, p + length);
    state_ = State::kText;
    return true;
  }
  Calls(std::move(calls), out);
  buffer_.erase(0, p + length);
  AfterCall();
  return true;
}

bool ToolCallParser::StepMarker(bool final, ToolCallChunk& out) {
  // Gives the marker and `consumed` bytes of the buffer back as content.
  auto not_a_call = [&](size_t consumed) {
    DropPreview();
    Content(marker_ + buffer_.substr(0, consumed), out);
    marker_.clear();
    buffer_.erase(0, consumed);
    state_ = State::kText;
    return true;
  };
  if (format_ == ToolCallFormat::kHermes || format_ == ToolCallFormat::kQwen3Coder) {
    const size_t close = buffer_.find(kHermesClose);
    if (close == std::string::npos) {
      // The reply ended inside the call (a stop string or EOS before the
      // closing tag): a complete JSON call still counts.
      if (!final) return false;
      std::vector<ParsedToolCall> calls = TaggedCalls(buffer_);
      if (calls.empty()) return not_a_call(buffer_.size());
      Calls(std::move(calls), out);
      buffer_.clear();
      AfterCall();
      return false;
    }
    std::vector<ParsedToolCall> calls = TaggedCalls(std::string_view(buffer_).substr(0, close));
    if (calls.empty()) return not_a_call(close + kHermesClose.size());
    Calls(std::move(calls), out);
    buffer_.erase(0, close + kHermesClose.size());
    AfterCall();
    return true;
  }
  const size_t p = SkipSpace(buffer_);
  if (p == buffer_.size()) {
    if (final) return not_a_call(buffer_.size());
    return false;
  }
  if (buffer_[p] == '{' || buffer_[p] == '[') {
    state_ = State::kJson;  // the marker stays in marker_ should it fail
    return true;
  }
  if (format_ != ToolCallFormat::kMistral) return not_a_call(0);
  // Mistral v11+: name[CALL_ID]id[ARGS]{...}.
  const size_t args = buffer_.find(kMistralArgs);
  if (args == std::string::npos) {
    if (final || buffer_.size() > kMaxMistralName) return not_a_call(buffer_.size());
    return false;
  }
  std::string_view head = std::string_view(buffer_).substr(0, args);
  if (const size_t id = head.find(kMistralCallId); id != std::string_view::npos) {
    head = head.substr(0, id);
  }
  const std::string_view name = Trim(head);
  bool valid_name = !name.empty();
  for (char c : name) valid_name = valid_name && IsNameChar(c);
  if (!valid_name) return not_a_call(args + kMistralArgs.size());
  const size_t object = SkipSpace(buffer_, args + kMistralArgs.size());
  if (object == buffer_.size()) {
    if (final) return not_a_call(buffer_.size());
    return false;
  }
  if (buffer_[object] != '{') return not_a_call(object);
  const size_t length = JsonValueEnd(std::string_view(buffer_).substr(object));
  if (length == std::string_view::npos) {
    if (final) return not_a_call(buffer_.size());
    return false;
  }
  const Json arguments =
      Json::parse(std::string_view(buffer_).substr(object, length), nullptr, false);
  if (arguments.is_discarded() || !arguments.is_object()) return not_a_call(object + length);
  std::vector<ParsedToolCall> calls(1);
  calls[0].name = std::string(name);
  ArgumentsText(arguments, &calls[0].arguments);
  Calls(std::move(calls), out);
  buffer_.erase(0, object + length);
  AfterCall();
  return true;
}

}  // namespace tandem::gateway::tools
