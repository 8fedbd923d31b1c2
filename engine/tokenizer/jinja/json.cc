#include "engine/tokenizer/jinja/json.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "engine/tokenizer/unicode.h"

namespace tandem::engine::jinja {
namespace {

void AppendEscaped(uint32_t cp, std::string* out) {
  char buf[16];
  if (cp >= 0x10000) {
    cp -= 0x10000;
    std::snprintf(buf, sizeof(buf), "\\u%04x\\u%04x", 0xd800 + (cp >> 10), 0xdc00 + (cp & 0x3ff));
  } else {
    std::snprintf(buf, sizeof(buf), "\\u%04x", cp);
  }
  *out += buf;
}

void AppendJsonString(std::string_view s, bool ensure_ascii, std::string* out) {
  out->push_back('"');
  for (size_t i = 0; i < s.size(); ++i) {
    const char ch = s[i];
    const unsigned char c = static_cast<unsigned char>(ch);
    if (ensure_ascii && c >= 0x80) {
      int extra = c >= 0xf0 ? 3 : c >= 0xe0 ? 2 : 1;
      uint32_t cp = c & (0x3f >> extra);
      for (int k = 0; k < extra && i + 1 < s.size(); ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[++i]) & 0x3f);
      AppendEscaped(cp, out);
      continue;
    }
    switch (c) {
      case '"': *out += "\\\""; break;
      case '\\': *out += "\\\\"; break;
      case '\n': *out += "\\n"; break;
      case '\r': *out += "\\r"; break;
      case '\t': *out += "\\t"; break;
      case '\b': *out += "\\b"; break;
      case '\f': *out += "\\f"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          *out += buf;
        } else {
          out->push_back(ch);
        }
    }
  }
  out->push_back('"');
}

