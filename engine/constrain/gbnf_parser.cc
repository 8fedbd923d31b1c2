#include "engine/constrain/gbnf_parser.h"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/constrain/utf8_ranges.h"

namespace tandem::engine::constrain {
namespace gbnf {
namespace {

bool IsNameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
         c == '-' || c == '_';
}

class Parser {
 public:
  Parser(std::string_view text, const CompileLimits& limits) : text_(text), limits_(limits) {}

  absl::StatusOr<std::vector<ParsedRule>> Parse() {
    std::vector<ParsedRule> rules;
    SkipSpace(/*newlines=*/true);
    while (!AtEnd()) {
      ParsedRule rule;
      rule.line = line_;
      rule.column = column();
      rule.name = Name();
      if (rule.name.empty()) return Error("expected a rule name");
      SkipSpace(true);
      if (!Consume("::=")) return Error(absl::StrCat("expected '::=' after '", rule.name, "'"));
      SkipSpace(true);
      absl::StatusOr<Node> body = Alternatives(0);
      if (!body.ok()) return body.status();
      rule.body = *std::move(body);
      rules.push_back(std::move(rule));
      SkipSpace(true);
    }
    if (rules.empty()) return Error("the grammar has no rules");
    return rules;
  }

 private:
  bool AtEnd() const { return pos_ >= text_.size(); }
  char Peek(size_t ahead = 0) const {
    return pos_ + ahead < text_.size() ? text_[pos_ + ahead] : '\0';
  }
  int32_t column() const { return static_cast<int32_t>(pos_ - line_start_) + 1; }
  void Advance() {
    if (text_[pos_] == '\n') {
      ++line_;
      line_start_ = pos_ + 1;
    }
    ++pos_;
  }
  bool Consume(std::string_view s) {
    if (text_.substr(pos_, s.size()) != s) return false;
    for (size_t i = 0; i < s.size(); ++i) Advance();
    return true;
  }

  absl::Status Error(std::string_view what) const {
    return absl::InvalidArgumentError(absl::StrCat(line_, ":", column(), ": ", std::string(what)));
  }

  // Spaces and comments; newlines too where a rule may continue on the
  // next line (inside parentheses, after '|' or '::=').
  void SkipSpace(bool newlines) {
    while (!AtEnd()) {
      const char c = Peek();
      if (c == ' ' || c == '\t' || c == '\r' || (newlines && c == '\n')) {
        Advance();
      } else if (c == '#') {
        while (!AtEnd() && Peek() != '\n') Advance();
      } else {
        break;
      }
    }
  }

  std::string Name() {
    std::string name;
    while (!AtEnd() && IsNameChar(Peek())) {
      name.push_back(Peek());
      Advance();
    }
    return name;
  }

  // Whether the text at the cursor starts the next rule: `name ::=`.
  bool AtRuleStart() const {
    size_t p = pos_;
    while (p < text_.size() && IsNameChar(text_[p])) ++p;
    if (p == pos_) return false;
    while (p < text_.size() && (text_[p] == ' ' || text_[p] == '\t')) ++p;
    return text_.substr(p, 3) == "::=";
  }

  absl::StatusOr<Node> Alternatives(int32_t depth) {
    if (depth > limits_.max_depth) return Error("parentheses nest too deeply");
    Node alt{.kind = Node::Kind::kAlt, .line = line_, .column = column()};
    while (true) {
      absl::StatusOr<Node> seq = Sequence(depth);
      if (!seq.ok()) return seq.status();
      alt.children.push_back(*std::move(seq));
      SkipSpace(depth > 0);
      if (Peek() != '|') break;
      Advance();
      SkipSpace(true);
    }
    return alt;
  }

