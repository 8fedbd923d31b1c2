// The binary operators and comparisons, with Python's semantics for the
// values templates use.
#include <cmath>

#include "engine/tokenizer/jinja/builtins.h"

namespace tandem::engine::jinja {

absl::StatusOr<bool> CompareOp(std::string_view op, const Value& a, const Value& b) {
  if (op == "==") return a.Equals(b);
  if (op == "!=") return !a.Equals(b);
  if (op == "in") return Contains(b, a);
  if (op == "not in") {
    absl::StatusOr<bool> r = Contains(b, a);
    if (!r.ok()) return r;
    return !*r;
  }
  if (op == "<") return Less(a, b);
  if (op == ">") return Less(b, a);
  if (op == "<=") {
    absl::StatusOr<bool> r = Less(b, a);
    if (!r.ok()) return r;
    return !*r;
  }
  absl::StatusOr<bool> r = Less(a, b);  // >=
  if (!r.ok()) return r;
  return !*r;
}

absl::StatusOr<Value> BinaryOp(std::string_view op, const Value& a, const Value& b, int64_t max_string_bytes,
                               const std::function<absl::Status(int64_t)>& charge) {
  if (op == "~") {
    std::string s = a.Str() + b.Str();
    if (absl::Status c = charge(static_cast<int64_t>(s.size()) / 64); !c.ok()) return c;
    return Value(std::move(s));
  }
  for (const Value* v : {&a, &b}) {
    if (v->is_undefined()) return absl::InvalidArgumentError(Cat("'", v->undefined_name(), "' is undefined"));
  }
  const auto type_error = [&]() {
    return absl::InvalidArgumentError(Cat("unsupported operand type(s) for ", op, ": '", a.TypeName(),
                                                   "' and '", b.TypeName(), "'"));
  };
  if (op == "+") {
    if (a.is_string() && b.is_string()) {
      const int64_t size = static_cast<int64_t>(a.as_string().size() + b.as_string().size());
      if (size > max_string_bytes) return absl::ResourceExhaustedError("string too long");
      if (absl::Status c = charge(size / 64); !c.ok()) return c;
      if (a.is_markup() || b.is_markup()) {
        const std::string x = a.is_markup() ? a.as_string() : HtmlEscape(a.as_string());
        const std::string y = b.is_markup() ? b.as_string() : HtmlEscape(b.as_string());
        return Value(x + y).AsMarkup();
      }
      return Value(a.as_string() + b.as_string());
    }
    if (a.is_list() && b.is_list()) {
      if (absl::Status c = charge(static_cast<int64_t>(a.as_list().size() + b.as_list().size())); !c.ok()) return c;
      List l = a.as_list();
      l.insert(l.end(), b.as_list().begin(), b.as_list().end());
      return Value(std::move(l));
    }
  }
  if (op == "*" && ((a.is_string() && b.is_int()) || (a.is_int() && b.is_string()))) {
    const std::string& s = a.is_string() ? a.as_string() : b.as_string();
    const int64_t n = a.is_int() ? a.as_int() : b.as_int();
    if (n > 0 && static_cast<int64_t>(s.size()) * n > max_string_bytes) {
      return absl::ResourceExhaustedError("string too long");
    }
    if (n > 0) {
      if (absl::Status c = charge(static_cast<int64_t>(s.size()) * n / 64); !c.ok()) return c;
    }
    std::string out;
    for (int64_t i = 0; i < n; ++i) out += s;
    return Value(std::move(out));
  }
  if (!a.is_number() || !b.is_number()) return type_error();
  const bool ints = !a.is_float() && !b.is_float();
  auto I = [](const Value& v) { return v.is_bool() ? static_cast<int64_t>(v.as_bool()) : v.as_int(); };
  if (op == "/") {
    if (b.as_double() == 0) return absl::InvalidArgumentError("division by zero");
    return Value(a.as_double() / b.as_double());
  }
  if (ints) {
    const int64_t x = I(a), y = I(b);
    if (op == "+") return Value(x + y);
    if (op == "-") return Value(x - y);
    if (op == "*") return Value(x * y);
    if (op == "//" || op == "%") {
      if (y == 0) return absl::InvalidArgumentError("integer division or modulo by zero");
      int64_t q = x / y, r = x % y;
      if (r != 0 && ((r < 0) != (y < 0))) {
        q -= 1;
        r += y;
      }
      return Value(op == "//" ? q : r);
    }
    if (op == "**") {
      if (y < 0) return Value(std::pow(static_cast<double>(x), static_cast<double>(y)));
      int64_t r = 1;
      for (int64_t i = 0; i < y && i < 64; ++i) r *= x;
      return Value(r);
    }
  } else {
    const double x = a.as_double(), y = b.as_double();
    if (op == "+") return Value(x + y);
    if (op == "-") return Value(x - y);
    if (op == "*") return Value(x * y);
    if (op == "//" || op == "%") {
      if (y == 0) return absl::InvalidArgumentError("float divmod()");
      const double q = std::floor(x / y);
      return Value(op == "//" ? q : x - q * y);
    }
    if (op == "**") return Value(std::pow(x, y));
  }
  return type_error();
}

}  // namespace tandem::engine::jinja
