#include "engine/constrain/constraint.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "engine/constrain/json_schema.h"
#include "engine/constrain/regex.h"

namespace tandem::engine::constrain {

std::vector<common::FlagSpec> CompileLimitFlagSpecs() {
  const CompileLimits d;
  return {
      {.name = "response-format-max-elements", .default_value = absl::StrCat(d.max_elements),
       .help = "elements (bytes, rule references) a response format's grammar may lower to; "
               "bounds compile time and memory"},
      {.name = "response-format-max-depth", .default_value = absl::StrCat(d.max_depth),
       .help = "nesting of a response format's schemas, regex groups or grammar parentheses"},
      {.name = "response-format-max-repeat", .default_value = absl::StrCat(d.max_repeat),
       .help = "largest bound of a counted repetition in a response format ({m,n}, "
               "minItems, maxLength)"},
  };
}

absl::StatusOr<CompileLimits> CompileLimitsFromArgs(const common::Args& args) {
  CompileLimits limits;
  ASSIGN_OR_RETURN(const int32_t elements,
                   args.IntInRange("response-format-max-elements", 1024, 1 << 28));
  limits.max_elements = elements;
  ASSIGN_OR_RETURN(limits.max_depth, args.IntInRange("response-format-max-depth", 1, 4096));
  ASSIGN_OR_RETURN(limits.max_repeat, args.IntInRange("response-format-max-repeat", 1, 1 << 20));
  // The text a schema or regex expands to is bounded with the elements.
  limits.max_text_bytes = int64_t{elements} * 4;
  return limits;
}

absl::StatusOr<std::string> ConstraintToGbnf(const OutputConstraint& constraint,
                                             const CompileLimits& limits) {
  using Kind = OutputConstraint::Kind;
  switch (constraint.kind) {
    case Kind::kNone:
      return absl::InvalidArgumentError("no constraint to compile");
    case Kind::kJsonObject:
      return JsonObjectGbnf();
    case Kind::kJsonSchema:
      return JsonSchemaToGbnf(constraint.source, limits);
    case Kind::kRegex: {
      ASSIGN_OR_RETURN(std::string expr,
                       RegexToGbnf(constraint.source, RegexTarget::kText, limits));
      return absl::StrCat("root ::= ", expr, "\n");
    }
    case Kind::kGrammar:
      return constraint.source;
  }
  return absl::InvalidArgumentError("unknown constraint kind");
}

absl::StatusOr<Grammar> CompileConstraint(const OutputConstraint& constraint,
                                          const CompileLimits& limits) {
  ASSIGN_OR_RETURN(std::string gbnf, ConstraintToGbnf(constraint, limits));
  absl::StatusOr<Grammar> grammar = Grammar::Parse(gbnf, limits);
  if (!grammar.ok() && constraint.kind != OutputConstraint::Kind::kGrammar) {
    // The text was generated here; say what it came from.
    return absl::InvalidArgumentError(
        absl::StrCat(OutputConstraintKindName(constraint.kind), ": ", grammar.status().message()));
  }
  return grammar;
}

GrammarCache::GrammarCache(std::shared_ptr<const TokenVocabulary> vocab, CompileLimits compile,
                           MatcherLimits matcher, int32_t capacity)
    : vocab_(std::move(vocab)), compile_(compile), matcher_(matcher), capacity_(capacity) {}

absl::StatusOr<std::shared_ptr<CompiledGrammar>> GrammarCache::Get(
    const OutputConstraint& constraint) {
  Key key{constraint.kind, constraint.source};
  {
    std::lock_guard lock(mu_);
    if (auto it = index_.find(key); it != index_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second);
      return it->second->second;
    }
  }
  ASSIGN_OR_RETURN(Grammar grammar, CompileConstraint(constraint, compile_));
  auto compiled = std::make_shared<CompiledGrammar>(std::move(grammar), vocab_, matcher_);
  std::lock_guard lock(mu_);
  if (auto it = index_.find(key); it != index_.end()) return it->second->second;
  lru_.emplace_front(key, compiled);
  index_[key] = lru_.begin();
  while (static_cast<int32_t>(lru_.size()) > capacity_) {
    index_.erase(lru_.back().first);
    lru_.pop_back();
  }
  return compiled;
}

}  // namespace tandem::engine::constrain
