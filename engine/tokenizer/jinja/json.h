// JSON in and out of template values: parsing the request's `tools` and
// test contexts, and the `tojson` filter, which prints as HF transformers'
// does (Python's json.dumps with ensure_ascii=False). Stateless.
#ifndef TANDEM_ENGINE_TOKENIZER_JINJA_JSON_H_
#define TANDEM_ENGINE_TOKENIZER_JINJA_JSON_H_

#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "engine/tokenizer/jinja/value.h"

namespace tandem::engine::jinja {

struct JsonFormat {
  std::optional<std::string> indent;  // json.dumps(indent=...): none is one line
  bool sort_keys = false;
  bool ensure_ascii = false;       // non-ASCII as \uXXXX escapes
  std::string item_separator;      // empty: ", " (",", with an indent)
  std::string key_separator = ": ";
};

// json.dumps(value, ensure_ascii=False, ...). InvalidArgument for a value
// JSON cannot hold (undefined, a function).
absl::StatusOr<std::string> ToJson(const Value& value, const JsonFormat& format = {});

// A JSON document as a value (numbers with a fraction or exponent are
// floats). InvalidArgument with the byte offset on malformed input.
absl::StatusOr<Value> ParseJson(std::string_view text);

}  // namespace tandem::engine::jinja

#endif  // TANDEM_ENGINE_TOKENIZER_JINJA_JSON_H_
