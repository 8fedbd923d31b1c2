// Regular expressions written as GBNF, so that a `regex` response format and
// a JSON Schema string `pattern` compile to the same grammar machinery.
//
// The syntax is the common core of ECMAScript and Python regexes: literals
// and escapes (\n \t \r \f \v \0 \xHH \uHHHH \u{H..}), `.` (any character
// but newline), classes with ranges and negation, \d \D \w \W \s \S (ASCII
// meanings, as ECMAScript's), groups ( ), (?: ), (?<name> ), (?P<name> ),
// alternation, and the quantifiers * + ? {m} {m,} {m,n} (a lazy `?` suffix
// is accepted and means nothing here: every match is allowed). `^` at the
// start and `$` at the end are accepted; the whole output matches the
// expression either way. Backreferences, lookaround and anchors elsewhere
// are refused by name.
#ifndef TANDEM_ENGINE_CONSTRAIN_REGEX_H_
#define TANDEM_ENGINE_CONSTRAIN_REGEX_H_

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "engine/constrain/grammar.h"

namespace tandem::engine::constrain {

enum class RegexTarget {
  kText,        // the characters themselves
  kJsonString,  // the inside of a JSON string: '"', '\' and controls escaped
};

// One GBNF expression (no rules) matching exactly the strings the regex
// matches, written for `target`. InvalidArgument with "at offset N".
absl::StatusOr<std::string> RegexToGbnf(std::string_view regex, RegexTarget target,
                                        const CompileLimits& limits = {});

}  // namespace tandem::engine::constrain

#endif  // TANDEM_ENGINE_CONSTRAIN_REGEX_H_
