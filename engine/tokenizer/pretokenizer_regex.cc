// Patterns are parsed into a small tree and matched by recursive
// backtracking with continuations, which gives ECMAScript's ordered
// alternation and greedy backtracking without a general regex library.
// Rejected: std::regex (no \p{...}; llama.cpp works around that by
// collapsing text to category bytes, whose effect is reproduced here by
// Symbol()); RE2 (leftmost-longest is not ECMAScript's semantics and it
// lacks lookahead).
#include "engine/tokenizer/pretokenizer_regex.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/strings.h"
#include "engine/tokenizer/unicode.h"

namespace tandem::engine {

namespace {

// Bytes llama.cpp substitutes for non-ASCII code points in collapsed text.
constexpr uint32_t kCollapsedNumber = 0xD1;
constexpr uint32_t kCollapsedLetter = 0xD2;
constexpr uint32_t kCollapsedPunct = 0xD3;
constexpr uint32_t kCollapsedMark = 0xD4;
constexpr uint32_t kCollapsedSymbol = 0xD5;
constexpr uint32_t kCollapsedOther = 0xD0;
constexpr uint32_t kVerticalTab = 0x0B;  // stands for non-ASCII whitespace

bool InRange(uint32_t s, uint32_t lo, uint32_t hi) { return s >= lo && s <= hi; }

// std::regex's C-locale classes on the (possibly collapsed) symbol.
bool IsSpaceSym(uint32_t s) { return s == ' ' || InRange(s, 0x09, 0x0D); }
bool IsDigitSym(uint32_t s) { return InRange(s, '0', '9'); }
bool IsWordSym(uint32_t s) {
  return IsDigitSym(s) || InRange(s, 'a', 'z') || InRange(s, 'A', 'Z') || s == '_';
}
// llama.cpp's ASCII stand-ins for the categories (k_ucat_map). Older
// llama.cpp releases left '~' out of \p{S}; current ones (checked against a
// prebuilt llama.cpp) include it, as Unicode does.
bool IsAsciiPunct(uint32_t s) {
  return InRange(s, 0x21, 0x23) || InRange(s, 0x25, 0x2A) || InRange(s, 0x2C, 0x2F) ||
         InRange(s, 0x3A, 0x3B) || InRange(s, 0x3F, 0x40) || InRange(s, 0x5B, 0x5D) ||
         s == 0x5F || s == 0x7B || s == 0x7D;
}
bool IsAsciiSymbol(uint32_t s) {
  return s == '$' || s == '+' || InRange(s, '<', '>') || s == '^' || s == '`' || s == '|' ||
         s == '~';
}

struct ClassItem {
  enum Type : uint8_t {
    kRange,
    kLetter,
    kNumber,
    kPunct,
    kSymbol,
    kMark,
    kSpace,
    kNotSpace,
    kDigit,
    kNotDigit,
    kWord,
    kNotWord,
    kDot,
  };
  Type type;
  uint32_t lo = 0;
  uint32_t hi = 0;

  bool Matches(uint32_t s) const {
    switch (type) {
      case kRange: return InRange(s, lo, hi);
      case kLetter:
        return s == kCollapsedLetter || InRange(s, 'A', 'Z') || InRange(s, 'a', 'z');
      case kNumber: return s == kCollapsedNumber || IsDigitSym(s);
      case kPunct: return s == kCollapsedPunct || IsAsciiPunct(s);
      case kSymbol: return s == kCollapsedSymbol || IsAsciiSymbol(s);
      case kMark: return s == kCollapsedMark;
      case kSpace: return IsSpaceSym(s);
      case kNotSpace: return !IsSpaceSym(s);
      case kDigit: return IsDigitSym(s);
      case kNotDigit: return !IsDigitSym(s);
      case kWord: return IsWordSym(s);
      case kNotWord: return !IsWordSym(s);
      case kDot: return s != '\n' && s != '\r' && s != 0x2028 && s != 0x2029;
    }
    return false;
  }
};

// A non-owning callable reference: continuations live on the caller's stack.
class Cont {
 public:
  template <typename F>
  explicit Cont(F& f)
      : obj_(&f), fn_([](void* o, size_t p) { return (*static_cast<F*>(o))(p); }) {}
  bool operator()(size_t p) const { return fn_(obj_, p); }

