// Parses a template's tokens into statements (jinja2's grammar: the
// statements and expression forms model chat templates use). Called by
// Template::Parse. Stateless.
#ifndef TANDEM_ENGINE_TOKENIZER_JINJA_PARSER_H_
#define TANDEM_ENGINE_TOKENIZER_JINJA_PARSER_H_

#include <string_view>

#include "absl/status/statusor.h"
#include "engine/tokenizer/jinja/ast.h"

namespace tandem::engine::jinja {

// InvalidArgument "line:column: ..." naming what was expected.
absl::StatusOr<Body> Parse(std::string_view source);

}  // namespace tandem::engine::jinja

#endif  // TANDEM_ENGINE_TOKENIZER_JINJA_PARSER_H_
