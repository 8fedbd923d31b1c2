// Attribute and item lookup, iteration, comparison and the Python methods of
// str, dict and list, as an ImmutableSandboxedEnvironment allows them.
#include <algorithm>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "engine/tokenizer/jinja/builtins.h"

namespace tandem::engine::jinja {
namespace {

absl::Status UndefinedError(const Value& v) {
  return absl::InvalidArgumentError(Cat("'", v.undefined_name(), "' is undefined"));
}

absl::Status Unsafe(std::string_view attr, const Value& obj) {
  return absl::InvalidArgumentError(
      Cat("access to attribute '", attr, "' of '", obj.TypeName(), "' object is unsafe."));
}

// An integer argument; a value of another type counts as 0 (where Python
// would raise a TypeError).
int64_t AsIndex(const Value& v) {
  if (v.is_int()) return v.as_int();
  if (v.is_bool()) return v.as_bool() ? 1 : 0;
  return 0;
}

std::string StrArg(const CallArgs& a, size_t i, std::string_view name, std::string def = "") {
  const Value* v = a.Get(i, name);
  return v == nullptr || v->is_none() ? def : v->Str();
}

std::vector<std::string> Split(const std::string& s, const Value* sep, int64_t maxsplit) {
  std::vector<std::string> out;
  if (sep == nullptr || sep->is_none()) {
    size_t i = 0;
    while (true) {
      while (i < s.size() && IsPySpace(s[i])) ++i;
      if (i >= s.size()) break;
      if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) {
        std::string rest = s.substr(i);
        while (!rest.empty() && IsPySpace(rest.back())) rest.pop_back();
        out.push_back(rest);
        break;
      }
      size_t j = i;
      while (j < s.size() && !IsPySpace(s[j])) ++j;
      out.push_back(s.substr(i, j - i));
      i = j;
    }
    return out;
  }
  const std::string d = sep->Str();
  if (d.empty()) return {s};  // Python raises 'empty separator'
  size_t start = 0;
  while (true) {
    const size_t at = (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) ? std::string::npos : s.find(d, start);
    if (at == std::string::npos) {
      out.push_back(s.substr(start));
      return out;
    }
    out.push_back(s.substr(start, at - start));
    start = at + d.size();
  }
}

std::string PyTitle(const std::string& s) {
  std::string out;
  bool prev_cased = false;
  for (char c : s) {
    const bool upper = c >= 'A' && c <= 'Z', lower = c >= 'a' && c <= 'z';
    if (upper || lower) {
      out.push_back(prev_cased ? static_cast<char>(std::tolower(c)) : static_cast<char>(std::toupper(c)));
      prev_cased = true;
    } else {
      out.push_back(c);
      prev_cased = false;
    }
  }
  return out;
}

bool Matches(const std::string& s, const Value& affix, bool prefix) {
  auto one = [&](const std::string& a) {
    if (a.size() > s.size()) return false;
    return prefix ? s.compare(0, a.size(), a) == 0 : s.compare(s.size() - a.size(), a.size(), a) == 0;
  };
  if (affix.is_list()) {
    for (const Value& v : affix.as_list()) {
      if (v.is_string() && one(v.as_string())) return true;
    }
    return false;
  }
  return affix.is_string() && one(affix.as_string());
}

// str.format with "{}" / "{0}" / "{name}" fields and "{{", "}}".
absl::StatusOr<Value> Format(const std::string& fmt, const CallArgs& a) {
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < fmt.size(); ++i) {
    const char c = fmt[i];
    if (c == '{' && i + 1 < fmt.size() && fmt[i + 1] == '{') {
      out.push_back('{');
      ++i;
    } else if (c == '}' && i + 1 < fmt.size() && fmt[i + 1] == '}') {
      out.push_back('}');
      ++i;
    } else if (c == '{') {
      const size_t end = fmt.find('}', i);
      if (end == std::string::npos) return absl::InvalidArgumentError("Single '{' encountered in format string");
      const std::string field = fmt.substr(i + 1, end - i - 1);
      const Value* v = nullptr;
      if (field.empty()) {
        v = auto_index < a.positional.size() ? &a.positional[auto_index] : nullptr;
        ++auto_index;
      } else if (std::isdigit(static_cast<unsigned char>(field[0]))) {
        const size_t k = static_cast<size_t>(std::atoi(field.c_str()));
        v = k < a.positional.size() ? &a.positional[k] : nullptr;
      } else {
        for (const auto& [name, x] : a.keyword) {
          if (name == field) v = &x;
        }
      }
      if (v == nullptr) return absl::InvalidArgumentError(Cat("format field '", field, "' not given"));
      out += v->Str();
      i = end;
    } else {
      out.push_back(c);
    }
  }
  return Value(std::move(out));
}