 private:
  void* obj_;
  bool (*fn_)(void*, size_t);
};

}  // namespace

struct Regex::Node {
  enum Kind : uint8_t { kClass, kSeq, kAlt, kRepeat, kLookahead, kBegin, kEnd };
  Kind kind;
  bool negate = false;  // kClass: [^...]; kLookahead: (?!...)
  std::vector<ClassItem> items;
  std::vector<const Node*> children;
  int min = 1;
  int max = 1;  // -1: unbounded

  bool ClassMatches(uint32_t s) const {
    bool any = false;
    for (const ClassItem& item : items) {
      if (item.Matches(s)) {
        any = true;
        break;
      }
    }
    return any != negate;
  }
};

namespace {

using Node = Regex::Node;

// A node that always consumes exactly one symbol, possibly guarded by a
// positive lookahead on that same symbol (tekken's "((?=[\p{L}])([^a-z]))").
bool IsSingleSymbol(const Node* n) {
  if (n->kind == Node::kClass) return true;
  if (n->kind == Node::kSeq && n->children.size() == 1) {
    return IsSingleSymbol(n->children[0]);
  }
  if (n->kind == Node::kSeq && n->children.size() == 2) {
    const Node* guard = n->children[0];
    return guard->kind == Node::kLookahead && !guard->negate &&
           IsSingleSymbol(guard->children[0]) && IsSingleSymbol(n->children[1]);
  }
  return false;
}

bool SingleSymbolMatches(const Node* n, uint32_t s) {
  if (n->kind == Node::kClass) return n->ClassMatches(s);
  if (n->children.size() == 1) return SingleSymbolMatches(n->children[0], s);
  return SingleSymbolMatches(n->children[0]->children[0], s) &&
         SingleSymbolMatches(n->children[1], s);
}

class Parser {
 public:
  Parser(std::string_view pattern, std::vector<std::unique_ptr<Node>>* nodes)
      : pattern_(pattern), p_(DecodeUtf8Lenient(pattern)), nodes_(nodes) {}

  absl::StatusOr<const Node*> Parse() {
    const Node* root = ParseAlt();
    if (error_.empty() && i_ != p_.size()) error_ = "unbalanced ')'";
    if (!error_.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "pre-tokenizer regex '", ToAbsl(pattern_), "': ", error_, " at ", i_));
    }
    return root;
  }

 private:
  Node* NewNode(Node::Kind kind) {
    nodes_->push_back(std::make_unique<Node>());
    nodes_->back()->kind = kind;
    return nodes_->back().get();
  }
  bool AtEnd() const { return i_ >= p_.size(); }
  uint32_t Peek(size_t ahead = 0) const {
    return i_ + ahead < p_.size() ? p_[i_ + ahead] : 0xFFFFFFFF;
  }

  const Node* ParseAlt() {
    std::vector<const Node*> alts = {ParseSeq()};
    while (error_.empty() && Peek() == '|') {
      ++i_;
      alts.push_back(ParseSeq());
    }
    if (alts.size() == 1) return alts[0];
    Node* n = NewNode(Node::kAlt);
    n->children = std::move(alts);
    return n;
  }

  const Node* ParseSeq() {
    Node* seq = NewNode(Node::kSeq);
    while (error_.empty() && !AtEnd() && Peek() != '|' && Peek() != ')') {
      const Node* atom = ParseAtom();
      if (atom == nullptr) break;
      seq->children.push_back(ParseQuantifier(atom));
    }
    return seq;
  }

