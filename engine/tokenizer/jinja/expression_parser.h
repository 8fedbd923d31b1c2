// Parses the expressions inside a template's tags (jinja2's grammar and
// precedence: conditional, or, and, not, comparisons, + -, ~, * / // %, **,
// unary, then postfix, filters and tests). The statement parser derives
// from it and shares its token cursor. Used by Parse only.
#ifndef TANDEM_ENGINE_TOKENIZER_JINJA_EXPRESSION_PARSER_H_
#define TANDEM_ENGINE_TOKENIZER_JINJA_EXPRESSION_PARSER_H_

#include <algorithm>
#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/tokenizer/jinja/ast.h"
#include "engine/tokenizer/jinja/lexer.h"

namespace tandem::engine::jinja {

class ExpressionParser {
 public:
  explicit ExpressionParser(std::vector<Token> tokens) : t_(std::move(tokens)) {}

 protected:
  using K = Token::Kind;

  const Token& Cur() const { return t_[i_]; }
  const Token& Peek(size_t n = 1) const { return t_[std::min(i_ + n, t_.size() - 1)]; }
  bool IsOp(std::string_view op) const { return Cur().kind == K::kOp && Cur().text == op; }
  bool IsName(std::string_view name) const { return Cur().kind == K::kName && Cur().text == name; }

  absl::Status ErrorAt(Pos p, std::string_view what) const {
    return absl::InvalidArgumentError(Cat(p.line, ":", p.column, ": ", what));
  }
  absl::Status Error(std::string_view what) const {
    std::string got = Cur().kind == K::kEof ? "end of template"
                      : Cur().kind == K::kBlockEnd ? "'%}'"
                      : Cur().kind == K::kVarEnd ? "'}}'"
                                                  : "'" + Cur().text + "'";
    return ErrorAt(Cur().pos, Cat(what, ", got ", got));
  }
  absl::Status ExpectOp(std::string_view op) {
    if (!IsOp(op)) return Error(Cat("expected '", op, "'"));
    ++i_;
    return absl::OkStatus();
  }
  absl::Status ExpectBlockEnd() {
    if (Cur().kind != K::kBlockEnd) return Error("expected '%}'");
    ++i_;
    return absl::OkStatus();
  }
  absl::StatusOr<std::string> ExpectName() {
    if (Cur().kind != K::kName) return Error("expected a name");
    return t_[i_++].text;
  }

  // Nesting deeper than this is refused, so that a hostile template cannot
  // exhaust the stack of the parser or the renderer.
  static constexpr int kMaxNesting = 1000;
  struct Nest {
    explicit Nest(int* depth) : depth_(depth) { ++*depth_; }
    ~Nest() { --*depth_; }
    int* depth_;
  };

  // A chain (`a + b + c`, `x | f | g`, `a.b.c`) deepens the tree one level
  // per link: each link counts against the same limit as nesting.
  struct Chain {
    explicit Chain(int* depth) : depth_(depth) {}
    ~Chain() { *depth_ -= links_; }
    bool Add() {
      ++links_;
      return ++*depth_ <= kMaxNesting;
    }
    int* depth_;
    int links_ = 0;
  };

  ExprPtr Make(Expr::Kind kind, Pos pos);
  // `a, b` on the right of a set is a tuple.
  absl::StatusOr<ExprPtr> ParseTupleOrExpression();
  absl::StatusOr<ExprPtr> ParseExpression(bool with_ternary);
  absl::StatusOr<ExprPtr> ParseOr();
  absl::StatusOr<ExprPtr> ParseAnd();
  // `operand` (op `operand`)*, left-associative, as `kind` nodes ("or",
  // "and").
  absl::StatusOr<ExprPtr> ParseLeftChain(const char* op, Expr::Kind kind,
                                         absl::StatusOr<ExprPtr> (ExpressionParser::*operand)());
  absl::StatusOr<ExprPtr> ParseNot();
  absl::StatusOr<ExprPtr> ParseCompare();
  // One level of left-associative binary operators.
  template <typename Next>
  absl::StatusOr<ExprPtr> ParseBinary(std::initializer_list<std::string_view> ops, Next next);
  absl::StatusOr<ExprPtr> ParseMath1();
  absl::StatusOr<ExprPtr> ParseConcat();
  absl::StatusOr<ExprPtr> ParseMath2();
  absl::StatusOr<ExprPtr> ParsePow();
  absl::StatusOr<ExprPtr> ParseUnaryFiltered();
  absl::StatusOr<ExprPtr> ParseUnary(bool with_filter);
  absl::StatusOr<ExprPtr> ParsePrimary();
  absl::StatusOr<ExprPtr> ParsePostfix(ExprPtr node);
  // Arguments in parentheses into `e`: positional as kids, then keyword.
  absl::Status ParseArgs(Expr* e);
  absl::StatusOr<ExprPtr> ParseCall(ExprPtr callee);
  absl::StatusOr<ExprPtr> ParseFilter(ExprPtr subject);
  absl::StatusOr<ExprPtr> ParseFilterExpr(ExprPtr node);

  std::vector<Token> t_;
  size_t i_ = 0;
  int depth_ = 0;
};

}  // namespace tandem::engine::jinja

#endif  // TANDEM_ENGINE_TOKENIZER_JINJA_EXPRESSION_PARSER_H_
