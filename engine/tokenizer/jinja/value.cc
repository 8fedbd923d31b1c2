#include "engine/tokenizer/jinja/value.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "absl/strings/str_cat.h"

namespace tandem::engine::jinja {

const Value* Dict::Find(std::string_view key) const {
  for (const auto& [k, v] : items) {
    if (k.is_string() && k.as_string() == key) return &v;
  }
  return nullptr;
}

const Value* Dict::FindKey(const Value& key) const {
  for (const auto& [k, v] : items) {
    if (k.Equals(key)) return &v;
  }
  return nullptr;
}

void Dict::Set(Value key, Value value) {
  for (auto& [k, v] : items) {
    if (k.Equals(key)) {
      v = std::move(value);
      return;
    }
  }
  items.emplace_back(std::move(key), std::move(value));
}

const Value* CallArgs::Get(size_t index, std::string_view name) const {
  if (index < positional.size()) return &positional[index];
  for (const auto& [k, v] : keyword) {
    if (k == name) return &v;
  }
  return nullptr;
}

Value MakeFunction(std::string name, std::function<absl::StatusOr<Value>(const CallArgs&)> call) {
  return Value(std::make_shared<Function>(Function{std::move(name), std::move(call)}));
}

double Value::as_double() const {
  if (is_int()) return static_cast<double>(as_int());
  if (is_bool()) return as_bool() ? 1.0 : 0.0;
  return as_float();
}

bool Value::Truthy() const {
  if (generator_) return true;
  switch (kind()) {
    case Kind::kUndefined:
    case Kind::kNone:
      return false;
    case Kind::kBool:
      return as_bool();
    case Kind::kInt:
      return as_int() != 0;
    case Kind::kFloat:
      return as_float() != 0.0;
    case Kind::kString:
      return !as_string().empty();
    case Kind::kList:
      return !as_list().empty();
    case Kind::kDict:
      return as_dict().is_namespace || !as_dict().items.empty();
    case Kind::kFunction:
      return true;
  }
  return false;
}

std::string HtmlEscape(std::string_view s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out.push_back(c);
    }
  }
  return out;
}

std::string FloatRepr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);
  std::string sci(buf, r.ptr);
  // sci is "[-]d[.ddd]e[+-]XX": split into sign, digits and exponent.
  std::string sign;
  size_t i = 0;
  if (sci[0] == '-') {
    sign = "-";
    i = 1;
  }
  const size_t e = sci.find('e');
  std::string digits;
  for (size_t j = i; j < e; ++j) {
    if (sci[j] != '.') digits.push_back(sci[j]);
  }
  const int exp = std::atoi(sci.c_str() + e + 1);
  if (exp >= -4 && exp < 16) {
    std::string out;
    if (exp < 0) {
      out = "0." + std::string(static_cast<size_t>(-exp - 1), '0') + digits;
    } else if (static_cast<size_t>(exp) + 1 >= digits.size()) {
      out = digits + std::string(static_cast<size_t>(exp) + 1 - digits.size(), '0') + ".0";
    } else {
      out = digits.substr(0, static_cast<size_t>(exp) + 1) + "." +
            digits.substr(static_cast<size_t>(exp) + 1);
    }
    return sign + out;
  }
  std::string mant = digits.substr(0, 1);
  if (digits.size() > 1) mant += "." + digits.substr(1);
  char expbuf[16];
  std::snprintf(expbuf, sizeof(expbuf), "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
  return sign + mant + expbuf;
}

namespace {

std::string StrRepr(const std::string& s) {
  const bool has_single = s.find('\'') != std::string::npos;
  const bool has_double = s.find('"') != std::string::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (size_t i = 0; i < s.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c == static_cast<unsigned char>(quote) || c == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(c));
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02x", c);
      out += buf;
    } else if (c == 0xc2 && i + 1 < s.size() &&
               (static_cast<unsigned char>(s[i + 1]) <= 0x9f ||
                static_cast<unsigned char>(s[i + 1]) == 0xa0 ||
                static_cast<unsigned char>(s[i + 1]) == 0xad)) {
      // U+0080..U+009F, U+00A0 and U+00AD are not printable in Python.
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02x", static_cast<unsigned char>(s[i + 1]) - 0x40 + 0x40);
      out += buf;
      ++i;
    } else {
      out.push_back(static_cast<char>(c));
    }
  }
  out.push_back(quote);
  return out;
}

}  // namespace

std::string Value::Str() const {
  switch (kind()) {
    case Kind::kUndefined:
      return "";
    case Kind::kString:
      return as_string();
    default:
      return Repr();
  }
}

std::string Value::Repr() const {
  switch (kind()) {
    case Kind::kUndefined:
      return "";
    case Kind::kNone:
      return "None";
    case Kind::kBool:
      return as_bool() ? "True" : "False";
    case Kind::kInt:
      return Cat(as_int());
    case Kind::kFloat:
      return FloatRepr(as_float());
    case Kind::kString:
      return StrRepr(as_string());
    case Kind::kList: {
      std::string out = tuple_ ? "(" : "[";
      bool first = true;
      for (const Value& v : as_list()) {
        if (!first) out += ", ";
        first = false;
        out += v.Repr();
      }
      if (tuple_ && as_list().size() == 1) out += ",";
      return out + (tuple_ ? ")" : "]");
    }
    case Kind::kDict: {
      if (as_dict().is_namespace) return "<Namespace>";
      std::string out = "{";
      bool first = true;
      for (const auto& [k, v] : as_dict().items) {
        if (!first) out += ", ";
        first = false;
        out += k.Repr() + ": " + v.Repr();
      }
      return out + "}";
    }
    case Kind::kFunction:
      return "<function " + as_function().name + ">";
  }
  return "";
}

bool Value::Equals(const Value& other) const {
  if (is_number() && other.is_number()) {
    if (is_float() || other.is_float()) return as_double() == other.as_double();
    const int64_t a = is_bool() ? (as_bool() ? 1 : 0) : as_int();
    const int64_t b = other.is_bool() ? (other.as_bool() ? 1 : 0) : other.as_int();
    return a == b;
  }
  if (kind() != other.kind()) return false;
  switch (kind()) {
    case Kind::kUndefined:
    case Kind::kNone:
      return true;
    case Kind::kString:
      return as_string() == other.as_string();
    case Kind::kList: {
      const List& a = as_list();
      const List& b = other.as_list();
      if (a.size() != b.size()) return false;
      for (size_t i = 0; i < a.size(); ++i) {
        if (!a[i].Equals(b[i])) return false;
      }
      return true;
    }
    case Kind::kDict: {
      const Dict& a = as_dict();
      const Dict& b = other.as_dict();
      if (a.is_namespace || b.is_namespace) return &a == &b;
      if (a.items.size() != b.items.size()) return false;
      for (const auto& [k, v] : a.items) {
        const Value* w = b.FindKey(k);
        if (w == nullptr || !v.Equals(*w)) return false;
      }
      return true;
    }
    case Kind::kFunction:
      return &as_function() == &other.as_function();
    default:
      return false;
  }
}

std::string_view Value::TypeName() const {
  switch (kind()) {
    case Kind::kUndefined:
      return "Undefined";
    case Kind::kNone:
      return "NoneType";
    case Kind::kBool:
      return "bool";
    case Kind::kInt:
      return "int";
    case Kind::kFloat:
      return "float";
    case Kind::kString:
      return "str";
    case Kind::kList:
      return "list";
    case Kind::kDict:
      return as_dict().is_namespace ? "Namespace" : "dict";
    case Kind::kFunction:
      return "function";
  }
  return "";
}

}  // namespace tandem::engine::jinja
