// jinja2's filters and tests, and HF transformers' tojson.
#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "engine/tokenizer/jinja/builtins.h"
#include "engine/tokenizer/jinja/json.h"

namespace tandem::engine::jinja {
namespace {

const Value* Arg(const CallArgs& a, size_t i, std::string_view name) { return a.Get(i, name); }

bool BoolArg(const CallArgs& a, size_t i, std::string_view name, bool def) {
  const Value* v = a.Get(i, name);
  return v == nullptr ? def : v->Truthy();
}

absl::Status NeedsDefined(const Value& v) {
  if (v.is_undefined()) return absl::InvalidArgumentError(Cat("'", v.undefined_name(), "' is undefined"));
  return absl::OkStatus();
}

// An attribute path "a.b" or index as jinja2's make_attrgetter reads it.
absl::StatusOr<Value> Attribute(const Value& item, const Value& attr) {
  if (attr.is_int()) return GetItem(item, attr);
  Value cur = item;
  std::string path = attr.Str();
  size_t start = 0;
  while (true) {
    const size_t dot = path.find('.', start);
    const std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    absl::StatusOr<Value> next;
    if (!part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      next = GetItem(cur, Value(static_cast<int64_t>(std::atoll(part.c_str()))));
    } else {
      next = GetItem(cur, Value(part));
    }
    if (!next.ok()) return next;
    cur = std::move(*next);
    if (dot == std::string::npos) return cur;
    start = dot + 1;
  }
}

Value SortKey(const Value& v, bool case_sensitive) {
  if (!case_sensitive && v.is_string()) return Value(PyLower(v.as_string()));
  return v;
}

absl::Status SortList(List* items, bool reverse, bool case_sensitive, const Value* attribute) {
  std::vector<std::pair<Value, Value>> keyed;
  for (Value& v : *items) {
    Value key = v;
    if (attribute != nullptr && !attribute->is_none()) {
      absl::StatusOr<Value> k = Attribute(v, *attribute);
      if (!k.ok()) return k.status();
      key = std::move(*k);
    }
    keyed.emplace_back(SortKey(key, case_sensitive), std::move(v));
  }
  absl::Status error;
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& x, const auto& y) {
    absl::StatusOr<bool> lt = reverse ? Less(y.first, x.first) : Less(x.first, y.first);
    if (!lt.ok()) {
      error = lt.status();
      return false;
    }
    return *lt;
  });
  if (!error.ok()) return error;
  items->clear();
  for (auto& kv : keyed) items->push_back(std::move(kv.second));
  return absl::OkStatus();
}

std::string JinjaTitle(const std::string& s) {
  // Words start after "-", whitespace, "(", "{", "[" or "<".
  std::string out;
  bool start = true;
  for (char c : s) {
    const bool sep = c == '-' || IsPySpace(c) || c == '(' || c == '{' || c == '[' || c == '<';
    if (sep) {
      out.push_back(c);
      start = true;
    } else if (start) {
      out += PyUpper(std::string(1, c));
      start = false;
    } else {
      out += PyLower(std::string(1, c));
    }
  }
  return out;
}

absl::StatusOr<Value> ToJsonFilter(const Value& v, const CallArgs& a) {
  JsonFormat f;
  f.ensure_ascii = BoolArg(a, 0, "ensure_ascii", false);
  if (const Value* indent = Arg(a, 1, "indent"); indent != nullptr && !indent->is_none()) {
    if (indent->is_int()) f.indent = std::string(static_cast<size_t>(std::max<int64_t>(0, indent->as_int())), ' ');
    else f.indent = indent->Str();
  }
  if (const Value* sep = Arg(a, 2, "separators"); sep != nullptr && sep->is_list() && sep->as_list().size() == 2) {
    f.item_separator = sep->as_list()[0].Str();
    f.key_separator = sep->as_list()[1].Str();
  }
  f.sort_keys = BoolArg(a, 3, "sort_keys", false);
  absl::StatusOr<std::string> s = ToJson(v, f);
  if (!s.ok()) return s.status();
  return Value(std::move(*s));
}

absl::StatusOr<Value> ToInt(const Value& v, const CallArgs& a) {
  const Value* def = Arg(a, 0, "default");
  const Value fallback = def != nullptr ? *def : Value(0);
  if (v.is_int()) return v;
  if (v.is_bool()) return Value(static_cast<int64_t>(v.as_bool()));
  if (v.is_float()) return Value(static_cast<int64_t>(v.as_float()));
  if (v.is_string()) {
    std::string s = PyStrip(v.as_string(), "", true, true, true);
    s.erase(std::remove(s.begin(), s.end(), '_'), s.end());
    char* end = nullptr;
    const long long i = std::strtoll(s.c_str(), &end, 10);
    if (!s.empty() && *end == '\0') return Value(static_cast<int64_t>(i));
    const double d = std::strtod(s.c_str(), &end);
    if (!s.empty() && *end == '\0') return Value(static_cast<int64_t>(d));
  }
  return fallback;
}

