#include "engine/tokenizer/jinja/parser.h"

#include <cstdlib>
#include <initializer_list>
#include <utility>

#include "absl/strings/str_cat.h"

namespace tandem::engine::jinja {
namespace {

using K = Token::Kind;

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : t_(std::move(tokens)) {}

  absl::StatusOr<Body> ParseTemplate() {
    Body body;
    std::string end;
    if (absl::Status s = ParseBody({}, &body, &end); !s.ok()) return s;
    return body;
  }

 private:
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

  ExprPtr Make(Expr::Kind kind, Pos pos) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->pos = pos;
    return e;
  }

  // `a, b` on the right of a set is a tuple.
  absl::StatusOr<ExprPtr> ParseTupleOrExpression() {
    const Pos pos = Cur().pos;
    absl::StatusOr<ExprPtr> first = ParseExpression(true);
    if (!first.ok() || !IsOp(",")) return first;
    ExprPtr list = Make(Expr::Kind::kList, pos);
    list->kids.push_back(std::move(*first));
    while (IsOp(",")) {
      ++i_;
      absl::StatusOr<ExprPtr> more = ParseExpression(true);
      if (!more.ok()) return more;
      list->kids.push_back(std::move(*more));
    }
    return list;
  }

  absl::StatusOr<ExprPtr> ParseExpression(bool with_ternary) {
    Nest nest(&depth_);
    if (depth_ > kMaxNesting) return Error("expression nested too deeply");
    absl::StatusOr<ExprPtr> e = ParseOr();
    if (!e.ok()) return e;
    ExprPtr expr = std::move(*e);
    while (with_ternary && IsName("if")) {
      const Pos pos = Cur().pos;
      ++i_;
      absl::StatusOr<ExprPtr> cond = ParseOr();
      if (!cond.ok()) return cond;
      ExprPtr t = Make(Expr::Kind::kTernary, pos);
      t->kids.push_back(std::move(expr));
      t->kids.push_back(std::move(*cond));
      if (IsName("else")) {
        ++i_;
        absl::StatusOr<ExprPtr> other = ParseExpression(true);
        if (!other.ok()) return other;
        t->kids.push_back(std::move(*other));
      } else {
        t->kids.push_back(nullptr);
      }
      expr = std::move(t);
    }
    return expr;
  }

  absl::StatusOr<ExprPtr> ParseOr() {
    absl::StatusOr<ExprPtr> left = ParseAnd();
    Chain chain(&depth_);
    while (left.ok() && IsName("or")) {
      if (!chain.Add()) return Error("expression nested too deeply");
      const Pos pos = Cur().pos;
      ++i_;
      absl::StatusOr<ExprPtr> right = ParseAnd();
      if (!right.ok()) return right;
      ExprPtr e = Make(Expr::Kind::kOr, pos);
      e->kids.push_back(std::move(*left));
      e->kids.push_back(std::move(*right));
      left = std::move(e);
    }
    return left;
  }

  absl::StatusOr<ExprPtr> ParseAnd() {
    absl::StatusOr<ExprPtr> left = ParseNot();
    Chain chain(&depth_);
    while (left.ok() && IsName("and")) {
      if (!chain.Add()) return Error("expression nested too deeply");
      const Pos pos = Cur().pos;
      ++i_;
      absl::StatusOr<ExprPtr> right = ParseNot();
      if (!right.ok()) return right;
      ExprPtr e = Make(Expr::Kind::kAnd, pos);
      e->kids.push_back(std::move(*left));
      e->kids.push_back(std::move(*right));
      left = std::move(e);
    }
    return left;
  }

  absl::StatusOr<ExprPtr> ParseNot() {
    Nest nest(&depth_);
    if (depth_ > kMaxNesting) return Error("expression nested too deeply");
    if (IsName("not")) {
      const Pos pos = Cur().pos;
      ++i_;
      absl::StatusOr<ExprPtr> inner = ParseNot();
      if (!inner.ok()) return inner;
      ExprPtr e = Make(Expr::Kind::kNot, pos);
      e->kids.push_back(std::move(*inner));
      return e;
    }
    return ParseCompare();
  }

