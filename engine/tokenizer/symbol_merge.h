// The merge loop SentencePiece (SPM) and byte-level BPE share: split a word
// into UTF-8 characters, then repeatedly join the adjacent pair with the
// highest priority (ties: leftmost) until no pair may join. The tokenizers
// differ only in how they rank a pair. Header-only; pure; thread-safe.
#ifndef TANDEM_ENGINE_TOKENIZER_SYMBOL_MERGE_H_
#define TANDEM_ENGINE_TOKENIZER_SYMBOL_MERGE_H_

#include <algorithm>
#include <optional>
#include <queue>
#include <string_view>
#include <vector>

#include "engine/tokenizer/unicode.h"

namespace tandem::engine {

// `priority(left, right)` ranks joining two adjacent pieces of `text`
// (higher first) or returns nullopt when they may not join. Returns the
// final pieces, views into `text`, in order.
template <typename PriorityFn>
std::vector<std::string_view> MergeSymbols(std::string_view text, PriorityFn priority) {
  struct Symbol {
    int prev;
    int next;
    size_t offset;
    size_t n;  // bytes; 0 once merged into its left neighbour
  };
  struct Pair {
    int left;
    int right;
    double priority;
    size_t size;  // bytes of the joined piece, to spot stale entries
  };
  struct Worse {  // max-heap: highest priority, then leftmost
    bool operator()(const Pair& a, const Pair& b) const {
      return a.priority < b.priority || (a.priority == b.priority && a.left > b.left);
    }
  };

  std::vector<Symbol> symbols;
  for (size_t off = 0; off < text.size();) {
    const size_t n = std::min(Utf8SeqLen(text[off]), text.size() - off);
    const int index = static_cast<int>(symbols.size());
    symbols.push_back({index - 1, off + n == text.size() ? -1 : index + 1, off, n});
    off += n;
  }
  if (symbols.empty()) return {};

  std::priority_queue<Pair, std::vector<Pair>, Worse> queue;
  auto try_add = [&](int left, int right) {
    if (left < 0 || right < 0) return;
    const Symbol& l = symbols[left];
    const Symbol& r = symbols[right];
    const std::optional<double> p =
        priority(text.substr(l.offset, l.n), text.substr(r.offset, r.n));
    if (p.has_value()) queue.push({left, right, *p, l.n + r.n});
  };
  for (int i = 1; i < static_cast<int>(symbols.size()); ++i) try_add(i - 1, i);

  while (!queue.empty()) {
    const Pair p = queue.top();
    queue.pop();
    Symbol& left = symbols[p.left];
    Symbol& right = symbols[p.right];
    if (left.n == 0 || right.n == 0 || left.n + right.n != p.size) continue;  // stale
    left.n += right.n;
    right.n = 0;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = p.left;
    try_add(left.prev, p.left);
    try_add(p.left, left.next);
  }

  std::vector<std::string_view> pieces;
  for (int i = 0; i != -1; i = symbols[i].next) {
    pieces.push_back(text.substr(symbols[i].offset, symbols[i].n));
  }
  return pieces;
}

}  // namespace tandem::engine

#endif  // TANDEM_ENGINE_TOKENIZER_SYMBOL_MERGE_H_
