#include "engine/constrain/regex.h"

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "engine/constrain/utf8_ranges.h"

namespace tandem::engine::constrain {
namespace {

using Ranges = std::vector<std::pair<uint32_t, uint32_t>>;

const Ranges kDigit = {{'0', '9'}};
const Ranges kWord = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
const Ranges kSpace = {{'\t', '\r'}, {' ', ' '}, {0xA0, 0xA0}, {0x2028, 0x2029}, {0xFEFF, 0xFEFF}};

// How a code point is written inside a JSON string, when it must be escaped.
std::optional<std::string> JsonEscape(uint32_t cp) {
  switch (cp) {
    case '"': return "\\\"";
    case '\\': return "\\\\";
    case '\n': return "\\n";
    case '\r': return "\\r";
    case '\t': return "\\t";
    case '\b': return "\\b";
    case '\f': return "\\f";
    default: break;
  }
  if (cp < 0x20) return absl::StrFormat("\\u%04x", cp);
  return std::nullopt;
}

void AppendClassChar(uint32_t cp, std::string* out) {
  if (cp < 0x10000) {
    absl::StrAppendFormat(out, "\\u%04X", cp);
  } else {
    absl::StrAppendFormat(out, "\\U%08X", cp);
  }
}

class RegexConverter {
 public:
  RegexConverter(std::string_view re, RegexTarget target, const CompileLimits& limits)
      : re_(re), target_(target), limits_(limits) {}

  absl::StatusOr<std::string> Convert() {
    if (Peek() == '^') ++pos_;
    absl::StatusOr<std::string> expr = Alternation(0);
    if (!expr.ok()) return expr.status();
    if (pos_ < re_.size()) {
      return Error(re_[pos_] == ')' ? "unbalanced ')'" : "unexpected character");
    }
    return *expr;
  }

 private:
  char Peek(size_t ahead = 0) const {
    return pos_ + ahead < re_.size() ? re_[pos_ + ahead] : '\0';
  }
  bool AtEnd() const { return pos_ >= re_.size(); }

  absl::Status Error(std::string_view what) const {
    return absl::InvalidArgumentError(absl::StrCat(std::string(what), " at offset ", pos_));
  }

  absl::Status CheckSize(const std::string& s) const {
    if (static_cast<int64_t>(s.size()) > limits_.max_text_bytes) {
      return absl::InvalidArgumentError(
          absl::StrCat("the regex expands to more than ", limits_.max_text_bytes, " bytes"));
    }
    return absl::OkStatus();
  }

  absl::StatusOr<std::string> Alternation(int32_t depth) {
    if (depth > limits_.max_depth) return Error("groups nest too deeply");
    std::vector<std::string> alts;
    while (true) {
      absl::StatusOr<std::string> seq = Sequence(depth);
      if (!seq.ok()) return seq.status();
      alts.push_back(*std::move(seq));
      if (Peek() != '|') break;
      ++pos_;
    }
    if (alts.size() == 1) return alts[0];
    std::string out = "(";
    for (size_t i = 0; i < alts.size(); ++i) {
      if (i > 0) out += " | ";
      out += alts[i];
    }
    out += ")";
    return out;
  }

  absl::StatusOr<std::string> Sequence(int32_t depth) {
    std::string out;
    while (!AtEnd()) {
      const char c = Peek();
      if (c == '|' || c == ')') break;
      if (c == '$' && pos_ + 1 == re_.size()) {
        ++pos_;
        break;
      }
      absl::StatusOr<std::string> atom = Atom(depth);
      if (!atom.ok()) return atom.status();
      std::string item = *std::move(atom);
      absl::Status s = Quantifier(item);
      if (!s.ok()) return s;
      if (!out.empty()) out += " ";
      out += item;
      RETURN_IF_ERROR(CheckSize(out));
    }
    if (out.empty()) return std::string("\"\"");
    return out;
  }

  absl::Status Quantifier(std::string& item) {
    const char c = Peek();
    std::string suffix;
    if (c == '*' || c == '+' || c == '?') {
      ++pos_;
      suffix = std::string(1, c);
    } else if (c == '{') {
      const size_t start = pos_;
      ++pos_;
      std::optional<int64_t> lo = Number();
      if (!lo.has_value()) {
        // Not a quantifier ("{" as a literal, as ECMAScript allows).
        pos_ = start;
        return absl::OkStatus();
      }
      int64_t hi = *lo;
      bool unbounded = false;
      if (Peek() == ',') {
        ++pos_;
        std::optional<int64_t> h = Number();
        if (h.has_value()) {
          hi = *h;
        } else {
          unbounded = true;
        }
      }
      if (Peek() != '}') return Error("expected '}' in a quantifier");
      ++pos_;
      if (!unbounded && hi < *lo) return Error("quantifier {m,n} has n < m");
      if (std::max(*lo, hi) > limits_.max_repeat) {
        return Error(absl::StrCat("quantifier bound exceeds ", limits_.max_repeat));
      }
      suffix = unbounded ? absl::StrCat("{", *lo, ",}")
                         : (hi == *lo ? absl::StrCat("{", *lo, "}")
                                      : absl::StrCat("{", *lo, ",", hi, "}"));
    } else {
      return absl::OkStatus();
    }
    if (Peek() == '?') ++pos_;  // lazy: the same set of matches
    if (Peek() == '+') return Error("possessive quantifiers are not supported");
    if (Peek() == '*') {
      return Error("a quantifier follows a quantifier");
    }
    item = absl::StrCat("(", item, ")", suffix);
    return absl::OkStatus();
  }