absl::StatusOr<Value> ToFloat(const Value& v, const CallArgs& a) {
  const Value* def = Arg(a, 0, "default");
  const Value fallback = def != nullptr ? *def : Value(0.0);
  if (v.is_number()) return Value(v.as_double());
  if (v.is_string()) {
    const std::string s = PyStrip(v.as_string(), "", true, true, true);
    char* end = nullptr;
    const double d = std::strtod(s.c_str(), &end);
    if (!s.empty() && *end == '\0') return Value(d);
  }
  return fallback;
}

absl::StatusOr<Value> Round(const Value& v, const CallArgs& a) {
  if (!v.is_number()) return absl::InvalidArgumentError(Cat("round: '", v.TypeName(), "' is not a number"));
  const Value* p = Arg(a, 0, "precision");
  if (p != nullptr && !p->is_int()) return absl::InvalidArgumentError("round: precision must be an integer");
  const int64_t precision = p == nullptr ? 0 : std::clamp<int64_t>(p->as_int(), -30, 30);
  const std::string method = Arg(a, 1, "method") == nullptr ? "common" : Arg(a, 1, "method")->Str();
  const double scale = std::pow(10.0, static_cast<double>(precision));
  const double x = v.as_double() * scale;
  double r;
  if (method == "ceil") r = std::ceil(x);
  else if (method == "floor") r = std::floor(x);
  else r = std::nearbyint(x);  // Python's round(): half to even
  if (method == "common" && v.is_int()) return v;
  return Value(r / scale);
}

absl::StatusOr<Value> SelectOrReject(const Value& v, const CallArgs& a, bool by_attr, bool select) {
  if (!v.Truthy()) return Value(List{}).AsGenerator();  // jinja2 skips a falsy sequence
  absl::StatusOr<List> items = Iterate(v);
  if (!items.ok()) return items.status();
  size_t next = 0;
  Value attr;
  if (by_attr) {
    if (a.positional.empty()) return absl::InvalidArgumentError("selectattr needs an attribute");
    attr = a.positional[next++];
  }
  std::string test;
  if (next < a.positional.size()) test = a.positional[next++].Str();
  CallArgs test_args;
  test_args.positional.assign(a.positional.begin() + static_cast<std::ptrdiff_t>(next), a.positional.end());
  List out;
  for (const Value& item : *items) {
    Value subject = item;
    if (by_attr) {
      absl::StatusOr<Value> s = Attribute(item, attr);
      if (!s.ok()) return s.status();
      subject = std::move(*s);
    }
    bool pass;
    if (test.empty()) {
      pass = subject.Truthy();
    } else {
      absl::StatusOr<bool> r = ApplyTest(test, subject, test_args);
      if (!r.ok()) return r.status();
      pass = *r;
    }
    if (pass == select) out.push_back(item);
  }
  return Value(std::move(out)).AsGenerator();
}

absl::StatusOr<Value> Map(const Value& v, const CallArgs& a) {
  if (!v.Truthy()) return Value(List{}).AsGenerator();  // jinja2 skips a falsy sequence
  absl::StatusOr<List> items = Iterate(v);
  if (!items.ok()) return items.status();
  List out;
  const Value* attr = nullptr;
  const Value* def = nullptr;
  for (const auto& [k, x] : a.keyword) {
    if (k == "attribute") attr = &x;
    if (k == "default") def = &x;
  }
  if (attr != nullptr) {
    for (const Value& item : *items) {
      absl::StatusOr<Value> x = Attribute(item, *attr);
      if (!x.ok()) return x.status();
      out.push_back(x->is_undefined() && def != nullptr ? *def : *x);
    }
    return Value(std::move(out)).AsGenerator();
  }
  if (a.positional.empty()) return absl::InvalidArgumentError("map needs a filter name or attribute=");
  const std::string filter = a.positional[0].Str();
  CallArgs rest;
  rest.positional.assign(a.positional.begin() + 1, a.positional.end());
  rest.keyword = a.keyword;
  for (const Value& item : *items) {
    absl::StatusOr<Value> x = ApplyFilter(filter, item, rest);
    if (!x.ok()) return x.status();
    out.push_back(std::move(*x));
  }
  return Value(std::move(out)).AsGenerator();
}