  absl::StatusOr<Node> Sequence(int32_t depth) {
    Node seq{.kind = Node::Kind::kSeq, .line = line_, .column = column()};
    while (true) {
      SkipSpace(depth > 0);
      if (AtEnd()) break;
      const char c = Peek();
      if (c == '|' || c == ')') break;
      if (c == '\n') {
        // A newline at the top level ends the rule unless the next line
        // continues it (anything but a new `name ::=`).
        SkipSpace(true);
        if (AtEnd() || AtRuleStart() || Peek() == '|') break;
        continue;
      }
      const int32_t line = line_;
      const int32_t col = column();
      Node item;
      if (c == '"') {
        absl::StatusOr<Node> lit = Literal();
        if (!lit.ok()) return lit.status();
        item = *std::move(lit);
      } else if (c == '[') {
        absl::StatusOr<Node> cls = Class();
        if (!cls.ok()) return cls.status();
        item = *std::move(cls);
      } else if (c == '.') {
        Advance();
        item = Node{.kind = Node::Kind::kClass,
                    .ranges = NormalizeRanges({{0, kMaxCodepoint}})};
      } else if (c == '(') {
        Advance();
        SkipSpace(true);
        absl::StatusOr<Node> group = Alternatives(depth + 1);
        if (!group.ok()) return group.status();
        SkipSpace(true);
        if (Peek() != ')') return Error("expected ')'");
        Advance();
        item = *std::move(group);
      } else if (IsNameChar(c)) {
        if (AtRuleStart()) break;
        item = Node{.kind = Node::Kind::kRef, .name = Name()};
      } else {
        return Error(absl::StrFormat("unexpected character '%c'", c));
      }
      item.line = line;
      item.column = col;
      absl::Status s = Postfix(item);
      if (!s.ok()) return s;
      seq.children.push_back(std::move(item));
    }
    return seq;
  }

  absl::Status Postfix(Node& item) {
    for (int32_t ops = 0;; ++ops) {
      if (ops > limits_.max_depth) return Error("too many repetition operators in a row");
      const char c = Peek();
      int32_t min = 0;
      int32_t max = 0;
      if (c == '*') {
        Advance();
        min = 0;
        max = kUnbounded;
      } else if (c == '+') {
        Advance();
        min = 1;
        max = kUnbounded;
      } else if (c == '?') {
        Advance();
        min = 0;
        max = 1;
      } else if (c == '{') {
        Advance();
        std::optional<int32_t> lo = Number();
        if (!lo.has_value()) return Error("expected a number after '{'");
        min = *lo;
        max = min;
        if (Peek() == ',') {
          Advance();
          std::optional<int32_t> hi = Number();
          max = hi.value_or(kUnbounded);
        }
        if (Peek() != '}') return Error("expected '}'");
        Advance();
        if (max != kUnbounded && max < min) return Error("repetition {m,n} has n < m");
        if (std::max(min, max) > limits_.max_repeat) {
          return Error(absl::StrCat("repetition bound exceeds ", limits_.max_repeat));
        }
      } else {
        return absl::OkStatus();
      }
      Node rep{.kind = Node::Kind::kRepeat, .min = min, .max = max, .line = item.line,
               .column = item.column};
      rep.children.push_back(std::move(item));
      item = std::move(rep);
    }
  }

