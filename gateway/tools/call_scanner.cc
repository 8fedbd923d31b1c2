#include "gateway/tools/call_scanner.h"

#include <nlohmann/json.hpp>

#include "gateway/tools/tool_call_parser.h"

namespace tandem::gateway::tools {
namespace {

constexpr size_t kNpos = std::string_view::npos;

bool IsSpace(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

size_t SkipSpace(std::string_view s, size_t i) {
  while (i < s.size() && IsSpace(s[i])) ++i;
  return i;
}

// One past the closing quote of the string literal at s[i] == '"', or npos.
size_t StringEnd(std::string_view s, size_t i) {
  for (size_t j = i + 1; j < s.size(); ++j) {
    if (s[j] == '\\') {
      ++j;
    } else if (s[j] == '"') {
      return j + 1;
    }
  }
  return kNpos;
}

std::string Decode(std::string_view literal) {
  const nlohmann::json v = nlohmann::json::parse(literal, nullptr, false);
  return v.is_string() ? v.get<std::string>() : "";
}

// One past the value at s[i] (a string, object, array or scalar), or npos
// when the text ends first.
size_t ValueEnd(std::string_view s, size_t i) {
  if (s[i] == '"') return StringEnd(s, i);
  if (s[i] == '{' || s[i] == '[') {
    const size_t n = JsonValueEnd(s.substr(i));
    return n == kNpos ? kNpos : i + n;
  }
  for (size_t j = i; j < s.size(); ++j) {
    if (s[j] == ',' || s[j] == '}' || s[j] == ']' || IsSpace(s[j])) return j;
  }
  return kNpos;
}

// Scans the object at s[i] == '{' into `call`; one past it, or npos when
// the text ends first or is no call's JSON (`*bad` then).
size_t ScanObject(std::string_view s, size_t i, ScannedCall& call, bool* bad) {
  ++i;
  while (true) {
    i = SkipSpace(s, i);
    if (i >= s.size()) return kNpos;
    if (s[i] == '}') {
      call.complete = true;
      return i + 1;
    }
    if (s[i] == ',') {
      ++i;
      continue;
    }
    if (s[i] != '"') {
      *bad = true;
      return kNpos;
    }
    const size_t key_end = StringEnd(s, i);
    if (key_end == kNpos) return kNpos;
    const std::string key = Decode(s.substr(i, key_end - i));
    i = SkipSpace(s, key_end);
    if (i >= s.size()) return kNpos;
    if (s[i] != ':') {
      *bad = true;
      return kNpos;
    }
    i = SkipSpace(s, i + 1);
    if (i >= s.size()) return kNpos;
    const size_t end = ValueEnd(s, i);
    if (key == "name" && s[i] == '"' && end != kNpos) call.name = Decode(s.substr(i, end - i));
    if ((key == "arguments" || key == "parameters") && s[i] == '{' && !call.name.empty()) {
      call.arguments_started = true;
      call.arguments_complete = end != kNpos;
      call.arguments = MinifyJson(s.substr(i, end == kNpos ? kNpos : end - i));
    }
    if (end == kNpos) return kNpos;
    i = end;
  }
}

}  // namespace

std::string MinifyJson(std::string_view json) {
  std::string out;
  out.reserve(json.size());
  bool in_string = false, escaped = false;
  for (char c : json) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (IsSpace(c)) {
      continue;
    }
    out += c;
  }
  return out;
}

std::vector<ScannedCall> ScanCalls(std::string_view json) {
  std::vector<ScannedCall> calls;
  size_t i = SkipSpace(json, 0);
  if (i >= json.size()) return calls;
  bool bad = false;
  if (json[i] == '{') {
    calls.emplace_back();
    ScanObject(json, i, calls.back(), &bad);
    return calls;
  }
  if (json[i] != '[') return calls;
  ++i;
  while (!bad) {
    i = SkipSpace(json, i);
    if (i >= json.size() || json[i] == ']') break;
    if (json[i] == ',') {
      ++i;
      continue;
    }
    if (json[i] != '{') break;
    calls.emplace_back();
    i = ScanObject(json, i, calls.back(), &bad);
    if (i == kNpos) break;
  }
  return calls;
}

}  // namespace tandem::gateway::tools
