// Splits a Jinja template into text and tag tokens the way jinja2's lexer
// does under HF transformers' settings (trim_blocks and lstrip_blocks on,
// `-`/`+` whitespace control, one trailing newline dropped, line endings
// normalised to "\n"). Called by the parser only. Stateless.
#ifndef TANDEM_ENGINE_TOKENIZER_JINJA_LEXER_H_
#define TANDEM_ENGINE_TOKENIZER_JINJA_LEXER_H_

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace tandem::engine::jinja {

// 1-based position in the template source, for error messages.
struct Pos {
  int line = 1;
  int column = 1;
};

struct Token {
  enum class Kind {
    kText,        // literal output; `text` holds it
    kVarBegin,    // {{
    kVarEnd,      // }}
    kBlockBegin,  // {%
    kBlockEnd,    // %}
    kName,        // identifier or keyword
    kString,      // `text` holds the unescaped value
    kInt,
    kFloat,
    kOp,          // `text` holds the operator ("==", "(", "|", ...)
    kEof,
  };
  Kind kind;
  std::string text;
  Pos pos;
};

// InvalidArgument "line:column: ..." for an unterminated tag, comment or
// string, or a character no token starts with.
absl::StatusOr<std::vector<Token>> Lex(std::string_view source);

}  // namespace tandem::engine::jinja

#endif  // TANDEM_ENGINE_TOKENIZER_JINJA_LEXER_H_
