// JSON Schema written as GBNF: the output is one JSON value the schema
// accepts, with no whitespace before it or after it (so the output ends as
// soon as the value closes) and at most 16 whitespace characters between
// tokens. docs/structured_output.md lists the supported keywords; the main
// decisions, which follow what XGrammar (vLLM's default) and llama.cpp do:
//
// - Properties come in the order the schema lists them; required ones always,
//   the others optionally. Without `additionalProperties` (or with false) no
//   other property is allowed when `properties` is given; with true or a
//   schema, extra properties may follow the listed ones.
// - `oneOf` is treated as `anyOf` (exclusivity is not enforced).
// - Numbers have at most 16 integer and 16 fraction digits, so a sampled
//   number always ends.
// - Annotations (title, description, default, examples, $schema, $id,
//   $comment, deprecated, readOnly, writeOnly) are ignored; any other keyword
//   not supported is refused by name and path, never silently dropped.
#ifndef TANDEM_ENGINE_CONSTRAIN_JSON_SCHEMA_H_
#define TANDEM_ENGINE_CONSTRAIN_JSON_SCHEMA_H_

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "engine/constrain/grammar.h"

namespace tandem::engine::constrain {

// GBNF (start rule `root`) for the schema, given as JSON text.
// InvalidArgument naming the JSON pointer of the offending part ("at
// /properties/age: minimum is not supported").
absl::StatusOr<std::string> JsonSchemaToGbnf(std::string_view schema,
                                             const CompileLimits& limits = {});

// GBNF for any JSON object (response_format json_object).
std::string JsonObjectGbnf();

}  // namespace tandem::engine::constrain

#endif  // TANDEM_ENGINE_CONSTRAIN_JSON_SCHEMA_H_