absl::StatusOr<Value> Indent(const Value& v, const CallArgs& a) {
  const Value* w = Arg(a, 0, "width");
  if (w != nullptr && !w->is_string() && !w->is_int()) return absl::InvalidArgumentError("indent: width must be a number or a string");
  if (w != nullptr && w->is_int() && w->as_int() > 4096) return absl::InvalidArgumentError("indent: width too large");
  const std::string pad = w == nullptr ? "    " : w->is_string() ? w->as_string()
                                                                  : std::string(static_cast<size_t>(std::max<int64_t>(0, w->as_int())), ' ');
  const bool first = BoolArg(a, 1, "first", false);
  const bool blank = BoolArg(a, 2, "blank", false);
  std::string s = v.Str() + "\n";
  std::vector<std::string> lines;
  size_t start = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\n') {
      lines.push_back(s.substr(start, i - start));
      start = i + 1;
    }
  }
  std::string out;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (i > 0) out += "\n";
    if (i > 0 && (blank || !lines[i].empty())) out += pad;
    out += lines[i];
  }
  if (first) out = pad + out;
  return Value(std::move(out));
}

absl::StatusOr<Value> MinMax(const Value& v, const CallArgs& a, bool want_max) {
  absl::StatusOr<List> items = Iterate(v);
  if (!items.ok()) return items.status();
  if (items->empty()) return Value::MakeUndefined("");
  if (absl::Status s = SortList(&*items, false, BoolArg(a, 0, "case_sensitive", false), Arg(a, 1, "attribute")); !s.ok()) return s;
  return want_max ? items->back() : items->front();
}

}  // namespace

