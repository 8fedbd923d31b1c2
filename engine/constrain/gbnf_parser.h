// GBNF text to its parsed form: the rules of a grammar as written, before
// grammar.cc lowers them to bytes (the syntax is grammar.h's). Also the one
// writer of GBNF literals the JSON Schema and regex converters use.
// Stateless.
#ifndef TANDEM_ENGINE_CONSTRAIN_GBNF_PARSER_H_
#define TANDEM_ENGINE_CONSTRAIN_GBNF_PARSER_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/constrain/grammar.h"

namespace tandem::engine::constrain::gbnf {

using Ranges = std::vector<std::pair<uint32_t, uint32_t>>;

// Node::max of a repetition with no upper bound.
inline constexpr int32_t kUnbounded = -1;

// The parsed form of a rule body, before lowering to bytes.
struct Node {
  enum class Kind { kAlt, kSeq, kLiteral, kClass, kRef, kRepeat };
  Kind kind = Kind::kSeq;
  std::vector<Node> children = {};  // kAlt: sequences; kSeq: items; kRepeat: one
  std::string bytes = {};           // kLiteral
  Ranges ranges = {};               // kClass: normalized code points
  std::string name = {};            // kRef
  int32_t min = 0;             // kRepeat
  int32_t max = 0;             // kRepeat; kUnbounded for no bound
  int32_t line = 0;
  int32_t column = 0;
};

struct ParsedRule {
  std::string name;
  Node body;  // kAlt
  int32_t line = 0;
  int32_t column = 0;
};

// The grammar's rules in source order. InvalidArgument with "line:column"
// of the offending text; nesting and repetition bounds from `limits`.
absl::StatusOr<std::vector<ParsedRule>> Parse(std::string_view text,
                                              const CompileLimits& limits);

}  // namespace tandem::engine::constrain::gbnf

#endif  // TANDEM_ENGINE_CONSTRAIN_GBNF_PARSER_H_
