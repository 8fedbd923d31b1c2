// Running a compiled grammar against a model's vocabulary: which tokens may
// come next (a bit mask over the vocabulary) and advancing by the token that
// was sampled.
//
// A matcher's state is the set of parse stacks that are still alive after
// the bytes generated so far (the grammar is matched top-down, one byte at a
// time, as llama.cpp's grammar sampler does). A stack is interned as (grammar
// position, parent stack), so stacks share their tails, equal stacks are
// equal ids, and a state is a short sorted list of ids. The mask for a state
// comes from one walk over the vocabulary's byte trie that drops a subtree
// as soon as no stack survives its prefix; its cost depends on the state, not
// on how long the output is. Masks are cached per state (the states that
// allow many tokens -- inside a string, a number -- recur), so most steps cost
// a lookup.
#ifndef TANDEM_ENGINE_CONSTRAIN_MATCHER_H_
#define TANDEM_ENGINE_CONSTRAIN_MATCHER_H_

#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "engine/constrain/grammar.h"
#include "engine/tokenizer/tokenizer.h"

namespace tandem::engine::constrain {

// The vocabulary as bytes, in a trie. Tokens with no bytes (control tokens)
// are never in a mask, except the end-of-generation ids where the grammar
// may end. Immutable; shared by every constraint of one model.
class TokenVocabulary {
 public:
  // `token_bytes[id]`: what the token adds to the output text.
  TokenVocabulary(const std::vector<std::string>& token_bytes, std::vector<int32_t> end_ids);
  // A model's: each token's TokenBytes, except control, unknown and unused
  // tokens (they add no text of their own); its end-of-generation ids.
  static std::shared_ptr<const TokenVocabulary> FromTokenizer(const Tokenizer& tokenizer);

  int32_t size() const { return n_vocab_; }
  const std::string& bytes(int32_t id) const { return bytes_[id]; }
  std::span<const int32_t> end_ids() const { return end_ids_; }

  // Trie nodes in preorder: a node's subtree is [i, skip).
  struct TrieNode {
    uint8_t byte = 0;
    int32_t depth = 0;  // 1 for a first byte
    int32_t skip = 0;
    int32_t token_begin = 0;  // tokens whose bytes end here: ids_[begin, end)
    int32_t token_end = 0;
  };
  const std::vector<TrieNode>& trie() const { return trie_; }
  std::span<const int32_t> TokensAt(const TrieNode& n) const {
    return std::span<const int32_t>(ids_).subspan(n.token_begin, n.token_end - n.token_begin);
  }
  int32_t max_depth() const { return max_depth_; }

 private:
  int32_t n_vocab_ = 0;
  std::vector<std::string> bytes_;
  std::vector<int32_t> end_ids_;
  std::vector<TrieNode> trie_;
  std::vector<int32_t> ids_;
  int32_t max_depth_ = 0;
};

struct MatcherLimits {
  // Live parse stacks in one state; an ambiguous grammar that needs more
  // fails the step (the sequence ends) rather than growing without bound.
  int32_t max_stacks = 4096;
  // Bytes of cached masks per compiled constraint; the cache is cleared
  // when it would grow past this.
  int64_t mask_cache_bytes = 64 << 20;
};

// A grammar bound to a vocabulary: the interned stacks and the mask cache,
// shared by every sequence that uses the same constraint. Thread-safe.
class CompiledGrammar {
 public:
  CompiledGrammar(Grammar grammar, std::shared_ptr<const TokenVocabulary> vocab,
                  MatcherLimits limits = {});

  const Grammar& grammar() const { return grammar_; }
  const TokenVocabulary& vocab() const { return *vocab_; }
  int32_t mask_words() const { return (vocab_->size() + 63) / 64; }

  // Counters for tests and benchmarks.
  int64_t mask_cache_hits() const;
  int64_t mask_cache_misses() const;

 private:
  friend class Matcher;
  static constexpr int32_t kNoParent = -1;

  struct State {
    std::vector<int32_t> stacks;  // sorted ids; each top is a kBytes element
    bool accepting = false;       // the bytes so far are a complete output
    friend bool operator==(const State&, const State&) = default;
  };

  struct Node {
    int32_t pos;
    int32_t parent;
  };

  // An interned state: what each byte leads to is computed once (the trie
  // walk of a mask then costs a table lookup per node), and which bytes any
  // of its stacks accepts.
  static constexpr int32_t kDead = -1;      // no stack survives
  static constexpr int32_t kOverflow = -2;  // more than max_stacks
  static constexpr int32_t kUnknown = -3;
  struct Interned {
    State state;
    ByteSet firsts;
    std::unique_ptr<std::array<int32_t, 256>> next;
  };
  static constexpr size_t kMaxInternedStates = 1 << 16;

  // Callers hold mu_.
  int32_t InternState(const State& s);
  int32_t Next(int32_t state, uint8_t byte);
  int32_t Intern(int32_t pos, int32_t parent);
  bool Expand(int32_t pos, int32_t parent, State& out);
  // False when the state outgrows max_stacks.
  bool Advance(const State& in, uint8_t byte, State& out);
  void Finish(State& s) const;
  bool ComputeMask(const State& state, std::vector<uint64_t>& mask);
  std::string Key(const State& s) const;

  const Grammar grammar_;
  const std::shared_ptr<const TokenVocabulary> vocab_;
  const MatcherLimits limits_;

  mutable std::mutex mu_;
  std::vector<Node> nodes_;
  absl::flat_hash_map<uint64_t, int32_t> node_index_;
  absl::flat_hash_map<std::string, std::shared_ptr<const std::vector<uint64_t>>> masks_;
  int64_t mask_bytes_ = 0;
  int64_t hits_ = 0;
  int64_t misses_ = 0;
  std::vector<Node> work_;  // Expand's worklist
  std::vector<Interned> states_;
  absl::flat_hash_map<std::string, int32_t> state_index_;
  std::vector<int32_t> path_;  // the walk's state per trie depth
};

// One sequence's place in the grammar. Thread-compatible; the compiled
// grammar it points at may be shared.
class Matcher {
 public:
  explicit Matcher(std::shared_ptr<CompiledGrammar> grammar);

  // Sets bit `id` of `mask` (mask_words() words) for every token that can
  // continue a valid output, and for the end ids where the output may end.
  // Every token is refused once the output is complete with nothing that
  // could follow (IsTerminated), and the end ids are then allowed.
  // False when the state outgrew MatcherLimits::max_stacks.
  bool FillMask(std::span<uint64_t> mask);

  // Advances by a token; false (state unchanged) when its bytes cannot
  // continue a valid output. An end id is accepted where the output may end.
  bool AcceptToken(int32_t id);
  // Advances by raw bytes; false (state unchanged) when they cannot.
  bool AcceptBytes(std::string_view bytes);

  // The output so far is complete (it may still go on).
  bool CanEnd() const { return state_.accepting; }
  // Complete, and no byte can follow.
  bool IsTerminated() const { return state_.accepting && state_.stacks.empty(); }

  const CompiledGrammar& grammar() const { return *grammar_; }

 private:
  std::shared_ptr<CompiledGrammar> grammar_;
  CompiledGrammar::State state_;
};

}  // namespace tandem::engine::constrain

#endif  // TANDEM_ENGINE_CONSTRAIN_MATCHER_H_
