#include "engine/tokenizer/jinja/parser.h"

#include <initializer_list>
#include <utility>

#include "engine/tokenizer/jinja/expression_parser.h"

namespace tandem::engine::jinja {
namespace {

class Parser : public ExpressionParser {
 public:
  explicit Parser(std::vector<Token> tokens) : ExpressionParser(std::move(tokens)) {}

  absl::StatusOr<Body> ParseTemplate() {
    Body body;
    std::string end;
    if (absl::Status s = ParseBody({}, &body, &end); !s.ok()) return s;
    return body;
  }

 private:
  // Statements until a block tag whose keyword is in `ends` (consumed up to
  // and including the keyword; `*end` names it) or the end of the template.
  absl::Status ParseBody(std::initializer_list<std::string_view> ends, Body* body, std::string* end) {
    while (true) {
      const Token& tok = Cur();
      if (tok.kind == K::kEof) {
        if (ends.size() == 0) return absl::OkStatus();
        return ErrorAt(tok.pos, Cat("unexpected end of template, expected '{% ",
                                             *ends.begin(), " %}'"));
      }
      if (tok.kind == K::kText) {
        auto n = std::make_unique<Node>();
        n->kind = Node::Kind::kText;
        n->pos = tok.pos;
        n->text = tok.text;
        body->push_back(std::move(n));
        ++i_;
        continue;
      }
      if (tok.kind == K::kVarBegin) {
        ++i_;
        auto n = std::make_unique<Node>();
        n->kind = Node::Kind::kOutput;
        n->pos = tok.pos;
        absl::StatusOr<ExprPtr> e = ParseExpression(true);
        if (!e.ok()) return e.status();
        n->expr = std::move(*e);
        if (Cur().kind != K::kVarEnd) return Error("expected '}}'");
        ++i_;
        body->push_back(std::move(n));
        continue;
      }
      if (tok.kind != K::kBlockBegin) return Error("unexpected token");
      ++i_;
      if (Cur().kind != K::kName) return Error("expected a statement");
      const std::string kw = Cur().text;
      for (std::string_view e : ends) {
        if (kw == e) {
          ++i_;
          *end = kw;
          return absl::OkStatus();
        }
      }
      absl::StatusOr<NodePtr> stmt = ParseStatement();
      if (!stmt.ok()) return stmt.status();
      body->push_back(std::move(*stmt));
    }
  }