  absl::StatusOr<ExprPtr> ParseCompare() {
    const Pos pos = Cur().pos;
    absl::StatusOr<ExprPtr> first = ParseMath1();
    if (!first.ok()) return first;
    ExprPtr cmp;
    while (true) {
      std::string op;
      if (Cur().kind == K::kOp && (Cur().text == "==" || Cur().text == "!=" || Cur().text == "<" ||
                                   Cur().text == ">" || Cur().text == "<=" || Cur().text == ">=")) {
        op = Cur().text;
        ++i_;
      } else if (IsName("in")) {
        op = "in";
        ++i_;
      } else if (IsName("not") && Peek().kind == K::kName && Peek().text == "in") {
        op = "not in";
        i_ += 2;
      } else {
        break;
      }
      absl::StatusOr<ExprPtr> right = ParseMath1();
      if (!right.ok()) return right;
      if (!cmp) {
        cmp = Make(Expr::Kind::kCompare, pos);
        cmp->kids.push_back(std::move(*first));
      }
      cmp->ops.push_back(op);
      cmp->kids.push_back(std::move(*right));
    }
    if (cmp) return cmp;
    return first;
  }

  // One level of left-associative binary operators.
  template <typename Next>
  absl::StatusOr<ExprPtr> ParseBinary(std::initializer_list<std::string_view> ops, Next next) {
    absl::StatusOr<ExprPtr> left = (this->*next)();
    Chain chain(&depth_);
    while (left.ok() && Cur().kind == K::kOp) {
      bool match = false;
      for (std::string_view op : ops) match = match || Cur().text == op;
      if (!match) break;
      if (!chain.Add()) return Error("expression nested too deeply");
      ExprPtr e = Make(Expr::Kind::kBinary, Cur().pos);
      e->name = Cur().text;
      ++i_;
      absl::StatusOr<ExprPtr> right = (this->*next)();
      if (!right.ok()) return right;
      e->kids.push_back(std::move(*left));
      e->kids.push_back(std::move(*right));
      left = std::move(e);
    }
    return left;
  }

  absl::StatusOr<ExprPtr> ParseMath1() { return ParseBinary({"+", "-"}, &Parser::ParseConcat); }
  absl::StatusOr<ExprPtr> ParseConcat() { return ParseBinary({"~"}, &Parser::ParseMath2); }
  absl::StatusOr<ExprPtr> ParseMath2() { return ParseBinary({"*", "/", "//", "%"}, &Parser::ParsePow); }
  absl::StatusOr<ExprPtr> ParsePow() { return ParseBinary({"**"}, &Parser::ParseUnaryFiltered); }
  absl::StatusOr<ExprPtr> ParseUnaryFiltered() { return ParseUnary(true); }

  absl::StatusOr<ExprPtr> ParseUnary(bool with_filter) {
    Nest nest(&depth_);
    if (depth_ > kMaxNesting) return Error("expression nested too deeply");
    ExprPtr node;
    if (IsOp("-") || IsOp("+")) {
      ExprPtr e = Make(IsOp("-") ? Expr::Kind::kNeg : Expr::Kind::kPos, Cur().pos);
      ++i_;
      absl::StatusOr<ExprPtr> inner = ParseUnary(false);
      if (!inner.ok()) return inner;
      e->kids.push_back(std::move(*inner));
      node = std::move(e);
    } else {
      absl::StatusOr<ExprPtr> p = ParsePrimary();
      if (!p.ok()) return p;
      node = std::move(*p);
    }
    absl::StatusOr<ExprPtr> post = ParsePostfix(std::move(node));
    if (!post.ok() || !with_filter) return post;
    return ParseFilterExpr(std::move(*post));
  }