  std::optional<int64_t> Number() {
    int64_t v = 0;
    bool any = false;
    while (Peek() >= '0' && Peek() <= '9') {
      v = v * 10 + (Peek() - '0');
      if (v > 1'000'000'000) v = 1'000'000'000;
      any = true;
      ++pos_;
    }
    if (!any) return std::nullopt;
    return v;
  }

  absl::StatusOr<std::string> Atom(int32_t depth) {
    const char c = Peek();
    if (c == '(') {
      ++pos_;
      if (Peek() == '?') {
        if (Peek(1) == ':') {
          pos_ += 2;
        } else if (Peek(1) == '<' && Peek(2) != '=' && Peek(2) != '!') {
          pos_ += 2;
          while (!AtEnd() && Peek() != '>') ++pos_;
          ++pos_;
        } else if (Peek(1) == 'P' && Peek(2) == '<') {
          pos_ += 3;
          while (!AtEnd() && Peek() != '>') ++pos_;
          ++pos_;
        } else {
          return Error("lookaround and inline flags are not supported");
        }
      }
      absl::StatusOr<std::string> inner = Alternation(depth + 1);
      if (!inner.ok()) return inner.status();
      if (Peek() != ')') return Error("missing ')'");
      ++pos_;
      return absl::StrCat("(", *inner, ")");
    }
    if (c == '[') return ClassAtom();
    if (c == '.') {
      ++pos_;
      return Set(ComplementRanges(NormalizeRanges({{'\n', '\n'}})));
    }
    if (c == '*' || c == '+' || c == '?') return Error("nothing to repeat");
    if (c == '^' || c == '$') return Error("anchors are only supported at the ends");
    if (c == '\\') {
      absl::StatusOr<Ranges> esc = Escape(/*in_class=*/false);
      if (!esc.ok()) return esc.status();
      return Set(*esc);
    }
    absl::StatusOr<uint32_t> cp = Utf8Char();
    if (!cp.ok()) return cp.status();
    return Set({{*cp, *cp}});
  }

  absl::StatusOr<uint32_t> Utf8Char() {
    const auto byte = static_cast<uint8_t>(Peek());
    const int len = byte < 0x80 ? 1 : byte >= 0xF0 ? 4 : byte >= 0xE0 ? 3 : byte >= 0xC0 ? 2 : 0;
    if (len == 0 || pos_ + len > re_.size()) return Error("invalid UTF-8");
    uint32_t cp = len == 1 ? byte : byte & (0xFF >> (len + 1));
    for (int i = 1; i < len; ++i) {
      const auto b = static_cast<uint8_t>(re_[pos_ + i]);
      if ((b & 0xC0) != 0x80) return Error("invalid UTF-8");
      cp = (cp << 6) | (b & 0x3F);
    }
    pos_ += len;
    return cp;
  }

  absl::StatusOr<uint32_t> Hex(int min_digits, int max_digits) {
    uint32_t v = 0;
    int n = 0;
    while (n < max_digits) {
      const char c = Peek();
      const int d = (c >= '0' && c <= '9')   ? c - '0'
                    : (c >= 'a' && c <= 'f') ? c - 'a' + 10
                    : (c >= 'A' && c <= 'F') ? c - 'A' + 10
                                             : -1;
      if (d < 0) break;
      v = v * 16 + static_cast<uint32_t>(d);
      ++n;
      ++pos_;
    }
    if (n < min_digits) return Error("expected hex digits");
    if (v > kMaxCodepoint) return Error("code point out of range");
    return v;
  }

  // The cursor is on '\'. A set of code points (one for a plain escape).
  absl::StatusOr<Ranges> Escape(bool in_class) {
    ++pos_;
    if (AtEnd()) return Error("dangling '\\'");
    const char e = Peek();
    ++pos_;
    auto one = [](uint32_t cp) { return Ranges{{cp, cp}}; };
    switch (e) {
      case 'd': return kDigit;
      case 'D': return ComplementRanges(NormalizeRanges(kDigit));
      case 'w': return kWord;
      case 'W': return ComplementRanges(NormalizeRanges(kWord));
      case 's': return kSpace;
      case 'S': return ComplementRanges(NormalizeRanges(kSpace));
      case 'n': return one('\n');
      case 't': return one('\t');
      case 'r': return one('\r');
      case 'f': return one('\f');
      case 'v': return one('\v');
      case '0': return one(0);
      case 'b':
        if (in_class) return one('\b');
        return Error("word boundaries are not supported");
      case 'B': return Error("word boundaries are not supported");
      case 'x': {
        absl::StatusOr<uint32_t> v = Hex(2, 2);
        if (!v.ok()) return v.status();
        return one(*v);
      }
      case 'u': {
        if (Peek() == '{') {
          ++pos_;
          absl::StatusOr<uint32_t> v = Hex(1, 6);
          if (!v.ok()) return v.status();
          if (Peek() != '}') return Error("expected '}'");
          ++pos_;
          return one(*v);
        }
        absl::StatusOr<uint32_t> v = Hex(4, 4);
        if (!v.ok()) return v.status();
        return one(*v);
      }
      default:
        break;
    }
    if (e >= '1' && e <= '9') return Error("backreferences are not supported");
    if ((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z')) {
      return Error(absl::StrCat("unknown escape '\\", std::string(1, e), "'"));
    }
    --pos_;
    absl::StatusOr<uint32_t> cp = Utf8Char();
    if (!cp.ok()) return cp.status();
    return one(*cp);
  }

  absl::StatusOr<std::string> ClassAtom() {
    ++pos_;  // [
    bool negated = false;
    if (Peek() == '^') {
      negated = true;
      ++pos_;
    }
    Ranges ranges;
    bool first = true;
    while (true) {
      if (AtEnd()) return Error("unterminated character class");
      if (Peek() == ']' && !first) {
        ++pos_;
        break;
      }
      first = false;
      Ranges lo_set;
      if (Peek() == '\\') {
        absl::StatusOr<Ranges> esc = Escape(/*in_class=*/true);
        if (!esc.ok()) return esc.status();
        lo_set = *esc;
      } else {
        absl::StatusOr<uint32_t> cp = Utf8Char();
        if (!cp.ok()) return cp.status();
        lo_set = {{*cp, *cp}};
      }
      if (Peek() == '-' && Peek(1) != ']' && Peek(1) != '\0' && lo_set.size() == 1 &&
          lo_set[0].first == lo_set[0].second) {
        ++pos_;
        Ranges hi_set;
        if (Peek() == '\\') {
          absl::StatusOr<Ranges> esc = Escape(true);
          if (!esc.ok()) return esc.status();
          hi_set = *esc;
        } else {
          absl::StatusOr<uint32_t> cp = Utf8Char();
          if (!cp.ok()) return cp.status();
          hi_set = {{*cp, *cp}};
        }
        if (hi_set.size() != 1 || hi_set[0].first != hi_set[0].second) {
          return Error("a class range ends in a class");
        }
        if (hi_set[0].first < lo_set[0].first) return Error("class range is reversed");
        ranges.push_back({lo_set[0].first, hi_set[0].first});
      } else {
        ranges.insert(ranges.end(), lo_set.begin(), lo_set.end());
      }
    }
    ranges = NormalizeRanges(std::move(ranges));
    if (negated) ranges = ComplementRanges(ranges);
    if (ranges.empty()) return Error("the character class matches nothing");
    return Set(ranges);
  }

  // A set of code points as GBNF for the target.
  std::string Set(const Ranges& raw) const {
    const Ranges ranges = NormalizeRanges(raw);
    if (target_ == RegexTarget::kText) return ClassText(ranges);
    // Inside a JSON string: the characters that need no escape as a class,
    // the others as their escapes.
    Ranges plain;
    std::vector<std::string> escaped;
    for (const auto& [lo, hi] : ranges) {
      uint32_t start = lo;
      for (uint32_t cp = lo; cp <= hi && cp < 0x80; ++cp) {
        if (std::optional<std::string> esc = JsonEscape(cp)) {
          if (cp > start) plain.push_back({start, cp - 1});
          escaped.push_back(*esc);
          start = cp + 1;
        }
      }
      if (start <= hi) plain.push_back({start, hi});
    }
    std::vector<std::string> alts;
    if (!plain.empty()) alts.push_back(ClassText(plain));
    for (const std::string& e : escaped) {
      std::string lit;
      AppendGbnfLiteral(e, &lit);
      alts.push_back(std::move(lit));
    }
    if (alts.size() == 1) return alts[0];
    std::string out = "(";
    for (size_t i = 0; i < alts.size(); ++i) {
      if (i > 0) out += " | ";
      out += alts[i];
    }
    return out + ")";
  }

  static std::string ClassText(const Ranges& ranges) {
    if (ranges.size() == 1 && ranges[0].first == ranges[0].second) {
      std::string lit;
      std::string utf8;
      AppendUtf8(ranges[0].first, &utf8);
      AppendGbnfLiteral(utf8, &lit);
      return lit;
    }
    std::string out = "[";
    for (const auto& [lo, hi] : ranges) {
      AppendClassChar(lo, &out);
      if (hi != lo) {
        out += "-";
        AppendClassChar(hi, &out);
      }
    }
    return out + "]";
  }

  std::string_view re_;
  RegexTarget target_;
  const CompileLimits& limits_;
  size_t pos_ = 0;
};

}  // namespace

absl::StatusOr<std::string> RegexToGbnf(std::string_view regex, RegexTarget target,
                                        const CompileLimits& limits) {
  return RegexConverter(regex, target, limits).Convert();
}

}  // namespace tandem::engine::constrain
