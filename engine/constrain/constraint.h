// An OutputConstraint (engine/sample/sampling_params.h) compiled to a
// grammar, and the per-process cache of compiled grammars the engine keeps,
// so that every sequence of one response format (the `n` choices, repeated
// requests) shares one grammar and one mask cache.
#ifndef TANDEM_ENGINE_CONSTRAIN_CONSTRAINT_H_
#define TANDEM_ENGINE_CONSTRAIN_CONSTRAINT_H_

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "common/flags.h"
#include "engine/constrain/grammar.h"
#include "engine/constrain/matcher.h"
#include "engine/sample/sampling_params.h"

namespace tandem::engine::constrain {

// --response-format-max-elements, --response-format-max-depth and
// --response-format-max-repeat: the bounds on compiling a response format.
// The gateway (which refuses a bad format before routing) and the workers
// (which compile it again) take the same flags with the same defaults.
std::vector<common::FlagSpec> CompileLimitFlagSpecs();
absl::StatusOr<CompileLimits> CompileLimitsFromArgs(const common::Args& args);

// The constraint as GBNF text. InvalidArgument naming the position (a JSON
// pointer, a regex offset, or a grammar line:column).
absl::StatusOr<std::string> ConstraintToGbnf(const OutputConstraint& constraint,
                                             const CompileLimits& limits = {});

// Parsed and checked (a grammar that matches nothing is refused).
absl::StatusOr<Grammar> CompileConstraint(const OutputConstraint& constraint,
                                          const CompileLimits& limits = {});

// Compiled grammars for one vocabulary, the most recently used kept.
// Thread-safe.
class GrammarCache {
 public:
  GrammarCache(std::shared_ptr<const TokenVocabulary> vocab, CompileLimits compile,
               MatcherLimits matcher, int32_t capacity);

  absl::StatusOr<std::shared_ptr<CompiledGrammar>> Get(const OutputConstraint& constraint);

  const TokenVocabulary& vocab() const { return *vocab_; }

 private:
  using Key = std::pair<OutputConstraint::Kind, std::string>;
  const std::shared_ptr<const TokenVocabulary> vocab_;
  const CompileLimits compile_;
  const MatcherLimits matcher_;
  const int32_t capacity_;
  std::mutex mu_;
  std::list<std::pair<Key, std::shared_ptr<CompiledGrammar>>> lru_;  // most recent first
  absl::flat_hash_map<Key, decltype(lru_)::iterator> index_;
};

}  // namespace tandem::engine::constrain

#endif  // TANDEM_ENGINE_CONSTRAIN_CONSTRAINT_H_