  absl::StatusOr<NodePtr> ParseStatement() {
    Nest nest(&depth_);
    if (depth_ > kMaxNesting) return Error("statements nested too deeply");
    const Token kw = Cur();
    ++i_;
    auto n = std::make_unique<Node>();
    n->pos = kw.pos;
    std::string end;
    if (kw.text == "if") {
      n->kind = Node::Kind::kIf;
      while (true) {
        absl::StatusOr<ExprPtr> cond = ParseExpression(true);
        if (!cond.ok()) return cond.status();
        if (absl::Status s = ExpectBlockEnd(); !s.ok()) return s;
        Body body;
        if (absl::Status s = ParseBody({"elif", "else", "endif"}, &body, &end); !s.ok()) return s;
        n->branches.emplace_back(std::move(*cond), std::move(body));
        if (end != "elif") break;
      }
      if (end == "else") {
        if (absl::Status s = ExpectBlockEnd(); !s.ok()) return s;
        if (absl::Status s = ParseBody({"endif"}, &n->else_body, &end); !s.ok()) return s;
      }
      if (absl::Status s = ExpectBlockEnd(); !s.ok()) return s;
      return n;
    }
    if (kw.text == "for") {
      n->kind = Node::Kind::kFor;
      if (absl::Status s = ParseTargets(&n->targets); !s.ok()) return s;
      if (!IsName("in")) return Error("expected 'in'");
      ++i_;
      absl::StatusOr<ExprPtr> iter = ParseExpression(false);
      if (!iter.ok()) return iter.status();
      n->expr = std::move(*iter);
      if (IsName("if")) {
        ++i_;
        absl::StatusOr<ExprPtr> cond = ParseExpression(false);
        if (!cond.ok()) return cond.status();
        n->cond = std::move(*cond);
      }
      if (IsName("recursive")) return Error("recursive loops are not supported");
      if (absl::Status s = ExpectBlockEnd(); !s.ok()) return s;
      if (absl::Status s = ParseBody({"else", "endfor"}, &n->body, &end); !s.ok()) return s;
      if (end == "else") {
        if (absl::Status s = ExpectBlockEnd(); !s.ok()) return s;
        if (absl::Status s = ParseBody({"endfor"}, &n->else_body, &end); !s.ok()) return s;
      }
      if (absl::Status s = ExpectBlockEnd(); !s.ok()) return s;
      return n;
    }
    if (kw.text == "set") {
      absl::StatusOr<std::string> name = ExpectName();
      if (!name.ok()) return name.status();
      n->targets.push_back(*name);
      if (IsOp(".")) {
        ++i_;
        absl::StatusOr<std::string> attr = ExpectName();
        if (!attr.ok()) return attr.status();
        n->attr = *attr;
      } else {
        while (IsOp(",")) {
          ++i_;
          absl::StatusOr<std::string> more = ExpectName();
          if (!more.ok()) return more.status();
          n->targets.push_back(*more);
        }
      }
      if (Cur().kind == K::kBlockEnd && n->attr.empty() && n->targets.size() == 1) {
        ++i_;
        n->kind = Node::Kind::kSetBlock;
        if (absl::Status s = ParseBody({"endset"}, &n->body, &end); !s.ok()) return s;
        if (absl::Status s = ExpectBlockEnd(); !s.ok()) return s;
        return n;
      }
      n->kind = Node::Kind::kSet;
      if (absl::Status s = ExpectOp("="); !s.ok()) return s;
      absl::StatusOr<ExprPtr> value = ParseTupleOrExpression();
      if (!value.ok()) return value.status();
      n->expr = std::move(*value);
      if (absl::Status s = ExpectBlockEnd(); !s.ok()) return s;
      return n;
    }
    if (kw.text == "macro") {
      n->kind = Node::Kind::kMacro;
      absl::StatusOr<std::string> name = ExpectName();
      if (!name.ok()) return name.status();
      n->name = *name;
      if (absl::Status s = ExpectOp("("); !s.ok()) return s;
      while (!IsOp(")")) {
        absl::StatusOr<std::string> param = ExpectName();
        if (!param.ok()) return param.status();
        ExprPtr def;
        if (IsOp("=")) {
          ++i_;
          absl::StatusOr<ExprPtr> d = ParseExpression(true);
          if (!d.ok()) return d.status();
          def = std::move(*d);
        }
        n->params.emplace_back(*param, std::move(def));
        if (!IsOp(",")) break;
        ++i_;
      }
      if (absl::Status s = ExpectOp(")"); !s.ok()) return s;
      if (absl::Status s = ExpectBlockEnd(); !s.ok()) return s;
      if (absl::Status s = ParseBody({"endmacro"}, &n->body, &end); !s.ok()) return s;
      if (Cur().kind == K::kName) ++i_;  // {% endmacro name %}
      if (absl::Status s = ExpectBlockEnd(); !s.ok()) return s;
      return n;
    }
    if (kw.text == "break" || kw.text == "continue") {
      n->kind = kw.text == "break" ? Node::Kind::kBreak : Node::Kind::kContinue;
      if (absl::Status s = ExpectBlockEnd(); !s.ok()) return s;
      return n;
    }
    if (kw.text == "filter") {
      n->kind = Node::Kind::kFilterBlock;
      auto caller = std::make_unique<Expr>();
      caller->kind = Expr::Kind::kLiteral;
      caller->pos = kw.pos;
      absl::StatusOr<ExprPtr> f = ParseFilter(std::move(caller));
      if (!f.ok()) return f.status();
      n->expr = std::move(*f);
      if (absl::Status s = ExpectBlockEnd(); !s.ok()) return s;
      if (absl::Status s = ParseBody({"endfilter"}, &n->body, &end); !s.ok()) return s;
      if (absl::Status s = ExpectBlockEnd(); !s.ok()) return s;
      return n;
    }
    if (kw.text == "generation") {
      n->kind = Node::Kind::kScope;
      if (absl::Status s = ExpectBlockEnd(); !s.ok()) return s;
      if (absl::Status s = ParseBody({"endgeneration"}, &n->body, &end); !s.ok()) return s;
      if (absl::Status s = ExpectBlockEnd(); !s.ok()) return s;
      return n;
    }
    return ErrorAt(kw.pos, Cat("unknown statement '", kw.text, "'"));
  }

  absl::Status ParseTargets(std::vector<std::string>* targets) {
    const bool paren = IsOp("(");
    if (paren) ++i_;
    while (true) {
      absl::StatusOr<std::string> name = ExpectName();
      if (!name.ok()) return name.status();
      targets->push_back(*name);
      if (!IsOp(",")) break;
      ++i_;
    }
    if (paren) return ExpectOp(")");
    return absl::OkStatus();
  }
};

}  // namespace

absl::StatusOr<Body> Parse(std::string_view source) {
  absl::StatusOr<std::vector<Token>> tokens = Lex(source);
  if (!tokens.ok()) return tokens.status();
  return Parser(std::move(*tokens)).ParseTemplate();
}

}  // namespace tandem::engine::jinja