absl::StatusOr<Value> ApplyFilter(std::string_view name, const Value& v, const CallArgs& a) {
  if (name == "tojson") return ToJsonFilter(v, a);
  if (name == "safe") return Value(v.Str()).AsMarkup();
  if (name == "string") return Value(v.Str());
  if (name == "trim") {
    const Value* chars = Arg(a, 0, "chars");
    const bool ws = chars == nullptr || chars->is_none();
    return Value(PyStrip(v.Str(), ws ? "" : chars->Str(), true, true, ws));
  }
  if (name == "upper") return Value(PyUpper(v.Str()));
  if (name == "lower") return Value(PyLower(v.Str()));
  if (name == "title") return Value(JinjaTitle(v.Str()));
  if (name == "capitalize") {
    std::string s = PyLower(v.Str());
    if (!s.empty()) s[0] = PyUpper(s.substr(0, 1))[0];
    return Value(std::move(s));
  }
  if (name == "length" || name == "count") {
    if (v.is_generator()) return absl::InvalidArgumentError("object of type 'generator' has no len()");
    switch (v.kind()) {
      case Value::Kind::kUndefined: return Value(0);
      case Value::Kind::kString: return Value(static_cast<int64_t>(Utf8Chars(v.as_string()).size()));
      case Value::Kind::kList: return Value(static_cast<int64_t>(v.as_list().size()));
      case Value::Kind::kDict: return Value(static_cast<int64_t>(v.as_dict().items.size()));
      default: return absl::InvalidArgumentError(Cat("object of type '", v.TypeName(), "' has no len()"));
    }
  }
  if (name == "default" || name == "d") {
    const Value* def = Arg(a, 0, "default_value");
    const bool boolean = BoolArg(a, 1, "boolean", false);
    if (v.is_undefined() || (boolean && !v.Truthy())) return def != nullptr ? *def : Value("");
    return v;
  }
  if (name == "join") {
    absl::StatusOr<List> items = Iterate(v);
    if (!items.ok()) return items.status();
    const Value* sep = Arg(a, 0, "d");
    const Value* attr = Arg(a, 1, "attribute");
    std::string out;
    for (size_t i = 0; i < items->size(); ++i) {
      if (i > 0 && sep != nullptr) out += sep->Str();
      if (attr != nullptr && !attr->is_none()) {
        absl::StatusOr<Value> x = Attribute((*items)[i], *attr);
        if (!x.ok()) return x.status();
        out += x->Str();
      } else {
        out += (*items)[i].Str();
      }
    }
    return Value(std::move(out));
  }
  if (name == "first" || name == "last") {
    if (absl::Status s = NeedsDefined(v); !s.ok()) return s;
    absl::StatusOr<List> items = Iterate(v);
    if (!items.ok()) return items.status();
    if (items->empty()) return Value::MakeUndefined(std::string(name));
    return name == "first" ? items->front() : items->back();
  }
  if (name == "list") {
    absl::StatusOr<List> items = Iterate(v);
    if (!items.ok()) return items.status();
    return Value(std::move(*items));
  }
  if (name == "items") {
    if (v.is_undefined()) return Value(List{});
    if (!v.is_dict()) return absl::InvalidArgumentError("items: can only get item pairs from a mapping");
    List out;
    for (const auto& [k, x] : v.as_dict().items) out.push_back(Value(List{k, x}).AsTuple());
    return Value(std::move(out));
  }
  if (name == "dictsort") {
    if (!v.is_dict()) return absl::InvalidArgumentError("dictsort: can only sort a mapping");
    const bool cs = BoolArg(a, 0, "case_sensitive", false);
    const Value* by = Arg(a, 1, "by");
    const bool reverse = BoolArg(a, 2, "reverse", false);
    List out;
    for (const auto& [k, x] : v.as_dict().items) out.push_back(Value(List{k, x}).AsTuple());
    const Value index(by != nullptr && by->Str() == "value" ? 1 : 0);
    if (absl::Status s = SortList(&out, reverse, cs, &index); !s.ok()) return s;
    return Value(std::move(out));
  }
  if (name == "replace") {
    CallArgs args = a;
    return GetAttr(Value(v.Str()), "replace").value().as_function().call(args);
  }
  if (name == "int") return ToInt(v, a);
  if (name == "float") return ToFloat(v, a);
  if (name == "round") return Round(v, a);
  if (name == "abs") {
    if (v.is_int()) return Value(v.as_int() < 0 ? -v.as_int() : v.as_int());
    if (v.is_float()) return Value(std::fabs(v.as_float()));
    if (v.is_bool()) return Value(static_cast<int64_t>(v.as_bool()));
    return absl::InvalidArgumentError(Cat("bad operand type for abs(): '", v.TypeName(), "'"));
  }
  if (name == "selectattr") return SelectOrReject(v, a, true, true);
  if (name == "rejectattr") return SelectOrReject(v, a, true, false);
  if (name == "select") return SelectOrReject(v, a, false, true);
  if (name == "reject") return SelectOrReject(v, a, false, false);
  if (name == "map") return Map(v, a);
  if (name == "unique") {
    absl::StatusOr<List> items = Iterate(v);
    if (!items.ok()) return items.status();
    const bool cs = BoolArg(a, 0, "case_sensitive", false);
    const Value* attr = Arg(a, 1, "attribute");
    List out, seen;
    for (const Value& item : *items) {
      Value key = item;
      if (attr != nullptr && !attr->is_none()) {
        absl::StatusOr<Value> k = Attribute(item, *attr);
        if (!k.ok()) return k.status();
        key = *k;
      }
      key = SortKey(key, cs);
      bool dup = false;
      for (const Value& s : seen) dup = dup || s.Equals(key);
      if (dup) continue;
      seen.push_back(key);
      out.push_back(item);
    }
    return Value(std::move(out));
  }
  if (name == "sort") {
    absl::StatusOr<List> items = Iterate(v);
    if (!items.ok()) return items.status();
    if (absl::Status s = SortList(&*items, BoolArg(a, 0, "reverse", false), BoolArg(a, 1, "case_sensitive", false),
                                  Arg(a, 2, "attribute"));
        !s.ok()) {
      return s;
    }
    return Value(std::move(*items));
  }
  if (name == "reverse") {
    if (v.is_string()) {
      std::vector<std::string> chars = Utf8Chars(v.as_string());
      std::string out;
      for (auto it = chars.rbegin(); it != chars.rend(); ++it) out += *it;
      return Value(std::move(out));
    }
    absl::StatusOr<List> items = Iterate(v);
    if (!items.ok()) return items.status();
    std::reverse(items->begin(), items->end());
    return Value(std::move(*items));
  }
  if (name == "indent") return Indent(v, a);
  if (name == "wordcount") {
    int64_t n = 0;
    bool in_word = false;
    for (char c : v.Str()) {
      const bool w = std::isalnum(static_cast<unsigned char>(c)) || c == '_' || static_cast<unsigned char>(c) >= 0x80;
      if (w && !in_word) ++n;
      in_word = w;
    }
    return Value(n);
  }
  if (name == "sum") {
    absl::StatusOr<List> items = Iterate(v);
    if (!items.ok()) return items.status();
    const Value* attr = Arg(a, 0, "attribute");
    const Value* start = Arg(a, 1, "start");
    Value total = start != nullptr ? *start : Value(0);
    for (const Value& item : *items) {
      Value x = item;
      if (attr != nullptr && !attr->is_none()) {
        absl::StatusOr<Value> k = Attribute(item, *attr);
        if (!k.ok()) return k.status();
        x = *k;
      }
      if (!x.is_number() || !total.is_number()) return absl::InvalidArgumentError("sum: not a number");
      if (x.is_float() || total.is_float()) total = Value(total.as_double() + x.as_double());
      else total = Value((total.is_bool() ? int64_t{total.as_bool()} : total.as_int()) + (x.is_bool() ? int64_t{x.as_bool()} : x.as_int()));
    }
    return total;
  }
  if (name == "min") return MinMax(v, a, false);
  if (name == "max") return MinMax(v, a, true);
  if (name == "attr") {
    const Value* attr = Arg(a, 0, "name");
    if (attr == nullptr) return absl::InvalidArgumentError("attr needs a name");
    return GetAttr(v, attr->Str());
  }
  if (name == "escape" || name == "e") {
    if (v.is_markup()) return v;
    return Value(HtmlEscape(v.Str())).AsMarkup();
  }
  return absl::InvalidArgumentError(Cat("No filter named '", name, "'."));
}

