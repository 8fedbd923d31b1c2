#include "engine/tokenizer/jinja/lexer.h"

#include <algorithm>
#include <cstring>

#include "engine/tokenizer/jinja/value.h"
#include "engine/tokenizer/unicode.h"

namespace tandem::engine::jinja {
namespace {

bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }
bool IsNameStart(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool IsDigit(char c) { return c >= '0' && c <= '9'; }

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Python's "unicode-escape" decoding of a string literal's body, as jinja2
// applies it (a code point past U+10FFFF, which Python refuses, becomes
// U+FFFD).
std::string Unescape(std::string_view body) {
  std::string out;
  for (size_t i = 0; i < body.size(); ++i) {
    const char c = body[i];
    if (c != '\\' || i + 1 >= body.size()) {
      out.push_back(c);
      continue;
    }
    const char e = body[++i];
    switch (e) {
      case '\n': break;
      case '\\': out.push_back('\\'); break;
      case '\'': out.push_back('\''); break;
      case '"': out.push_back('"'); break;
      case 'a': out.push_back('\a'); break;
      case 'b': out.push_back('\b'); break;
      case 'f': out.push_back('\f'); break;
      case 'n': out.push_back('\n'); break;
      case 'r': out.push_back('\r'); break;
      case 't': out.push_back('\t'); break;
      case 'v': out.push_back('\v'); break;
      case 'x':
      case 'u':
      case 'U': {
        const size_t n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
        uint32_t cp = 0;
        bool ok = i + n < body.size();
        for (size_t k = 1; ok && k <= n; ++k) {
          const int h = i + k < body.size() ? HexValue(body[i + k]) : -1;
          if (h < 0) ok = false;
          else cp = cp * 16 + static_cast<uint32_t>(h);
        }
        if (!ok) {
          out.push_back('\\');
          out.push_back(e);
          break;
        }
        AppendUtf8(cp, &out);
        i += n;
        break;
      }
      default:
        if (e >= '0' && e <= '7') {
          uint32_t cp = static_cast<uint32_t>(e - '0');
          for (int k = 0; k < 2 && i + 1 < body.size() && body[i + 1] >= '0' && body[i + 1] <= '7'; ++k) {
            cp = cp * 8 + static_cast<uint32_t>(body[++i] - '0');
          }
          AppendUtf8(cp, &out);
        } else {
          out.push_back('\\');
          out.push_back(e);
        }
    }
  }
  return out;
}

class Lexer {
 public:
  explicit Lexer(std::string source) : src_(std::move(source)) {
    for (size_t i = 0; i < src_.size(); ++i) {
      if (src_[i] == '\n') line_starts_.push_back(i + 1);
    }
  }

  absl::StatusOr<std::vector<Token>> Run() {
    size_t pos = 0;
    bool line_starting = true;
    while (pos < src_.size()) {
      const size_t tag = FindTag(pos);
      std::string text = src_.substr(pos, (tag == std::string::npos ? src_.size() : tag) - pos);
      if (tag == std::string::npos) {
        Emit(Token::Kind::kText, std::move(text), pos);
        break;
      }
      const char type = src_[tag + 1];  // '{', '%' or '#'
      const char sign = tag + 2 < src_.size() ? src_[tag + 2] : '\0';
      if (sign == '-') {
        while (!text.empty() && IsSpace(text.back())) text.pop_back();
      } else if (sign != '+' && type != '{') {
        // lstrip_blocks: the spaces between a line's start and a block tag.
        const size_t nl = text.rfind('\n');
        const size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
        if (l_pos > 0 || line_starting) {
          bool blank = true;
          for (size_t i = l_pos; i < text.size(); ++i) {
            if (!IsSpace(text[i])) blank = false;
          }
          if (blank) text.resize(l_pos);
        }
      }
      if (!text.empty()) Emit(Token::Kind::kText, std::move(text), pos);
      size_t after = tag + 2 + ((sign == '-' || sign == '+') ? 1 : 0);
      if (type == '#') {
        const size_t end = src_.find("#}", after);
        if (end == std::string::npos) return Error(tag, "unterminated comment");
        pos = end + 2;
        if (end > after && src_[end - 1] == '-') {
          while (pos < src_.size() && IsSpace(src_[pos])) ++pos;
          line_starting = pos > 0 && src_[pos - 1] == '\n';
        } else if (end > after && src_[end - 1] == '+') {
          line_starting = false;
        } else {
          line_starting = pos < src_.size() && src_[pos] == '\n';
          if (line_starting) ++pos;
        }
        continue;
      }
      absl::StatusOr<size_t> next = LexTag(type == '{', tag, after, &line_starting);
      if (!next.ok()) return next.status();
      pos = *next;
    }
    Emit(Token::Kind::kEof, "", src_.size());
    return std::move(tokens_);
  }

 private:
  size_t FindTag(size_t from) const {
    size_t p = from;
    while ((p = src_.find('{', p)) != std::string::npos) {
      if (p + 1 < src_.size() && (src_[p + 1] == '{' || src_[p + 1] == '%' || src_[p + 1] == '#')) return p;
      ++p;
    }
    return std::string::npos;
  }

  Pos PosOf(size_t offset) const {
    const auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), offset);
    const size_t line = static_cast<size_t>(it - line_starts_.begin());
    return Pos{static_cast<int>(line), static_cast<int>(offset - line_starts_[line - 1]) + 1};
  }