  const Node* ParseQuantifier(const Node* atom) {
    int min = 1, max = 1;
    const uint32_t c = Peek();
    if (c == '?') {
      min = 0;
    } else if (c == '*') {
      min = 0;
      max = -1;
    } else if (c == '+') {
      max = -1;
    } else if (c == '{' && IsDigitSym(Peek(1))) {
      ++i_;
      min = max = ParseInt();
      if (Peek() == ',') {
        ++i_;
        max = IsDigitSym(Peek()) ? ParseInt() : -1;
      }
      if (Peek() != '}' || (max >= 0 && max < min)) {
        error_ = "bad {n,m} quantifier";
        return atom;
      }
    } else {
      return atom;
    }
    ++i_;
    if (Peek() == '?' || Peek() == '+') {
      error_ = "lazy and possessive quantifiers are not supported";
      return atom;
    }
    Node* rep = NewNode(Node::kRepeat);
    rep->children = {atom};
    rep->min = min;
    rep->max = max;
    return rep;
  }

  int ParseInt() {
    int v = 0;
    while (IsDigitSym(Peek()) && v < 100000) v = v * 10 + static_cast<int>(p_[i_++] - '0');
    return v;
  }

  const Node* ParseAtom() {
    const uint32_t c = p_[i_++];
    switch (c) {
      case '(': return ParseGroup();
      case '[': return ParseClass();
      case '^': return NewNode(Node::kBegin);
      case '$': return NewNode(Node::kEnd);
      case '.': return ClassOf(ClassItem{ClassItem::kDot});
      case '\\': {
        ClassItem item{ClassItem::kRange};
        if (!ParseEscape(&item)) return nullptr;
        return ClassOf(item);
      }
      case '*':
      case '+':
      case '?':
        error_ = "quantifier without operand";
        return nullptr;
      default:
        return ClassOf(ClassItem{ClassItem::kRange, c, c});
    }
  }

  const Node* ClassOf(const ClassItem& item) {
    Node* n = NewNode(Node::kClass);
    n->items.push_back(item);
    return n;
  }

  const Node* ParseGroup() {
    Node* look = nullptr;
    if (Peek() == '?') {
      const uint32_t kind = Peek(1);
      if (kind == ':') {
        i_ += 2;
      } else if (kind == '=' || kind == '!') {
        i_ += 2;
        look = NewNode(Node::kLookahead);
        look->negate = kind == '!';
      } else {
        error_ = "unsupported group kind";
        return nullptr;
      }
    }
    const Node* inner = ParseAlt();
    if (!error_.empty()) return nullptr;
    if (Peek() != ')') {
      error_ = "missing ')'";
      return nullptr;
    }
    ++i_;
    if (look == nullptr) return inner;
    look->children = {inner};
    return look;
  }

  // After a backslash. Fills `item` (a single-code-point range for literal
  // escapes).
  bool ParseEscape(ClassItem* item) {
    if (AtEnd()) {
      error_ = "trailing backslash";
      return false;
    }
    const uint32_t c = p_[i_++];
    switch (c) {
      case 's': item->type = ClassItem::kSpace; return true;
      case 'S': item->type = ClassItem::kNotSpace; return true;
      case 'd': item->type = ClassItem::kDigit; return true;
      case 'D': item->type = ClassItem::kNotDigit; return true;
      case 'w': item->type = ClassItem::kWord; return true;
      case 'W': item->type = ClassItem::kNotWord; return true;
      case 'p': return ParseCategory(item);
      case 'r': *item = {ClassItem::kRange, '\r', '\r'}; return true;
      case 'n': *item = {ClassItem::kRange, '\n', '\n'}; return true;
      case 't': *item = {ClassItem::kRange, '\t', '\t'}; return true;
      case 'f': *item = {ClassItem::kRange, '\f', '\f'}; return true;
      case 'v': *item = {ClassItem::kRange, '\v', '\v'}; return true;
      case 'b':
      case 'B':
        error_ = "word boundaries are not supported";
        return false;
      default:
        if (IsWordSym(c)) {
          error_ = "unsupported escape";
          return false;
        }
        *item = {ClassItem::kRange, c, c};
        return true;
    }
  }

