// A small backtracking regex matcher for the pre-tokenizer patterns of
// byte-level BPE vocabularies (tokenizer.json "Split" regexes as llama.cpp
// spells them). It reproduces what llama.cpp gets from std::regex on its
// "collapsed" text: \p{L} \p{N} \p{P} \p{S} \p{M} (and \p{Lu} etc., which
// llama.cpp treats as \p{L}) test a code point's category, non-ASCII
// whitespace is \s, and ASCII characters keep std::regex's C-locale classes.
// Supported syntax: literals, escapes, [...] classes with ranges, . ? * + {n}
// {n,} {n,m}, (...) (?:...) (?=...) (?!...), |, ^ and $. Matching is
// ECMAScript-style: leftmost start, first alternative that succeeds, greedy.
// Callers: pretokenizer.cc. A compiled Regex is immutable and thread-safe.
#ifndef TANDEM_ENGINE_TOKENIZER_PRETOKENIZER_REGEX_H_
#define TANDEM_ENGINE_TOKENIZER_PRETOKENIZER_REGEX_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace tandem::engine {

class Regex {
 public:
  // `pattern` is UTF-8. InvalidArgument names the pattern on syntax errors.
  static absl::StatusOr<std::unique_ptr<Regex>> Compile(std::string_view pattern);
  ~Regex();

  // Splits each segment [start, start + len) of `cpts` (consecutive, given by
  // `segment_lengths`) into matches and the unmatched gaps between them, in
  // order, the way llama.cpp's unicode_regex_split_stl does. Returns the new
  // segment lengths (in code points).
  std::vector<size_t> Split(const std::vector<uint32_t>& cpts,
                            const std::vector<size_t>& segment_lengths) const;

  struct Node;

 private:
  Regex() = default;
  class Matcher;

  std::vector<std::unique_ptr<Node>> nodes_;  // owns every node
  const Node* root_ = nullptr;
  // llama.cpp collapses text to category bytes when the pattern names a
  // unicode category; otherwise it matches raw code points (std::wregex).
  bool collapsed_ = false;
};

}  // namespace tandem::engine

#endif  // TANDEM_ENGINE_TOKENIZER_PRETOKENIZER_REGEX_H_