absl::StatusOr<Value> StringMethod(const std::string& s, std::string_view name, const CallArgs& a) {
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    const Value* chars = a.Get(0, "chars");
    const bool ws = chars == nullptr || chars->is_none();
    return Value(PyStrip(s, ws ? "" : chars->Str(), name != "rstrip", name != "lstrip", ws));
  }
  if (name == "split" || name == "rsplit") {
    const Value* max = a.Get(1, "maxsplit");
    List out;
    for (std::string& p : Split(s, a.Get(0, "sep"), max == nullptr ? -1 : AsIndex(*max))) out.push_back(Value(std::move(p)));
    return Value(std::move(out));
  }
  if (name == "splitlines") {
    List out;
    size_t start = 0;
    for (size_t i = 0; i < s.size(); ++i) {
      if (s[i] == '\n' || s[i] == '\r') {
        out.push_back(Value(s.substr(start, i - start)));
        if (s[i] == '\r' && i + 1 < s.size() && s[i + 1] == '\n') ++i;
        start = i + 1;
      }
    }
    if (start < s.size()) out.push_back(Value(s.substr(start)));
    return Value(std::move(out));
  }
  if (name == "startswith" || name == "endswith") {
    const Value* affix = a.Get(0, "prefix");
    if (affix == nullptr) return absl::InvalidArgumentError(Cat(name, " takes one argument"));
    return Value(Matches(s, *affix, name == "startswith"));
  }
  if (name == "upper") return Value(PyUpper(s));
  if (name == "lower") return Value(PyLower(s));
  if (name == "title") return Value(PyTitle(s));
  if (name == "capitalize") {
    std::string out = PyLower(s);
    if (!out.empty()) out[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(out[0])));
    return Value(std::move(out));
  }
  if (name == "replace") {
    const std::string from = StrArg(a, 0, "old"), to = StrArg(a, 1, "new");
    const Value* count = a.Get(2, "count");
    int64_t left = count == nullptr ? -1 : AsIndex(*count);
    std::string out;
    size_t pos = 0;
    if (from.empty()) {
      std::vector<std::string> chars = Utf8Chars(s);
      for (const std::string& c : chars) {
        if (left != 0) out += to, --left;
        out += c;
      }
      if (left != 0) out += to;
      return Value(std::move(out));
    }
    while (left != 0) {
      const size_t at = s.find(from, pos);
      if (at == std::string::npos) break;
      out += s.substr(pos, at - pos) + to;
      pos = at + from.size();
      --left;
    }
    out += s.substr(pos);
    return Value(std::move(out));
  }
  if (name == "find" || name == "rfind" || name == "index") {
    const std::string sub = StrArg(a, 0, "sub");
    const size_t at = name == "rfind" ? s.rfind(sub) : s.find(sub);
    if (at == std::string::npos) {
      if (name == "index") return absl::InvalidArgumentError("substring not found");
      return Value(-1);
    }
    return Value(static_cast<int64_t>(Utf8Chars(s.substr(0, at)).size()));
  }
  if (name == "count") {
    const std::string sub = StrArg(a, 0, "sub");
    if (sub.empty()) return Value(static_cast<int64_t>(Utf8Chars(s).size() + 1));
    int64_t n = 0;
    for (size_t at = s.find(sub); at != std::string::npos; at = s.find(sub, at + sub.size())) ++n;
    return Value(n);
  }
  if (name == "join") {
    const Value* items = a.Get(0, "iterable");
    if (items == nullptr) return absl::InvalidArgumentError("join takes one argument");
    absl::StatusOr<List> l = Iterate(*items);
    if (!l.ok()) return l.status();
    std::string out;
    for (size_t i = 0; i < l->size(); ++i) {
      if (!(*l)[i].is_string()) return absl::InvalidArgumentError("sequence item: expected str instance");
      if (i > 0) out += s;
      out += (*l)[i].as_string();
    }
    return Value(std::move(out));
  }
  if (name == "isdigit" || name == "isalpha" || name == "isspace" || name == "isalnum" || name == "isupper" ||
      name == "islower") {
    if (s.empty()) return Value(false);
    bool all = true, cased = false;
    for (char ch : s) {
      const unsigned char c = static_cast<unsigned char>(ch);
      if (name == "isdigit") all = all && std::isdigit(c);
      if (name == "isalpha") all = all && std::isalpha(c);
      if (name == "isalnum") all = all && std::isalnum(c);
      if (name == "isspace") all = all && IsPySpace(ch);
      if (name == "isupper") { all = all && !std::islower(c); cased = cased || std::isupper(c); }
      if (name == "islower") { all = all && !std::isupper(c); cased = cased || std::islower(c); }
    }
    if (name == "isupper" || name == "islower") return Value(all && cased);
    return Value(all);
  }
  if (name == "format") return Format(s, a);
  return absl::InvalidArgumentError(Cat("'str' object has no attribute '", name, "'"));
}

