#include "engine/tokenizer/jinja/expression_parser.h"

#include <cstdlib>
#include <initializer_list>

namespace tandem::engine::jinja {

ExprPtr ExpressionParser::Make(Expr::Kind kind, Pos pos) {
  auto e = std::make_unique<Expr>();
  e->kind = kind;
  e->pos = pos;
  return e;
}

absl::StatusOr<ExprPtr> ExpressionParser::ParseTupleOrExpression() {
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

absl::StatusOr<ExprPtr> ExpressionParser::ParseExpression(bool with_ternary) {
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

absl::StatusOr<ExprPtr> ExpressionParser::ParseOr() {
  return ParseLeftChain("or", Expr::Kind::kOr, &ExpressionParser::ParseAnd);
}

absl::StatusOr<ExprPtr> ExpressionParser::ParseAnd() {
  return ParseLeftChain("and", Expr::Kind::kAnd, &ExpressionParser::ParseNot);
}

absl::StatusOr<ExprPtr> ExpressionParser::ParseLeftChain(
    const char* op, Expr::Kind kind, absl::StatusOr<ExprPtr> (ExpressionParser::*operand)()) {
  absl::StatusOr<ExprPtr> left = (this->*operand)();
  Chain chain(&depth_);
  while (left.ok() && IsName(op)) {
    if (!chain.Add()) return Error("expression nested too deeply");
    const Pos pos = Cur().pos;
    ++i_;
    absl::StatusOr<ExprPtr> right = (this->*operand)();
    if (!right.ok()) return right;
    ExprPtr e = Make(kind, pos);
    e->kids.push_back(std::move(*left));
    e->kids.push_back(std::move(*right));
    left = std::move(e);
  }
  return left;
}

absl::StatusOr<ExprPtr> ExpressionParser::ParseNot() {
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

absl::StatusOr<ExprPtr> ExpressionParser::ParseCompare() {
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

template <typename Next>
absl::StatusOr<ExprPtr> ExpressionParser::ParseBinary(std::initializer_list<std::string_view> ops, Next next) {
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

absl::StatusOr<ExprPtr> ExpressionParser::ParseMath1() { return ParseBinary({"+", "-"}, &ExpressionParser::ParseConcat); }

absl::StatusOr<ExprPtr> ExpressionParser::ParseConcat() { return ParseBinary({"~"}, &ExpressionParser::ParseMath2); }

absl::StatusOr<ExprPtr> ExpressionParser::ParseMath2() { return ParseBinary({"*", "/", "//", "%"}, &ExpressionParser::ParsePow); }

absl::StatusOr<ExprPtr> ExpressionParser::ParsePow() { return ParseBinary({"**"}, &ExpressionParser::ParseUnaryFiltered); }

absl::StatusOr<ExprPtr> ExpressionParser::ParseUnaryFiltered() { return ParseUnary(true); }

absl::StatusOr<ExprPtr> ExpressionParser::ParseUnary(bool with_filter) {
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

absl::StatusOr<ExprPtr> ExpressionParser::ParsePrimary() {
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

absl::StatusOr<ExprPtr> ExpressionParser::ParsePostfix(ExprPtr node) {
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

absl::Status ExpressionParser::ParseArgs(Expr* e) {
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

absl::StatusOr<ExprPtr> ExpressionParser::ParseCall(ExprPtr callee) {
  ExprPtr e = Make(Expr::Kind::kCall, callee->pos);
  e->kids.push_back(std::move(callee));
  if (absl::Status s = ParseArgs(e.get()); !s.ok()) return s;
  return e;
}

absl::StatusOr<ExprPtr> ExpressionParser::ParseFilter(ExprPtr subject) {
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

absl::StatusOr<ExprPtr> ExpressionParser::ParseFilterExpr(ExprPtr node) {
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

}  // namespace tandem::engine::jinja