  bool ParseCategory(ClassItem* item) {
    std::string name;
    if (Peek() == '{') {
      ++i_;
      while (!AtEnd() && Peek() != '}' && name.size() < 16) {
        name.push_back(static_cast<char>(p_[i_++]));
      }
      if (Peek() == '}') ++i_;
    }
    if (name == "L" || name == "Lu" || name == "Ll" || name == "Lt" || name == "Lm" ||
        name == "Lo") {
      item->type = ClassItem::kLetter;  // llama.cpp maps every L* to \p{L}
    } else if (name == "N") {
      item->type = ClassItem::kNumber;
    } else if (name == "P") {
      item->type = ClassItem::kPunct;
    } else if (name == "S") {
      item->type = ClassItem::kSymbol;
    } else if (name == "M") {
      item->type = ClassItem::kMark;
    } else {
      error_ = absl::StrCat("unsupported category \\p{", name, "}");
      return false;
    }
    return true;
  }

  const Node* ParseClass() {
    Node* n = NewNode(Node::kClass);
    if (Peek() == '^') {
      n->negate = true;
      ++i_;
    }
    bool first = true;
    while (!AtEnd() && (Peek() != ']' || first)) {
      first = false;
      ClassItem item{ClassItem::kRange};
      const uint32_t c = p_[i_++];
      if (c == '\\') {
        if (!ParseEscape(&item)) return nullptr;
      } else {
        item = {ClassItem::kRange, c, c};
      }
      // A range "a-b" (a '-' before ']' is a literal).
      if (item.type == ClassItem::kRange && item.lo == item.hi && Peek() == '-' &&
          i_ + 1 < p_.size() && Peek(1) != ']') {
        ++i_;
        ClassItem end{ClassItem::kRange};
        const uint32_t e = p_[i_++];
        if (e == '\\') {
          if (!ParseEscape(&end)) return nullptr;
        } else {
          end = {ClassItem::kRange, e, e};
        }
        if (end.type != ClassItem::kRange || end.lo < item.lo) {
          error_ = "bad range in class";
          return nullptr;
        }
        item.hi = end.lo;
      }
      n->items.push_back(item);
    }
    if (AtEnd()) {
      error_ = "missing ']'";
      return nullptr;
    }
    ++i_;
    return n;
  }

  std::string_view pattern_;
  std::vector<uint32_t> p_;
  size_t i_ = 0;
  std::vector<std::unique_ptr<Node>>* nodes_;
  std::string error_;
};

}  // namespace

// Matches nodes against symbols [begin, end) of one segment.
class Regex::Matcher {
 public:
  Matcher(const uint32_t* sym, size_t begin, size_t end)
      : sym_(sym), begin_(begin), end_(end) {}

  bool Match(const Node* n, size_t pos, Cont k) const {
    switch (n->kind) {
      case Node::kClass:
        return pos < end_ && n->ClassMatches(sym_[pos]) && k(pos + 1);
      case Node::kSeq:
        return MatchSeq(n, 0, pos, k);
      case Node::kAlt:
        for (const Node* alt : n->children) {
          if (Match(alt, pos, k)) return true;
        }
        return false;
      case Node::kRepeat:
        if (IsSingleSymbol(n->children[0])) return MatchSimpleRepeat(n, pos, k);
        return MatchRepeat(n, 0, pos, k);
      case Node::kLookahead: {
        auto accept = [](size_t) { return true; };
        const bool found = Match(n->children[0], pos, Cont(accept));
        return found != n->negate && k(pos);
      }
      case Node::kBegin:
        return pos == begin_ && k(pos);
      case Node::kEnd:
        return pos == end_ && k(pos);
    }
    return false;
  }

 private:
  bool MatchSeq(const Node* n, size_t index, size_t pos, Cont k) const {
    if (index == n->children.size()) return k(pos);
    if (index + 1 == n->children.size()) return Match(n->children[index], pos, k);
    auto rest = [&](size_t p) { return MatchSeq(n, index + 1, p, k); };
    return Match(n->children[index], pos, Cont(rest));
  }

  // Greedy run of a one-symbol node: iterative, so long words cannot
  // exhaust the stack.
  bool MatchSimpleRepeat(const Node* n, size_t pos, Cont k) const {
    const Node* item = n->children[0];
    size_t count = 0;
    const size_t max = n->max < 0 ? end_ - pos : static_cast<size_t>(n->max);
    while (count < max && pos + count < end_ &&
           SingleSymbolMatches(item, sym_[pos + count])) {
      ++count;
    }
    const auto min = static_cast<size_t>(n->min);
    for (size_t c = count + 1; c-- > min;) {
      if (k(pos + c)) return true;
    }
    return false;
  }