  absl::StatusOr<ExprPtr> ParsePrimary() {
    const Token& tok = Cur();
    if (tok.kind == K::kName) {
      static const std::pair<std::string_view, int> kLits[] = {
          {"true", 1}, {"True", 1}, {"false", 0}, {"False", 0}, {"none", 2}, {"None", 2}};
      for (const auto& [word, v] : kLits) {
        if (tok.text == word) {
          ExprPtr e = Make(Expr::Kind::kLiteral, tok.pos);
          e->literal = v == 2 ? Value::None() : Value(v == 1);
          ++i_;
          return e;
        }
      }
      ExprPtr e = Make(Expr::Kind::kName, tok.pos);
      e->name = tok.text;
      ++i_;
      return e;
    }
    if (tok.kind == K::kString) {
      ExprPtr e = Make(Expr::Kind::kLiteral, tok.pos);
      std::string s;
      while (Cur().kind == K::kString) s += t_[i_++].text;
      e->literal = Value(std::move(s));
      return e;
    }
    if (tok.kind == K::kInt || tok.kind == K::kFloat) {
      ExprPtr e = Make(Expr::Kind::kLiteral, tok.pos);
      if (tok.kind == K::kInt) {
        e->literal = Value(static_cast<int64_t>(std::strtoll(tok.text.c_str(), nullptr, 10)));
      } else {
        e->literal = Value(std::strtod(tok.text.c_str(), nullptr));
      }
      ++i_;
      return e;
    }
    if (IsOp("(")) {
      ++i_;
      if (IsOp(")")) {
        ++i_;
        ExprPtr empty = Make(Expr::Kind::kList, tok.pos);
        empty->name = "tuple";
        return empty;
      }
      absl::StatusOr<ExprPtr> inner = ParseExpression(true);
      if (!inner.ok()) return inner;
      if (IsOp(",")) {
        ExprPtr list = Make(Expr::Kind::kList, tok.pos);
        list->name = "tuple";
        list->kids.push_back(std::move(*inner));
        while (IsOp(",")) {
          ++i_;
          if (IsOp(")")) break;
          absl::StatusOr<ExprPtr> more = ParseExpression(true);
          if (!more.ok()) return more;
          list->kids.push_back(std::move(*more));
        }
        inner = std::move(list);
      }
      if (absl::Status s = ExpectOp(")"); !s.ok()) return s;
      return inner;
    }
    if (IsOp("[")) {
      ++i_;
      ExprPtr list = Make(Expr::Kind::kList, tok.pos);
      while (!IsOp("]")) {
        absl::StatusOr<ExprPtr> item = ParseExpression(true);
        if (!item.ok()) return item;
        list->kids.push_back(std::move(*item));
        if (!IsOp(",")) break;
        ++i_;
      }
      if (absl::Status s = ExpectOp("]"); !s.ok()) return s;
      return list;
    }
    if (IsOp("{")) {
      ++i_;
      ExprPtr dict = Make(Expr::Kind::kDict, tok.pos);
      while (!IsOp("}")) {
        absl::StatusOr<ExprPtr> key = ParseExpression(true);
        if (!key.ok()) return key;
        if (absl::Status s = ExpectOp(":"); !s.ok()) return s;
        absl::StatusOr<ExprPtr> value = ParseExpression(true);
        if (!value.ok()) return value;
        dict->kids.push_back(std::move(*key));
        dict->kids.push_back(std::move(*value));
        if (!IsOp(",")) break;
        ++i_;
      }
      if (absl::Status s = ExpectOp("}"); !s.ok()) return s;
      return dict;
    }
    return Error("expected an expression");
  }

  absl::StatusOr<ExprPtr> ParsePostfix(ExprPtr node) {
    Chain chain(&depth_);
    while (true) {
      if (!chain.Add()) return Error("expression nested too deeply");
      if (IsOp(".")) {
        const Pos pos = Cur().pos;
        ++i_;
        if (Cur().kind == K::kInt) {
          ExprPtr e = Make(Expr::Kind::kItem, pos);
          e->kids.push_back(std::move(node));
          ExprPtr idx = Make(Expr::Kind::kLiteral, Cur().pos);
          idx->literal = Value(static_cast<int64_t>(std::strtoll(Cur().text.c_str(), nullptr, 10)));
          ++i_;
          e->kids.push_back(std::move(idx));
          node = std::move(e);
          continue;
        }
        absl::StatusOr<std::string> name = ExpectName();
        if (!name.ok()) return name.status();
        ExprPtr e = Make(Expr::Kind::kAttr, pos);
        e->name = *name;
        e->kids.push_back(std::move(node));
        node = std::move(e);
      } else if (IsOp("[")) {
        const Pos pos = Cur().pos;
        ++i_;
        ExprPtr parts[3];
        int part = 0;
        bool slice = false;
        while (true) {
          if (IsOp(":")) {
            slice = true;
            ++i_;
            if (++part > 2) return Error("too many ':' in a slice");
            continue;
          }
          if (IsOp("]")) break;
          if (parts[part]) return Error("expected ']'");
          absl::StatusOr<ExprPtr> e = ParseExpression(true);
          if (!e.ok()) return e;
          parts[part] = std::move(*e);
        }
        ++i_;
        ExprPtr e = Make(slice ? Expr::Kind::kSlice : Expr::Kind::kItem, pos);
        e->kids.push_back(std::move(node));
        if (!slice && !parts[0]) return ErrorAt(pos, "expected a subscript");
        e->kids.push_back(std::move(parts[0]));
        if (slice) {
          e->kids.push_back(std::move(parts[1]));
          e->kids.push_back(std::move(parts[2]));
        }
        node = std::move(e);
      } else if (IsOp("(")) {
        absl::StatusOr<ExprPtr> call = ParseCall(std::move(node));
        if (!call.ok()) return call;
        node = std::move(*call);
      } else {
        return node;
      }
    }
  }

