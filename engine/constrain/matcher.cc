#include "engine/constrain/matcher.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <utility>

#include "common/check.h"

namespace tandem::engine::constrain {

TokenVocabulary::TokenVocabulary(const std::vector<std::string>& token_bytes,
                                 std::vector<int32_t> end_ids)
    : n_vocab_(static_cast<int32_t>(token_bytes.size())),
      bytes_(token_bytes),
      end_ids_(std::move(end_ids)) {
  // Sorting the ids by their bytes lays the trie out in preorder: a node is
  // a distinct prefix, first reached by the smallest token that has it.
  std::vector<int32_t> order;
  order.reserve(bytes_.size());
  for (int32_t id = 0; id < n_vocab_; ++id) {
    if (!bytes_[id].empty()) order.push_back(id);
  }
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return bytes_[a] != bytes_[b] ? bytes_[a] < bytes_[b] : a < b;
  });
  ids_.reserve(order.size());
  // path[d] is the trie node of the current token's first d + 1 bytes.
  std::vector<int32_t> path;
  std::string_view prev;
  for (int32_t id : order) {
    const std::string_view b = bytes_[id];
    size_t common = 0;
    while (common < prev.size() && common < b.size() && prev[common] == b[common]) ++common;
    // Nodes deeper than the common prefix are closed.
    while (path.size() > common) {
      trie_[path.back()].skip = static_cast<int32_t>(trie_.size());
      path.pop_back();
    }
    for (size_t d = common; d < b.size(); ++d) {
      const auto pos = static_cast<int32_t>(ids_.size());
      trie_.push_back({.byte = static_cast<uint8_t>(b[d]),
                       .depth = static_cast<int32_t>(d) + 1,
                       .skip = 0,
                       .token_begin = pos,
                       .token_end = pos});
      path.push_back(static_cast<int32_t>(trie_.size()) - 1);
    }
    // Tokens are appended in trie order, so each node's run is contiguous.
    TrieNode& node = trie_[path.back()];
    if (node.token_end != static_cast<int32_t>(ids_.size())) {
      node.token_begin = static_cast<int32_t>(ids_.size());
    }
    ids_.push_back(id);
    node.token_end = static_cast<int32_t>(ids_.size());
    max_depth_ = std::max(max_depth_, static_cast<int32_t>(b.size()));
    prev = b;
  }
  while (!path.empty()) {
    trie_[path.back()].skip = static_cast<int32_t>(trie_.size());
    path.pop_back();
  }
}

std::shared_ptr<const TokenVocabulary> TokenVocabulary::FromTokenizer(const Tokenizer& tok) {
  std::vector<std::string> bytes(static_cast<size_t>(tok.n_vocab()));
  for (int32_t id = 0; id < tok.n_vocab(); ++id) {
    const TokenType type = tok.token_type(id);
    if (type != TokenType::kControl && type != TokenType::kUnknown && type != TokenType::kUnused) {
      bytes[id] = tok.TokenBytes(id);
    }
  }
  return std::make_shared<TokenVocabulary>(
      bytes, std::vector<int32_t>(tok.eog_ids().begin(), tok.eog_ids().end()));
}

CompiledGrammar::CompiledGrammar(Grammar grammar, std::shared_ptr<const TokenVocabulary> vocab,
                                 MatcherLimits limits)
    : grammar_(std::move(grammar)), vocab_(std::move(vocab)), limits_(limits) {
  path_.resize(static_cast<size_t>(vocab_->max_depth()) + 1);
}

int64_t CompiledGrammar::mask_cache_hits() const {
  std::lock_guard lock(mu_);
  return hits_;
}

int64_t CompiledGrammar::mask_cache_misses() const {
  std::lock_guard lock(mu_);
  return misses_;
}

int32_t CompiledGrammar::Intern(int32_t pos, int32_t parent) {
  const uint64_t key = (static_cast<uint64_t>(static_cast<uint32_t>(pos)) << 32) |
                       static_cast<uint32_t>(parent);
  auto [it, inserted] = node_index_.try_emplace(key, static_cast<int32_t>(nodes_.size()));
  if (inserted) nodes_.push_back({pos, parent});
  return it->second;
}