  absl::Status Error(size_t offset, std::string_view what) const {
    const Pos p = PosOf(offset);
    return absl::InvalidArgumentError(Cat(p.line, ":", p.column, ": ", what));
  }

  void Emit(Token::Kind kind, std::string text, size_t offset) {
    tokens_.push_back(Token{kind, std::move(text), PosOf(offset)});
  }

  // The tokens of one {{ }} or {% %} tag from `pos` (just past its opener);
  // returns the offset after its closer and the whitespace it consumes.
  absl::StatusOr<size_t> LexTag(bool variable, size_t tag, size_t pos, bool* line_starting) {
    Emit(variable ? Token::Kind::kVarBegin : Token::Kind::kBlockBegin, "", tag);
    const char close = variable ? '}' : '%';
    int depth = 0;  // open brackets: a closer inside them is an operator
    while (true) {
      while (pos < src_.size() && IsSpace(src_[pos])) ++pos;
      if (pos >= src_.size()) return Error(tag, variable ? "unterminated '{{'" : "unterminated '{%'");
      const char c = src_[pos];
      if (depth == 0) {
        std::string_view rest(src_.data() + pos, src_.size() - pos);
        const std::string closer = std::string(1, close) + "}";
        if (rest.substr(0, 3) == "-" + closer) {
          Emit(variable ? Token::Kind::kVarEnd : Token::Kind::kBlockEnd, "", pos);
          pos += 3;
          while (pos < src_.size() && IsSpace(src_[pos])) ++pos;
          *line_starting = src_[pos - 1] == '\n';
          return pos;
        }
        if (!variable && rest.substr(0, 3) == "+%}") {
          Emit(Token::Kind::kBlockEnd, "", pos);
          *line_starting = false;
          return pos + 3;
        }
        if (rest.substr(0, 2) == closer) {
          Emit(variable ? Token::Kind::kVarEnd : Token::Kind::kBlockEnd, "", pos);
          pos += 2;
          *line_starting = false;
          if (!variable && pos < src_.size() && src_[pos] == '\n') {
            ++pos;  // trim_blocks
            *line_starting = true;
          }
          return pos;
        }
      }
      if (IsNameStart(c)) {
        size_t end = pos;
        while (end < src_.size() && (IsNameStart(src_[end]) || IsDigit(src_[end]))) ++end;
        Emit(Token::Kind::kName, src_.substr(pos, end - pos), pos);
        pos = end;
      } else if (IsDigit(c)) {
        size_t end = pos;
        while (end < src_.size() && (IsDigit(src_[end]) || src_[end] == '_')) ++end;
        bool is_float = false;
        if (end + 1 < src_.size() && src_[end] == '.' && IsDigit(src_[end + 1])) {
          is_float = true;
          ++end;
          while (end < src_.size() && (IsDigit(src_[end]) || src_[end] == '_')) ++end;
        }
        if (end < src_.size() && (src_[end] == 'e' || src_[end] == 'E')) {
          size_t e = end + 1;
          if (e < src_.size() && (src_[e] == '+' || src_[e] == '-')) ++e;
          if (e < src_.size() && IsDigit(src_[e])) {
            is_float = true;
            end = e;
            while (end < src_.size() && IsDigit(src_[end])) ++end;
          }
        }
        std::string num = src_.substr(pos, end - pos);
        num.erase(std::remove(num.begin(), num.end(), '_'), num.end());
        Emit(is_float ? Token::Kind::kFloat : Token::Kind::kInt, std::move(num), pos);
        pos = end;
      } else if (c == '\'' || c == '"') {
        size_t end = pos + 1;
        while (end < src_.size() && src_[end] != c) {
          if (src_[end] == '\\') ++end;
          ++end;
        }
        if (end >= src_.size()) return Error(pos, "unterminated string");
        Emit(Token::Kind::kString, Unescape(std::string_view(src_).substr(pos + 1, end - pos - 1)), pos);
        pos = end + 1;
      } else {
        static constexpr std::string_view kTwo[] = {"//", "**", "==", "!=", "<=", ">="};
        std::string op;
        for (std::string_view two : kTwo) {
          if (src_.compare(pos, 2, two) == 0) op = std::string(two);
        }
        if (op.empty()) {
          if (std::strchr("+-/*%~[](){}<>=.:|,;!", c) == nullptr) {
            return Error(pos, Cat("unexpected character '", std::string(1, c), "'"));
          }
          op = std::string(1, c);
        }
        if (op == "(" || op == "[" || op == "{") ++depth;
        if ((op == ")" || op == "]" || op == "}") && depth > 0) --depth;
        Emit(Token::Kind::kOp, op, pos);
        pos += op.size();
      }
    }
  }

  std::string src_;
  std::vector<size_t> line_starts_ = {0};
  std::vector<Token> tokens_;
};

}  // namespace

absl::StatusOr<std::vector<Token>> Lex(std::string_view source) {
  // jinja2 normalises line endings and drops one trailing newline
  // (keep_trailing_newline is off).
  std::string src;
  src.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      src.push_back('\n');
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      src.push_back(source[i]);
    }
  }
  if (!src.empty() && src.back() == '\n') src.pop_back();
  return Lexer(std::move(src)).Run();
}

}  // namespace tandem::engine::jinja