  // Arguments in parentheses into `e` (positional after `skip` kids).
  absl::Status ParseArgs(Expr* e) {
    if (absl::Status s = ExpectOp("("); !s.ok()) return s;
    while (!IsOp(")")) {
      if (Cur().kind == K::kName && Peek().kind == K::kOp && Peek().text == "=") {
        std::string key = Cur().text;
        i_ += 2;
        absl::StatusOr<ExprPtr> v = ParseExpression(true);
        if (!v.ok()) return v.status();
        e->keyword.emplace_back(std::move(key), std::move(*v));
      } else {
        absl::StatusOr<ExprPtr> v = ParseExpression(true);
        if (!v.ok()) return v.status();
        e->kids.push_back(std::move(*v));
      }
      if (!IsOp(",")) break;
      ++i_;
    }
    return ExpectOp(")");
  }

  absl::StatusOr<ExprPtr> ParseCall(ExprPtr callee) {
    ExprPtr e = Make(Expr::Kind::kCall, callee->pos);
    e->kids.push_back(std::move(callee));
    if (absl::Status s = ParseArgs(e.get()); !s.ok()) return s;
    return e;
  }

  absl::StatusOr<ExprPtr> ParseFilter(ExprPtr subject) {
    ExprPtr e = Make(Expr::Kind::kFilter, Cur().pos);
    absl::StatusOr<std::string> name = ExpectName();
    if (!name.ok()) return name.status();
    e->name = *name;
    e->kids.push_back(std::move(subject));
    if (IsOp("(")) {
      if (absl::Status s = ParseArgs(e.get()); !s.ok()) return s;
    }
    return e;
  }

  absl::StatusOr<ExprPtr> ParseFilterExpr(ExprPtr node) {
    Chain chain(&depth_);
    while (true) {
      if (!chain.Add()) return Error("expression nested too deeply");
      if (IsOp("|")) {
        ++i_;
        absl::StatusOr<ExprPtr> f = ParseFilter(std::move(node));
        if (!f.ok()) return f;
        node = std::move(*f);
      } else if (IsName("is")) {
        ExprPtr e = Make(Expr::Kind::kTest, Cur().pos);
        ++i_;
        if (IsName("not")) {
          e->negated = true;
          ++i_;
        }
        absl::StatusOr<std::string> name = ExpectName();
        if (!name.ok()) return name.status();
        e->name = *name;
        e->kids.push_back(std::move(node));
        if (IsOp("(")) {
          if (absl::Status s = ParseArgs(e.get()); !s.ok()) return s;
        } else if ((Cur().kind == K::kName && Cur().text != "else" && Cur().text != "or" &&
                    Cur().text != "and" && Cur().text != "if" && Cur().text != "in" &&
                    Cur().text != "not" && Cur().text != "is") ||
                   Cur().kind == K::kString || Cur().kind == K::kInt || Cur().kind == K::kFloat ||
                   IsOp("[") || IsOp("{")) {
          absl::StatusOr<ExprPtr> arg = ParsePrimary();
          if (!arg.ok()) return arg;
          absl::StatusOr<ExprPtr> post = ParsePostfix(std::move(*arg));
          if (!post.ok()) return post;
          e->kids.push_back(std::move(*post));
        }
        node = std::move(e);
      } else if (IsOp("(")) {
        absl::StatusOr<ExprPtr> call = ParseCall(std::move(node));
        if (!call.ok()) return call;
        node = std::move(*call);
      } else {
        return node;
      }
    }
  }

  std::vector<Token> t_;
  size_t i_ = 0;
  int depth_ = 0;
};

}  // namespace

absl::StatusOr<Body> Parse(std::string_view source) {
  absl::StatusOr<std::vector<Token>> tokens = Lex(source);
  if (!tokens.ok()) return tokens.status();
  return Parser(std::move(*tokens)).ParseTemplate();
}

}  // namespace tandem::engine::jinja