absl::StatusOr<bool> ApplyTest(std::string_view name, const Value& v, const CallArgs& a) {
  const Value* other = a.Get(0, "other");
  auto need_other = [&]() -> absl::Status {
    if (other == nullptr) return absl::InvalidArgumentError(Cat("test '", name, "' takes one argument"));
    return absl::OkStatus();
  };
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "string") return v.is_string();
  if (name == "number") return v.is_number();
  if (name == "integer") return v.is_int();
  if (name == "float") return v.is_float();
  if (name == "boolean") return v.is_bool();
  if (name == "true") return v.is_bool() && v.as_bool();
  if (name == "false") return v.is_bool() && !v.as_bool();
  if (name == "mapping") return v.is_dict() && !v.as_dict().is_namespace;
  if (name == "iterable") return v.is_undefined() || v.is_string() || v.is_list() || (v.is_dict() && !v.as_dict().is_namespace);
  if (name == "sequence") return v.is_string() || v.is_list() || (v.is_dict() && !v.as_dict().is_namespace);
  if (name == "callable") return v.is_function();
  if (name == "lower") return v.is_string() && PyLower(v.as_string()) == v.as_string();
  if (name == "upper") return v.is_string() && PyUpper(v.as_string()) == v.as_string();
  if (name == "odd" || name == "even" || name == "divisibleby") {
    if (!v.is_int() && !v.is_bool()) return absl::InvalidArgumentError(Cat("test '", name, "' needs an integer"));
    const int64_t x = v.is_bool() ? int64_t{v.as_bool()} : v.as_int();
    if (name == "odd") return x % 2 != 0;
    if (name == "even") return x % 2 == 0;
    if (absl::Status s = need_other(); !s.ok()) return s;
    const int64_t d = other->is_int() ? other->as_int() : 0;
    if (d == 0) return absl::InvalidArgumentError("integer division or modulo by zero");
    return x % d == 0;
  }
  if (name == "equalto" || name == "eq" || name == "==" || name == "sameas") {
    if (absl::Status s = need_other(); !s.ok()) return s;
    if (name == "sameas" && v.kind() != other->kind()) return false;
    return v.Equals(*other);
  }
  if (name == "ne" || name == "!=") {
    if (absl::Status s = need_other(); !s.ok()) return s;
    return !v.Equals(*other);
  }
  if (name == "lt" || name == "lessthan" || name == "<" || name == "ge" || name == ">=") {
    if (absl::Status s = need_other(); !s.ok()) return s;
    absl::StatusOr<bool> lt = Less(v, *other);
    if (!lt.ok()) return lt;
    return (name == "lt" || name == "lessthan" || name == "<") ? *lt : !*lt;
  }
  if (name == "gt" || name == "greaterthan" || name == ">" || name == "le" || name == "<=") {
    if (absl::Status s = need_other(); !s.ok()) return s;
    absl::StatusOr<bool> gt = Less(*other, v);
    if (!gt.ok()) return gt;
    return (name == "gt" || name == "greaterthan" || name == ">") ? *gt : !*gt;
  }
  if (name == "in") {
    const Value* seq = a.Get(0, "seq");
    if (seq == nullptr) return absl::InvalidArgumentError("test 'in' takes one argument");
    return Contains(*seq, v);
  }
  if (name == "escaped") return false;
  return absl::InvalidArgumentError(Cat("No test named '", name, "'."));
}

}  // namespace tandem::engine::jinja
