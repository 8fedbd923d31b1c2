// A context-free grammar over bytes, the form every output constraint is
// compiled to (JSON Schema and regular expressions are first written as
// grammar text). The text is llama.cpp's GBNF syntax:
//
//   root   ::= "{" ws pair ("," ws pair)* "}"   # a comment
//   pair   ::= [a-z]+ ":" ws [0-9]{1,3}
//   ws     ::= [ \t\n]*
//
// rules `name ::= alternatives`; string literals with \n \t \r \\ \" \xHH
// \uHHHH \UHHHHHHHH escapes; character classes over code points ([a-z],
// [^"\\], escapes as in literals); `.` for any character; grouping; and the
// postfix operators * + ? {m} {m,} {m,n}. `root` is the start rule.
//
// Compilation lowers everything to bytes: a literal becomes its UTF-8 bytes,
// a class of code points becomes alternatives of byte-range sequences, and a
// repetition becomes right-recursive helper rules (which the matcher runs
// without growing its stacks). So a matcher advances one byte at a time, and
// a token whose bytes end mid-character is handled exactly. Left recursion
// is refused (the matcher expands rules top-down). Immutable once built;
// any thread.
#ifndef TANDEM_ENGINE_CONSTRAIN_GRAMMAR_H_
#define TANDEM_ENGINE_CONSTRAIN_GRAMMAR_H_

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace tandem::engine::constrain {

// Bounds on compiling one constraint, so a hostile schema, regex or grammar
// cannot stall the process that compiles it.
struct CompileLimits {
  // Elements of the lowered grammar (bytes, rule references) in all rules.
  int64_t max_elements = 1 << 18;
  // Bytes of grammar text a JSON Schema or regex may expand to.
  int64_t max_text_bytes = 1 << 20;
  // Nesting of schemas, regex groups and grammar parentheses.
  int32_t max_depth = 64;
  // The largest bound of a counted repetition ({m,n}, minItems, maxLength).
  int32_t max_repeat = 1000;
};

// 256 bits: the bytes one element accepts.
struct ByteSet {
  std::array<uint64_t, 4> bits{};

  bool Has(uint8_t b) const { return (bits[b >> 6] >> (b & 63)) & 1; }
  void Add(uint8_t b) { bits[b >> 6] |= uint64_t{1} << (b & 63); }
  void AddRange(uint8_t lo, uint8_t hi) {
    for (int b = lo; b <= hi; ++b) Add(static_cast<uint8_t>(b));
  }
  ByteSet& operator|=(const ByteSet& o) {
    for (int i = 0; i < 4; ++i) bits[i] |= o.bits[i];
    return *this;
  }
  bool empty() const { return (bits[0] | bits[1] | bits[2] | bits[3]) == 0; }
  friend bool operator==(const ByteSet&, const ByteSet&) = default;
};

// One step of an alternative. Alternatives lie end to end in one array, each
// closed by a kEnd element, so a position in the grammar is an index.
struct Element {
  enum class Kind : uint8_t { kEnd, kBytes, kRule };
  Kind kind = Kind::kEnd;
  int32_t value = 0;  // kBytes: index into byte_sets; kRule: rule index
};

class Grammar {
 public:
  // Parses and lowers GBNF text. InvalidArgument with "line:column" of the
  // offending text, or naming the rule (undefined, left-recursive, matching
  // nothing).
  static absl::StatusOr<Grammar> Parse(std::string_view text, const CompileLimits& limits = {});

  const std::vector<Element>& elements() const { return elements_; }
  const std::vector<ByteSet>& byte_sets() const { return byte_sets_; }
  // Start positions of each alternative of `rule`.
  const std::vector<int32_t>& alternatives(int32_t rule) const { return rules_[rule]; }
  const std::string& rule_name(int32_t rule) const { return names_[rule]; }
  int32_t num_rules() const { return static_cast<int32_t>(rules_.size()); }
  int32_t root() const { return root_; }

  // The bytes the element at `pos` accepts (kBytes only).
  const ByteSet& BytesAt(int32_t pos) const { return byte_sets_[elements_[pos].value]; }

 private:
  friend class GrammarLowering;
  std::vector<Element> elements_;
  std::vector<ByteSet> byte_sets_;
  std::vector<std::vector<int32_t>> rules_;
  std::vector<std::string> names_;
  int32_t root_ = 0;
};

// Appends `text` as a GBNF string literal ("..." with escapes).
void AppendGbnfLiteral(std::string_view text, std::string* out);

}  // namespace tandem::engine::constrain

#endif  // TANDEM_ENGINE_CONSTRAIN_GRAMMAR_H_