// Brings the stack (pos, parent) to byte elements: a rule reference opens
// each alternative with the reference's continuation below it (none when
// the reference ends its alternative, so right recursion does not deepen
// the stack); the end of an alternative returns to the parent. A worklist,
// not recursion, so a long chain of rules cannot exhaust the thread's stack;
// false when an ambiguous grammar makes it grow past its bound.
bool CompiledGrammar::Expand(int32_t pos, int32_t parent, State& out) {
  const std::vector<Element>& elements = grammar_.elements();
  work_.clear();
  work_.push_back({pos, parent});
  int64_t budget = int64_t{limits_.max_stacks} * 16;
  while (!work_.empty()) {
    if (--budget < 0) return false;
    auto [p, par] = work_.back();
    work_.pop_back();
    while (true) {
      const Element& e = elements[p];
      if (e.kind == Element::Kind::kBytes) {
        out.stacks.push_back(Intern(p, par));
        break;
      }
      if (e.kind == Element::Kind::kEnd) {
        if (par == kNoParent) {
          out.accepting = true;
          break;
        }
        const Node up = nodes_[par];
        p = up.pos;
        par = up.parent;
        continue;
      }
      const int32_t cont =
          elements[p + 1].kind == Element::Kind::kEnd ? par : Intern(p + 1, par);
      for (int32_t start : grammar_.alternatives(e.value)) work_.push_back({start, cont});
      break;
    }
  }
  return true;
}

void CompiledGrammar::Finish(State& s) const {
  std::sort(s.stacks.begin(), s.stacks.end());
  s.stacks.erase(std::unique(s.stacks.begin(), s.stacks.end()), s.stacks.end());
}

bool CompiledGrammar::Advance(const State& in, uint8_t byte, State& out) {
  out.stacks.clear();
  out.accepting = false;
  for (int32_t id : in.stacks) {
    const Node n = nodes_[id];
    if (grammar_.BytesAt(n.pos).Has(byte) && !Expand(n.pos + 1, n.parent, out)) return false;
  }
  Finish(out);
  return static_cast<int32_t>(out.stacks.size()) <= limits_.max_stacks;
}

std::string CompiledGrammar::Key(const State& s) const {
  std::string key(s.stacks.size() * sizeof(int32_t) + 1, '\0');
  if (!s.stacks.empty()) {
    std::memcpy(key.data(), s.stacks.data(), s.stacks.size() * sizeof(int32_t));
  }
  key.back() = s.accepting ? 1 : 0;
  return key;
}

int32_t CompiledGrammar::InternState(const State& s) {
  std::string key = Key(s);
  if (auto it = state_index_.find(key); it != state_index_.end()) return it->second;
  if (states_.size() >= kMaxInternedStates) {
    // Only a cache: matchers keep their states by value.
    states_.clear();
    state_index_.clear();
  }
  Interned interned{.state = s, .firsts = {}, .next = nullptr};
  for (int32_t id : s.stacks) interned.firsts |= grammar_.BytesAt(nodes_[id].pos);
  const auto index = static_cast<int32_t>(states_.size());
  states_.push_back(std::move(interned));
  state_index_.emplace(std::move(key), index);
  return index;
}

int32_t CompiledGrammar::Next(int32_t state, uint8_t byte) {
  if (!states_[state].firsts.Has(byte)) return kDead;
  if (states_[state].next == nullptr) {
    states_[state].next = std::make_unique<std::array<int32_t, 256>>();
    states_[state].next->fill(kUnknown);
  }
  int32_t next = (*states_[state].next)[byte];
  if (next != kUnknown) return next;
  State out;
  if (!Advance(states_[state].state, byte, out)) {
    next = kOverflow;
  } else if (out.stacks.empty() && !out.accepting) {
    next = kDead;
  } else {
    const size_t before = states_.size();
    next = InternState(out);
    // Interning may have cleared the table (and `state` with it).
    if (states_.size() < before || state >= static_cast<int32_t>(states_.size())) return next;
  }
  (*states_[state].next)[byte] = next;
  return next;
}

