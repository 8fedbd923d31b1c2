// The values a chat template computes with, shaped like the Python objects
// jinja2 sees under HF transformers: undefined, None, bool, int, float, str,
// list, dict (insertion-ordered, string keys) and callables (macros,
// builtins, bound methods). Lists and dicts are shared by pointer as Python
// shares them; a namespace() is a dict whose attributes a template may set.
// Thread-compatible: a value is built and read by one render.
#ifndef TANDEM_ENGINE_TOKENIZER_JINJA_VALUE_H_
#define TANDEM_ENGINE_TOKENIZER_JINJA_VALUE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

namespace tandem::engine::jinja {

// absl::StrCat for std::string_view pieces too (this Abseil's string_view is
// its own type).
inline void AppendPiece(std::string* out, std::string_view s) { out->append(s); }
template <typename T>
  requires std::is_arithmetic_v<T>
void AppendPiece(std::string* out, T v) {
  out->append(absl::StrCat(v));
}
template <typename... Args>
std::string Cat(const Args&... args) {
  std::string out;
  (AppendPiece(&out, args), ...);
  return out;
}

class Value;
using List = std::vector<Value>;

struct Dict {
  // Keys are strings, numbers, booleans or none, as Python hashes them.
  std::vector<std::pair<Value, Value>> items;
  bool is_namespace = false;  // namespace(): attribute assignment allowed

  const Value* Find(std::string_view key) const;
  const Value* FindKey(const Value& key) const;
  void Set(Value key, Value value);
};

// Arguments of a call: positional, then keyword, in source order.
struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;

  // The argument at `index` or named `name`; nullptr when absent.
  const Value* Get(size_t index, std::string_view name) const;
};

struct Function {
  std::string name;
  std::function<absl::StatusOr<Value>(const CallArgs&)> call;
};

struct Undefined {
  std::string name;  // what was looked up, for error messages
};

class Value {
 public:
  enum class Kind { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kFunction };

  Value() : v_(Undefined{}) {}
  static Value MakeUndefined(std::string name) { return Value(Undefined{std::move(name)}); }
  static Value None() { return Value(nullptr); }
  Value(bool b) : v_(b) {}
  Value(int64_t i) : v_(i) {}
  Value(int i) : v_(static_cast<int64_t>(i)) {}
  Value(double d) : v_(d) {}
  Value(std::string s) : v_(std::move(s)) {}
  Value(std::string_view s) : v_(std::string(s)) {}
  Value(const char* s) : v_(std::string(s)) {}
  Value(List l) : v_(std::make_shared<List>(std::move(l))) {}
  Value(Dict d) : v_(std::make_shared<Dict>(std::move(d))) {}
  Value(std::shared_ptr<List> l) : v_(std::move(l)) {}
  Value(std::shared_ptr<Dict> d) : v_(std::move(d)) {}
  Value(std::shared_ptr<Function> f) : v_(std::move(f)) {}

  Kind kind() const { return static_cast<Kind>(v_.index()); }
  bool is_undefined() const { return kind() == Kind::kUndefined; }
  bool is_none() const { return kind() == Kind::kNone; }
  bool is_bool() const { return kind() == Kind::kBool; }
  bool is_int() const { return kind() == Kind::kInt; }
  bool is_float() const { return kind() == Kind::kFloat; }
  bool is_number() const { return is_int() || is_float() || is_bool(); }
  bool is_string() const { return kind() == Kind::kString; }
  bool is_list() const { return kind() == Kind::kList; }
  bool is_dict() const { return kind() == Kind::kDict; }
  bool is_function() const { return kind() == Kind::kFunction; }

  bool as_bool() const { return std::get<bool>(v_); }
  int64_t as_int() const { return std::get<int64_t>(v_); }
  double as_float() const { return std::get<double>(v_); }
  // A number as a double (bool counts, as in Python).
  double as_double() const;
  const std::string& as_string() const { return std::get<std::string>(v_); }
  const List& as_list() const { return *std::get<std::shared_ptr<List>>(v_); }
  List& mutable_list() { return *std::get<std::shared_ptr<List>>(v_); }
  const Dict& as_dict() const { return *std::get<std::shared_ptr<Dict>>(v_); }
  Dict& mutable_dict() { return *std::get<std::shared_ptr<Dict>>(v_); }
  const Function& as_function() const { return *std::get<std::shared_ptr<Function>>(v_); }
  const std::string& undefined_name() const { return std::get<Undefined>(v_).name; }
  // A lazy sequence from map/select/...: always true, no len(), no JSON.
  bool is_generator() const { return generator_; }
  Value AsGenerator() && {
    generator_ = true;
    return std::move(*this);
  }
  // A string marked safe (jinja2's Markup, from `|safe`): `+` with a plain
  // string HTML-escapes the plain one.
  bool is_markup() const { return markup_; }
  // A list that Python holds as a tuple (dict items, `(a, b)`): printed
  // with parentheses.
  bool is_tuple() const { return tuple_; }
  Value AsTuple() && {
    tuple_ = true;
    return std::move(*this);
  }
  Value AsMarkup() && {
    markup_ = true;
    return std::move(*this);
  }

  // Python's bool(x).
  bool Truthy() const;
  // Python's str(x) (jinja2 prints undefined as "").
  std::string Str() const;
  // Python's repr(x).
  std::string Repr() const;
  // Python's ==.
  bool Equals(const Value& other) const;
  // A Python type name for error messages ("str", "dict", ...).
  std::string_view TypeName() const;

 private:
  explicit Value(Undefined u) : v_(std::move(u)) {}
  explicit Value(std::nullptr_t) : v_(nullptr) {}

  std::variant<Undefined, std::nullptr_t, bool, int64_t, double, std::string,
               std::shared_ptr<List>, std::shared_ptr<Dict>, std::shared_ptr<Function>>
      v_;
  bool generator_ = false;
  bool markup_ = false;
  bool tuple_ = false;
};

// jinja2's escape(): & < > " ' as HTML entities.
std::string HtmlEscape(std::string_view s);

// Python's repr of a float ("1.0", "1e+16", "0.0001", "1e-05", "inf").
std::string FloatRepr(double d);

// A builtin function value.
Value MakeFunction(std::string name, std::function<absl::StatusOr<Value>(const CallArgs&)> call);

}  // namespace tandem::engine::jinja

#endif  // TANDEM_ENGINE_TOKENIZER_JINJA_VALUE_H_