bool IsStringMethod(std::string_view n) {
  static constexpr std::string_view kNames[] = {
      "strip", "lstrip", "rstrip", "split", "rsplit", "splitlines", "startswith", "endswith", "upper", "lower",
      "title", "capitalize", "replace", "find", "rfind", "index", "count", "join", "isdigit", "isalpha",
      "isspace", "isalnum", "isupper", "islower", "format"};
  return std::find(std::begin(kNames), std::end(kNames), n) != std::end(kNames);
}

Value BindString(const std::string& s, std::string_view name) {
  std::string n(name);
  return MakeFunction(n, [s, n](const CallArgs& a) { return StringMethod(s, n, a); });
}

absl::StatusOr<Value> DictMethod(const Value& obj, std::string_view name) {
  const std::string n(name);
  if (n == "get") {
    return MakeFunction(n, [obj](const CallArgs& a) -> absl::StatusOr<Value> {
      const Value* key = a.Get(0, "key");
      if (key == nullptr) return absl::InvalidArgumentError("get expected at least 1 argument");
      const Value* def = a.Get(1, "default");
      const Value* v = obj.as_dict().FindKey(*key);
      if (v != nullptr) return *v;
      return def != nullptr ? *def : Value::None();
    });
  }
  if (n == "items" || n == "keys" || n == "values") {
    return MakeFunction(n, [obj, n](const CallArgs&) -> absl::StatusOr<Value> {
      List out;
      for (const auto& [k, v] : obj.as_dict().items) {
        if (n == "items") out.push_back(Value(List{k, v}).AsTuple());
        else if (n == "keys") out.push_back(k);
        else out.push_back(v);
      }
      return Value(std::move(out));
    });
  }
  if (n == "copy") {
    return MakeFunction(n, [obj](const CallArgs&) -> absl::StatusOr<Value> { return Value(Dict(obj.as_dict())); });
  }
  return MakeFunction(n, [obj, n](const CallArgs&) -> absl::StatusOr<Value> { return Unsafe(n, obj); });
}

bool IsDictMethod(std::string_view n) {
  static constexpr std::string_view kNames[] = {"get", "items", "keys", "values", "copy", "update", "pop",
                                                "popitem", "setdefault", "clear", "fromkeys"};
  return std::find(std::begin(kNames), std::end(kNames), n) != std::end(kNames);
}

