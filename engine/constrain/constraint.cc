#include "engine/constrain/constraint.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "engine/constrain/json_schema.h"
#include "engine/constrain/regex.h"

namespace tandem::engine::constrain {

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
