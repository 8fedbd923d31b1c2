// The filters, tests, attribute lookups and methods templates call, as
// jinja2 and Python define them. Internal to the renderer: errors are plain
// messages that the renderer prefixes with the position. Stateless.
#ifndef TANDEM_ENGINE_TOKENIZER_JINJA_BUILTINS_H_
#define TANDEM_ENGINE_TOKENIZER_JINJA_BUILTINS_H_

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/tokenizer/jinja/value.h"

namespace tandem::engine::jinja {

// `subject | name(args)`.
absl::StatusOr<Value> ApplyFilter(std::string_view name, const Value& subject, const CallArgs& args);
// `subject is name(args)`.
absl::StatusOr<bool> ApplyTest(std::string_view name, const Value& subject, const CallArgs& args);
// `obj.name`: a dict's entry or method, a string's or list's method; an
// error on undefined, undefined when absent.
absl::StatusOr<Value> GetAttr(const Value& obj, std::string_view name);
// `obj[key]`, with negative list indexes.
absl::StatusOr<Value> GetItem(const Value& obj, const Value& key);
// `obj[start:stop:step]` of a list or string.
absl::StatusOr<Value> Slice(const Value& obj, const Value& start, const Value& stop, const Value& step);
// The items a for loop or filter visits: list items, dict keys, a string's
// characters; none for undefined. An error for what Python cannot iterate.
absl::StatusOr<List> Iterate(const Value& v);
// Python's < for numbers, strings and lists.
absl::StatusOr<bool> Less(const Value& a, const Value& b);
// `a op b` for + - * / // % ** ~, Python's way. A string built may not pass
// `max_string_bytes`; `charge` is told the size of what is built.
absl::StatusOr<Value> BinaryOp(std::string_view op, const Value& a, const Value& b, int64_t max_string_bytes,
                               const std::function<absl::Status(int64_t)>& charge);
// `a op b` for == != < > <= >= in, not in.
absl::StatusOr<bool> CompareOp(std::string_view op, const Value& a, const Value& b);
// Python's `a in b`.
absl::StatusOr<bool> Contains(const Value& container, const Value& item);

// UTF-8 helpers: the characters of `s`, each as its own string.
std::vector<std::string> Utf8Chars(std::string_view s);
// Python's str.isspace() for ASCII and Latin-1 spaces.
bool IsPySpace(char c);
std::string PyStrip(std::string_view s, std::string_view chars, bool left, bool right, bool whitespace);
std::string PyUpper(std::string_view s);
std::string PyLower(std::string_view s);

}  // namespace tandem::engine::jinja

#endif  // TANDEM_ENGINE_TOKENIZER_JINJA_BUILTINS_H_