absl::StatusOr<Value> ListMethod(const Value& obj, std::string_view name) {
  const std::string n(name);
  if (n == "index" || n == "count") {
    return MakeFunction(n, [obj, n](const CallArgs& a) -> absl::StatusOr<Value> {
      const Value* x = a.Get(0, "value");
      if (x == nullptr) return absl::InvalidArgumentError(Cat(n, " takes one argument"));
      int64_t count = 0;
      const List& l = obj.as_list();
      for (size_t i = 0; i < l.size(); ++i) {
        if (!l[i].Equals(*x)) continue;
        if (n == "index") return Value(static_cast<int64_t>(i));
        ++count;
      }
      if (n == "index") return absl::InvalidArgumentError("value is not in list");
      return Value(count);
    });
  }
  static constexpr std::string_view kMutating[] = {"append", "pop", "extend", "insert", "remove", "sort",
                                                   "reverse", "clear", "copy"};
  if (std::find(std::begin(kMutating), std::end(kMutating), name) != std::end(kMutating)) {
    return MakeFunction(n, [obj, n](const CallArgs&) -> absl::StatusOr<Value> { return Unsafe(n, obj); });
  }
  return Value::MakeUndefined(n);
}

}  // namespace

bool IsPySpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v' || (c >= 0x1c && c <= 0x1f);
}

std::vector<std::string> Utf8Chars(std::string_view s) {
  std::vector<std::string> out;
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    size_t n = c < 0x80 ? 1 : c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : c >= 0xc0 ? 2 : 1;
    n = std::min(n, s.size() - i);
    out.emplace_back(s.substr(i, n));
    i += n;
  }
  return out;
}

std::string PyStrip(std::string_view s, std::string_view chars, bool left, bool right, bool whitespace) {
  auto strip_char = [&](char c) { return whitespace ? IsPySpace(c) : chars.find(c) != std::string_view::npos; };
  size_t b = 0, e = s.size();
  if (left) {
    while (b < e && strip_char(s[b])) ++b;
  }
  if (right) {
    while (e > b && strip_char(s[e - 1])) --e;
  }
  return std::string(s.substr(b, e - b));
}

std::string PyUpper(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
  }
  return out;
}

std::string PyLower(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}

absl::StatusOr<Value> GetAttr(const Value& obj, std::string_view name) {
  switch (obj.kind()) {
    case Value::Kind::kUndefined:
      return UndefinedError(obj);
    case Value::Kind::kDict: {
      if (!obj.as_dict().is_namespace && IsDictMethod(name)) return DictMethod(obj, name);
      const Value* v = obj.as_dict().Find(name);
      return v != nullptr ? *v : Value::MakeUndefined(std::string(name));
    }
    case Value::Kind::kString:
      if (IsStringMethod(name)) return BindString(obj.as_string(), name);
      return Value::MakeUndefined(std::string(name));
    case Value::Kind::kList:
      return ListMethod(obj, name);
    default:
      return Value::MakeUndefined(std::string(name));
  }
}

absl::StatusOr<Value> GetItem(const Value& obj, const Value& key) {
  if (obj.is_generator()) return absl::InvalidArgumentError("'generator' object is not subscriptable");
  switch (obj.kind()) {
    case Value::Kind::kUndefined:
      return UndefinedError(obj);
    case Value::Kind::kDict: {
      if (key.is_string()) {
        const Value* v = obj.as_dict().Find(key.as_string());
        if (v != nullptr) return *v;
        return GetAttr(obj, key.as_string());
      }
      const Value* v = obj.as_dict().FindKey(key);
      return v != nullptr ? *v : Value::MakeUndefined("");
    }
    case Value::Kind::kList:
    case Value::Kind::kString: {
      if (key.is_string()) return GetAttr(obj, key.as_string());
      if (!key.is_int() && !key.is_bool()) return Value::MakeUndefined("");
      std::vector<std::string> chars;
      if (obj.is_string()) chars = Utf8Chars(obj.as_string());
      const int64_t n = static_cast<int64_t>(obj.is_list() ? obj.as_list().size() : chars.size());
      int64_t i = AsIndex(key);
      if (i < 0) i += n;
      if (i < 0 || i >= n) return Value::MakeUndefined("");
      if (obj.is_list()) return obj.as_list()[static_cast<size_t>(i)];
      return Value(chars[static_cast<size_t>(i)]);
    }
    default:
      return Value::MakeUndefined("");
  }
}