  std::optional<int32_t> Number() {
    SkipSpace(false);
    int64_t v = 0;
    bool any = false;
    while (Peek() >= '0' && Peek() <= '9') {
      v = v * 10 + (Peek() - '0');
      if (v > 1'000'000'000) return std::nullopt;
      any = true;
      Advance();
    }
    SkipSpace(false);
    if (!any) return std::nullopt;
    return static_cast<int32_t>(v);
  }

  // One code point of a literal or class (escapes decoded); the cursor is
  // on it.
  absl::StatusOr<uint32_t> Char() {
    if (AtEnd()) return Error("unterminated literal or class");
    const auto byte = static_cast<uint8_t>(Peek());
    if (byte != '\\') {
      // A UTF-8 sequence in the grammar text.
      int len = byte < 0x80 ? 1 : byte >= 0xF0 ? 4 : byte >= 0xE0 ? 3 : byte >= 0xC0 ? 2 : 0;
      if (len == 0 || pos_ + len > text_.size()) return Error("invalid UTF-8");
      uint32_t cp = len == 1 ? byte : byte & (0xFF >> (len + 1));
      Advance();
      for (int i = 1; i < len; ++i) {
        const auto b = static_cast<uint8_t>(Peek());
        if ((b & 0xC0) != 0x80) return Error("invalid UTF-8");
        cp = (cp << 6) | (b & 0x3F);
        Advance();
      }
      return cp;
    }
    Advance();
    const char e = Peek();
    if (AtEnd()) return Error("dangling '\\'");
    Advance();
    switch (e) {
      case 'n': return '\n';
      case 't': return '\t';
      case 'r': return '\r';
      case 'f': return '\f';
      case 'v': return '\v';
      case '0': return 0;
      case 'x': return Hex(2);
      case 'u': return Hex(4);
      case 'U': return Hex(8);
      default: return static_cast<uint8_t>(e);  // \\ \" \] \[ \- \^ and the like
    }
  }

  absl::StatusOr<uint32_t> Hex(int digits) {
    uint32_t v = 0;
    for (int i = 0; i < digits; ++i) {
      const char c = Peek();
      int d = (c >= '0' && c <= '9')   ? c - '0'
              : (c >= 'a' && c <= 'f') ? c - 'a' + 10
              : (c >= 'A' && c <= 'F') ? c - 'A' + 10
                                       : -1;
      if (d < 0) return Error(absl::StrCat("expected ", digits, " hex digits"));
      v = v * 16 + static_cast<uint32_t>(d);
      Advance();
    }
    if (v > kMaxCodepoint) return Error("code point out of range");
    return v;
  }

  absl::StatusOr<Node> Literal() {
    Advance();  // "
    Node lit{.kind = Node::Kind::kLiteral};
    while (true) {
      if (AtEnd()) return Error("unterminated string literal");
      if (Peek() == '"') {
        Advance();
        break;
      }
      // A \x escape is a byte, so that a literal can hold any byte; other
      // characters are code points, encoded as UTF-8.
      if (Peek() == '\\' && Peek(1) == 'x') {
        Advance();
        Advance();
        absl::StatusOr<uint32_t> b = Hex(2);
        if (!b.ok()) return b.status();
        lit.bytes.push_back(static_cast<char>(*b));
        continue;
      }
      absl::StatusOr<uint32_t> cp = Char();
      if (!cp.ok()) return cp.status();
      AppendUtf8(*cp, &lit.bytes);
    }
    return lit;
  }

  absl::StatusOr<Node> Class() {
    Advance();  // [
    bool negated = false;
    if (Peek() == '^') {
      negated = true;
      Advance();
    }
    Ranges ranges;
    while (true) {
      if (AtEnd()) return Error("unterminated character class");
      if (Peek() == ']') {
        Advance();
        break;
      }
      absl::StatusOr<uint32_t> lo = Char();
      if (!lo.ok()) return lo.status();
      uint32_t hi = *lo;
      if (Peek() == '-' && Peek(1) != ']' && Peek(1) != '\0') {
        Advance();
        absl::StatusOr<uint32_t> h = Char();
        if (!h.ok()) return h.status();
        hi = *h;
        if (hi < *lo) return Error("character range is reversed");
      }
      ranges.push_back({*lo, hi});
    }
    ranges = NormalizeRanges(std::move(ranges));
    if (negated) ranges = ComplementRanges(ranges);
    return Node{.kind = Node::Kind::kClass, .ranges = std::move(ranges)};
  }

  std::string_view text_;
  const CompileLimits& limits_;
  size_t pos_ = 0;
  int32_t line_ = 1;
  size_t line_start_ = 0;
};

}  // namespace

absl::StatusOr<std::vector<ParsedRule>> Parse(std::string_view text,
                                              const CompileLimits& limits) {
  return Parser(text, limits).Parse();
}

}  // namespace gbnf

void AppendGbnfLiteral(std::string_view text, std::string* out) {
  out->push_back('"');
  for (char c : text) {
    const auto b = static_cast<uint8_t>(c);
    switch (c) {
      case '"': out->append("\\\""); break;
      case '\\': out->append("\\\\"); break;
      case '\n': out->append("\\n"); break;
      case '\r': out->append("\\r"); break;
      case '\t': out->append("\\t"); break;
      default:
        if (b < 0x20 || b == 0x7F) {
          absl::StrAppendFormat(out, "\\x%02X", b);
        } else {
          out->push_back(c);  // UTF-8 passes through as code points
        }
    }
  }
  out->push_back('"');
}

}  // namespace tandem::engine::constrain