// One preorder walk of the trie: path_[d] is the state after a node's first
// d bytes; a subtree is skipped as soon as no stack survives its prefix.
bool CompiledGrammar::ComputeMask(const State& state, std::vector<uint64_t>& mask) {
  mask.assign(static_cast<size_t>(mask_words()), 0);
  const TokenVocabulary& vocab = *vocab_;
  const std::vector<TokenVocabulary::TrieNode>& trie = vocab.trie();
  if (states_.size() + trie.size() > kMaxInternedStates) {
    // A walk may intern a state per node; start it with room to spare.
    states_.clear();
    state_index_.clear();
  }
  path_[0] = InternState(state);
  const auto n = static_cast<int32_t>(trie.size());
  for (int32_t i = 0; i < n;) {
    const TokenVocabulary::TrieNode& node = trie[i];
    const int32_t next = Next(path_[node.depth - 1], node.byte);
    if (next == kOverflow) return false;
    if (next == kDead) {
      i = node.skip;
      continue;
    }
    for (int32_t id : vocab.TokensAt(node)) mask[id >> 6] |= uint64_t{1} << (id & 63);
    if (states_[next].state.stacks.empty()) {
      i = node.skip;
      continue;
    }
    path_[node.depth] = next;
    ++i;
  }
  if (state.accepting) {
    for (int32_t id : vocab.end_ids()) mask[id >> 6] |= uint64_t{1} << (id & 63);
  }
  return true;
}

Matcher::Matcher(std::shared_ptr<CompiledGrammar> grammar) : grammar_(std::move(grammar)) {
  std::lock_guard lock(grammar_->mu_);
  const Grammar& g = grammar_->grammar();
  for (int32_t start : g.alternatives(g.root())) {
    // An overflow here leaves a partial state; FillMask then finds it short
    // of tokens at worst, never wrong about one it allows.
    (void)grammar_->Expand(start, CompiledGrammar::kNoParent, state_);
  }
  grammar_->Finish(state_);
}

bool Matcher::FillMask(std::span<uint64_t> mask) {
  CompiledGrammar& g = *grammar_;
  TANDEM_CHECK(static_cast<int32_t>(mask.size()) == g.mask_words(), "mask size");
  std::lock_guard lock(g.mu_);
  const std::string key = g.Key(state_);
  if (auto it = g.masks_.find(key); it != g.masks_.end()) {
    ++g.hits_;
    std::copy(it->second->begin(), it->second->end(), mask.begin());
    return true;
  }
  ++g.misses_;
  auto computed = std::make_shared<std::vector<uint64_t>>();
  if (!g.ComputeMask(state_, *computed)) return false;
  std::copy(computed->begin(), computed->end(), mask.begin());
  const int64_t bytes = static_cast<int64_t>(computed->size() * sizeof(uint64_t) + key.size());
  if (g.mask_bytes_ + bytes > g.limits_.mask_cache_bytes) {
    g.masks_.clear();
    g.mask_bytes_ = 0;
  }
  g.masks_.emplace(key, std::move(computed));
  g.mask_bytes_ += bytes;
  return true;
}

bool Matcher::AcceptBytes(std::string_view bytes) {
  CompiledGrammar& g = *grammar_;
  std::lock_guard lock(g.mu_);
  CompiledGrammar::State cur = state_;
  CompiledGrammar::State next;
  for (char c : bytes) {
    if (!g.Advance(cur, static_cast<uint8_t>(c), next)) return false;
    if (next.stacks.empty() && !next.accepting) return false;
    std::swap(cur, next);
  }
  state_ = std::move(cur);
  return true;
}

bool Matcher::AcceptToken(int32_t id) {
  const TokenVocabulary& vocab = grammar_->vocab();
  if (id < 0 || id >= vocab.size()) return false;
  const std::string& bytes = vocab.bytes(id);
  if (bytes.empty()) {
    const auto ends = vocab.end_ids();
    return state_.accepting && std::find(ends.begin(), ends.end(), id) != ends.end();
  }
  return AcceptBytes(bytes);
}

}  // namespace tandem::engine::constrain