absl::StatusOr<Value> Slice(const Value& obj, const Value& start, const Value& stop, const Value& step) {
  if (obj.is_undefined()) return UndefinedError(obj);
  if (!obj.is_list() && !obj.is_string()) {
    return absl::InvalidArgumentError(Cat("'", obj.TypeName(), "' object is not subscriptable"));
  }
  for (const Value* v : {&start, &stop, &step}) {
    if (!v->is_none() && !v->is_int() && !v->is_bool()) {
      return absl::InvalidArgumentError("slice indices must be integers or None");
    }
  }
  std::vector<std::string> chars;
  if (obj.is_string()) chars = Utf8Chars(obj.as_string());
  const int64_t n = static_cast<int64_t>(obj.is_list() ? obj.as_list().size() : chars.size());
  const int64_t st = step.is_none() ? 1 : AsIndex(step);
  if (st == 0) return absl::InvalidArgumentError("slice step cannot be zero");
  auto clamp = [&](const Value& v, int64_t def) {
    if (v.is_none()) return def;
    int64_t i = AsIndex(v);
    if (i < 0) i += n;
    if (st > 0) return std::clamp<int64_t>(i, 0, n);
    return std::clamp<int64_t>(i, -1, n - 1);
  };
  const int64_t b = clamp(start, st > 0 ? 0 : n - 1);
  const int64_t e = clamp(stop, st > 0 ? n : -1);
  List out_list;
  std::string out_str;
  for (int64_t i = b; st > 0 ? i < e : i > e; i += st) {
    if (obj.is_list()) out_list.push_back(obj.as_list()[static_cast<size_t>(i)]);
    else out_str += chars[static_cast<size_t>(i)];
  }
  if (obj.is_list()) return Value(std::move(out_list));
  return Value(std::move(out_str));
}

absl::StatusOr<List> Iterate(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return List{};
    case Value::Kind::kList:
      return v.as_list();
    case Value::Kind::kDict: {
      if (v.as_dict().is_namespace) break;
      List keys;
      for (const auto& [k, x] : v.as_dict().items) keys.push_back(k);
      return keys;
    }
    case Value::Kind::kString: {
      List out;
      for (std::string& c : Utf8Chars(v.as_string())) out.push_back(Value(std::move(c)));
      return out;
    }
    default:
      break;
  }
  return absl::InvalidArgumentError(Cat("'", v.TypeName(), "' object is not iterable"));
}

absl::StatusOr<bool> Less(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_double() < b.as_double();
    return AsIndex(a) < AsIndex(b);
  }
  if (a.is_string() && b.is_string()) return a.as_string() < b.as_string();
  if (a.is_list() && b.is_list()) {
    const List& x = a.as_list();
    const List& y = b.as_list();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (x[i].Equals(y[i])) continue;
      return Less(x[i], y[i]);
    }
    return x.size() < y.size();
  }
  if (a.is_undefined()) return UndefinedError(a);
  if (b.is_undefined()) return UndefinedError(b);
  return absl::InvalidArgumentError(Cat("'<' not supported between instances of '", a.TypeName(),
                                                 "' and '", b.TypeName(), "'"));
}

absl::StatusOr<bool> Contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case Value::Kind::kUndefined:
      return false;
    case Value::Kind::kString:
      if (!item.is_string()) {
        return absl::InvalidArgumentError(
            Cat("'in <string>' requires string as left operand, not ", item.TypeName()));
      }
      return container.as_string().find(item.as_string()) != std::string::npos;
    case Value::Kind::kList:
      for (const Value& v : container.as_list()) {
        if (v.Equals(item)) return true;
      }
      return false;
    case Value::Kind::kDict:
      return container.as_dict().FindKey(item) != nullptr;
    default:
      return absl::InvalidArgumentError(
          Cat("argument of type '", container.TypeName(), "' is not iterable"));
  }
}

}  // namespace tandem::engine::jinja