absl::Status Dump(const Value& v, const JsonFormat& f, int depth, std::string* out) {
  if (depth > 512) return absl::InvalidArgumentError("tojson: value nested too deeply");
  auto newline = [&](int level) {
    out->push_back('\n');
    for (int i = 0; i < level; ++i) *out += *f.indent;
  };
  if (v.is_generator()) return absl::InvalidArgumentError("Object of type generator is not JSON serializable");
  switch (v.kind()) {
    case Value::Kind::kNone: *out += "null"; return absl::OkStatus();
    case Value::Kind::kBool: *out += v.as_bool() ? "true" : "false"; return absl::OkStatus();
    case Value::Kind::kInt: *out += Cat(v.as_int()); return absl::OkStatus();
    case Value::Kind::kFloat: {
      const double d = v.as_float();
      if (d != d) *out += "NaN";
      else if (d > 1e308 * 10) *out += "Infinity";
      else if (d < -1e308 * 10) *out += "-Infinity";
      else *out += FloatRepr(d);
      return absl::OkStatus();
    }
    case Value::Kind::kString: AppendJsonString(v.as_string(), f.ensure_ascii, out); return absl::OkStatus();
    case Value::Kind::kList: {
      const List& l = v.as_list();
      if (l.empty()) {
        *out += "[]";
        return absl::OkStatus();
      }
      out->push_back('[');
      for (size_t i = 0; i < l.size(); ++i) {
        if (i > 0) *out += !f.item_separator.empty() ? f.item_separator : f.indent ? "," : ", ";
        if (f.indent) newline(depth + 1);
        if (absl::Status s = Dump(l[i], f, depth + 1, out); !s.ok()) return s;
      }
      if (f.indent) newline(depth);
      out->push_back(']');
      return absl::OkStatus();
    }
    case Value::Kind::kDict: {
      if (v.as_dict().is_namespace) {
        return absl::InvalidArgumentError("Object of type Namespace is not JSON serializable");
      }
      // Python's json turns number, boolean and null keys into strings.
      std::vector<std::pair<std::string, const Value*>> items;
      for (const auto& [k, x] : v.as_dict().items) {
        std::string key;
        if (k.is_string()) key = k.as_string();
        else if (k.is_none()) key = "null";
        else if (k.is_bool()) key = k.as_bool() ? "true" : "false";
        else if (k.is_int() || k.is_float()) key = k.Repr();
        else return absl::InvalidArgumentError(Cat("keys must be str, int, float, bool or None, not ", k.TypeName()));
        items.emplace_back(std::move(key), &x);
      }
      if (f.sort_keys) {
        std::stable_sort(items.begin(), items.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
      }
      if (items.empty()) {
        *out += "{}";
        return absl::OkStatus();
      }
      out->push_back('{');
      for (size_t i = 0; i < items.size(); ++i) {
        if (i > 0) *out += !f.item_separator.empty() ? f.item_separator : f.indent ? "," : ", ";
        if (f.indent) newline(depth + 1);
        AppendJsonString(items[i].first, f.ensure_ascii, out);
        *out += f.key_separator;
        if (absl::Status s = Dump(*items[i].second, f, depth + 1, out); !s.ok()) return s;
      }
      if (f.indent) newline(depth);
      out->push_back('}');
      return absl::OkStatus();
    }
    case Value::Kind::kUndefined:
    case Value::Kind::kFunction:
      break;
  }
  return absl::InvalidArgumentError(
      Cat("Object of type ", v.TypeName(), " is not JSON serializable"));
}

class Parser {
 public:
  explicit Parser(std::string_view s) : s_(s) {}

  absl::StatusOr<Value> ParseDocument() {
    absl::StatusOr<Value> v = ParseValue(0);
    if (!v.ok()) return v;
    SkipSpace();
    if (pos_ != s_.size()) return Error("trailing characters");
    return v;
  }

 private:
  absl::Status Error(std::string_view what) const {
    return absl::InvalidArgumentError(Cat("JSON: ", what, " at offset ", pos_));
  }
  void SkipSpace() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\n' || s_[pos_] == '\r' || s_[pos_] == '\t')) ++pos_;
  }
  bool Consume(std::string_view lit) {
    if (s_.substr(pos_, lit.size()) != lit) return false;
    pos_ += lit.size();
    return true;
  }

  absl::StatusOr<Value> ParseValue(int depth) {
    if (depth > 256) return Error("nested too deeply");
    SkipSpace();
    if (pos_ >= s_.size()) return Error("unexpected end");
    const char c = s_[pos_];
    if (c == '{') {
      ++pos_;
      Dict d;
      SkipSpace();
      if (Consume("}")) return Value(std::move(d));
      while (true) {
        SkipSpace();
        absl::StatusOr<std::string> key = ParseString();
        if (!key.ok()) return key.status();
        SkipSpace();
        if (!Consume(":")) return Error("expected ':'");
        absl::StatusOr<Value> v = ParseValue(depth + 1);
        if (!v.ok()) return v;
        d.Set(std::move(*key), std::move(*v));
        SkipSpace();
        if (Consume("}")) return Value(std::move(d));
        if (!Consume(",")) return Error("expected ',' or '}'");
      }
    }
    if (c == '[') {
      ++pos_;
      List l;
      SkipSpace();
      if (Consume("]")) return Value(std::move(l));
      while (true) {
        absl::StatusOr<Value> v = ParseValue(depth + 1);
        if (!v.ok()) return v;
        l.push_back(std::move(*v));
        SkipSpace();
        if (Consume("]")) return Value(std::move(l));
        if (!Consume(",")) return Error("expected ',' or ']'");
      }
    }
    if (c == '"') {
      absl::StatusOr<std::string> s = ParseString();
      if (!s.ok()) return s.status();
      return Value(std::move(*s));
    }
    if (Consume("true")) return Value(true);
    if (Consume("false")) return Value(false);
    if (Consume("null")) return Value::None();
    const size_t start = pos_;
    bool is_float = false;
    if (pos_ < s_.size() && s_[pos_] == '-') ++pos_;
    while (pos_ < s_.size()) {
      const char d = s_[pos_];
      if (d >= '0' && d <= '9') {
        ++pos_;
      } else if (d == '.' || d == 'e' || d == 'E' || d == '+' || (d == '-' && pos_ > start)) {
        is_float = true;
        ++pos_;
      } else {
        break;
      }
    }
    if (pos_ == start) return Error("unexpected character");
    const std::string num(s_.substr(start, pos_ - start));
    char* end = nullptr;
    if (!is_float) {
      const long long i = std::strtoll(num.c_str(), &end, 10);
      if (*end == '\0') return Value(static_cast<int64_t>(i));
    }
    const double d = std::strtod(num.c_str(), &end);
    if (*end != '\0') return Error("malformed number");
    return Value(d);
  }

  absl::StatusOr<std::string> ParseString() {
    if (!Consume("\"")) return Error("expected a string");
    std::string out;
    while (pos_ < s_.size()) {
      const char c = s_[pos_++];
      if (c == '"') return out;
      if (c != '\\') {
        out.push_back(c);
        continue;
      }
      if (pos_ >= s_.size()) break;
      const char e = s_[pos_++];
      switch (e) {
        case 'n': out.push_back('\n'); break;
        case 't': out.push_back('\t'); break;
        case 'r': out.push_back('\r'); break;
        case 'b': out.push_back('\b'); break;
        case 'f': out.push_back('\f'); break;
        case 'u': {
          absl::StatusOr<uint32_t> cp = Hex4();
          if (!cp.ok()) return cp.status();
          uint32_t code = *cp;
          if (code >= 0xd800 && code < 0xdc00 && Consume("\\u")) {
            absl::StatusOr<uint32_t> lo = Hex4();
            if (!lo.ok()) return lo.status();
            code = 0x10000 + ((code - 0xd800) << 10) + (*lo - 0xdc00);
          }
          AppendUtf8(code, &out);
          break;
        }
        default: out.push_back(e);
      }
    }
    return Error("unterminated string");
  }

  absl::StatusOr<uint32_t> Hex4() {
    if (pos_ + 4 > s_.size()) return Error("short \\u escape");
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) {
      const char h = s_[pos_++];
      v <<= 4;
      if (h >= '0' && h <= '9') v |= static_cast<uint32_t>(h - '0');
      else if (h >= 'a' && h <= 'f') v |= static_cast<uint32_t>(h - 'a' + 10);
      else if (h >= 'A' && h <= 'F') v |= static_cast<uint32_t>(h - 'A' + 10);
      else return Error("bad \\u escape");
    }
    return v;
  }


  std::string_view s_;
  size_t pos_ = 0;
};

}  // namespace

absl::StatusOr<std::string> ToJson(const Value& value, const JsonFormat& format) {
  std::string out;
  if (absl::Status s = Dump(value, format, 0, &out); !s.ok()) return s;
  return out;
}

absl::StatusOr<Value> ParseJson(std::string_view text) { return Parser(text).ParseDocument(); }

}  // namespace tandem::engine::jinja
