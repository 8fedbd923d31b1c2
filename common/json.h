// Minimal JSON output helpers for command-line tools and benchmarks (one
// JSON object per line). Pure functions; thread-safe.
#ifndef TANDEM_COMMON_JSON_H_
#define TANDEM_COMMON_JSON_H_

#include <string>
#include <string_view>

namespace tandem {

// Replaces every byte sequence that is not valid UTF-8 with U+FFFD.
std::string SanitizeUtf8(std::string_view bytes);

// A quoted JSON string literal of `text` (sanitized to valid UTF-8 first).
std::string JsonQuote(std::string_view text);

// A JSON number; non-finite values become null (JSON has no inf/nan).
std::string JsonNumber(double value);

}  // namespace tandem

#endif  // TANDEM_COMMON_JSON_H_