  bool MatchRepeat(const Node* n, int count, size_t pos, Cont k) const {
    // Each iteration of a group repeat nests a few stack frames; give up on
    // a match rather than overflow the stack on pathological words (only
    // nested-group patterns such as exaone-moe's can get here).
    if (depth_ >= kMaxRepeatDepth) return false;
    ++depth_;
    const bool matched = MatchRepeatBody(n, count, pos, k);
    --depth_;
    return matched;
  }

  bool MatchRepeatBody(const Node* n, int count, size_t pos, Cont k) const {
    if (n->max < 0 || count < n->max) {
      auto again = [&](size_t p) {
        if (p == pos) return false;  // an empty iteration ends the loop
        return MatchRepeat(n, count + 1, p, k);
      };
      if (Match(n->children[0], pos, Cont(again))) return true;
    }
    return count >= n->min && k(pos);
  }

  static constexpr int kMaxRepeatDepth = 4096;

  const uint32_t* sym_;
  size_t begin_;
  size_t end_;
  mutable int depth_ = 0;
};

Regex::~Regex() = default;

absl::StatusOr<std::unique_ptr<Regex>> Regex::Compile(std::string_view pattern) {
  std::unique_ptr<Regex> re(new Regex());
  Parser parser(pattern, &re->nodes_);
  auto root = parser.Parse();
  if (!root.ok()) return root.status();
  re->root_ = *root;
  for (const char* cat : {"\\p{N}", "\\p{L}", "\\p{P}", "\\p{M}", "\\p{S}", "\\p{Lu}",
                          "\\p{Ll}", "\\p{Lt}", "\\p{Lm}", "\\p{Lo}"}) {
    if (pattern.find(cat) != std::string_view::npos) re->collapsed_ = true;
  }
  return re;
}

std::vector<size_t> Regex::Split(const std::vector<uint32_t>& cpts,
                                 const std::vector<size_t>& segment_lengths) const {
  // Symbols as llama.cpp's std::regex sees them.
  std::vector<uint32_t> sym(cpts.size());
  for (size_t i = 0; i < cpts.size(); ++i) {
    const uint32_t c = cpts[i];
    if (c < 0x80) {
      sym[i] = c;
      continue;
    }
    const CodepointFlags f = GetCodepointFlags(c);
    if (f.is_whitespace) {
      sym[i] = kVerticalTab;
    } else if (!collapsed_) {
      sym[i] = c;
    } else {
      switch (f.category) {
        case CodepointFlags::kNumber: sym[i] = kCollapsedNumber; break;
        case CodepointFlags::kLetter: sym[i] = kCollapsedLetter; break;
        case CodepointFlags::kPunctuation: sym[i] = kCollapsedPunct; break;
        case CodepointFlags::kMark: sym[i] = kCollapsedMark; break;
        case CodepointFlags::kSymbol: sym[i] = kCollapsedSymbol; break;
        default: sym[i] = kCollapsedOther; break;
      }
    }
  }

  std::vector<size_t> out;
  out.reserve(segment_lengths.size());
  size_t start = 0;
  for (const size_t len : segment_lengths) {
    const size_t end = start + len;
    Matcher matcher(sym.data(), start, end);
    size_t last = start;
    size_t match_end = 0;
    auto accept = [&](size_t p) {
      match_end = p;
      return true;
    };
    for (size_t pos = start; pos < end;) {
      if (matcher.Match(root_, pos, Cont(accept)) && match_end > pos) {
        if (pos > last) out.push_back(pos - last);
        out.push_back(match_end - pos);
        last = pos = match_end;
      } else {
        ++pos;  // no (non-empty) match here; the text stays in the gap
      }
    }
    if (end > last) out.push_back(end - last);
    start = end;
  }
  return out;
}

}  // namespace tandem::engine
