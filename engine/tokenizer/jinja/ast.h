// The parsed form of a template: expressions and statements, each with its
// source position. Built by the parser, read by the renderer; immutable
// after parsing.
#ifndef TANDEM_ENGINE_TOKENIZER_JINJA_AST_H_
#define TANDEM_ENGINE_TOKENIZER_JINJA_AST_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/tokenizer/jinja/lexer.h"
#include "engine/tokenizer/jinja/value.h"

namespace tandem::engine::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    kLiteral,   // literal
    kName,      // name
    kList,      // [kids...] (tuples too)
    kDict,      // keyword: key expr in kids[2i], value in kids[2i+1]
    kAttr,      // kids[0].name
    kItem,      // kids[0][kids[1]]
    kSlice,     // kids[0][kids[1]:kids[2]:kids[3]], absent parts null
    kCall,      // kids[0](kids[1:]..., keyword...)
    kFilter,    // name(kids[0], kids[1:]..., keyword...)
    kTest,      // kids[0] is [not] name(kids[1:]...)
    kNot,       // not kids[0]
    kNeg,       // -kids[0]
    kPos,       // +kids[0]
    kBinary,    // kids[0] op kids[1]; op in name: + - * / // % ** ~
    kCompare,   // kids[0] ops[0] kids[1] ops[1] kids[2] ... (chained)
    kAnd,       // kids[0] and kids[1]
    kOr,        // kids[0] or kids[1]
    kTernary,   // kids[0] if kids[1] else kids[2] (kids[2] may be null)
  };
  Kind kind;
  Pos pos;
  Value literal;
  std::string name;
  bool negated = false;  // `is not`
  std::vector<ExprPtr> kids;
  std::vector<std::pair<std::string, ExprPtr>> keyword;
  std::vector<std::string> ops;
};

struct Node;
using NodePtr = std::unique_ptr<Node>;
using Body = std::vector<NodePtr>;

struct Node {
  enum class Kind {
    kText,      // text
    kOutput,    // {{ expr }}
    kIf,        // branches; else_body
    kFor,       // for targets in expr [if cond]: body else else_body
    kSet,       // set targets = expr, or set targets[0].attr = expr
    kSetBlock,  // {% set targets[0] %}body{% endset %}
    kMacro,     // macro name(params) body
    kBreak,
    kContinue,
    kFilterBlock,  // {% filter name(args) %}body: expr is the filter applied to `caller`
    kScope,        // a body with no semantics of its own ({% generation %})
  };
  Kind kind;
  Pos pos;
  std::string text;
  ExprPtr expr;
  ExprPtr cond;
  std::vector<std::pair<ExprPtr, Body>> branches;
  Body body;
  Body else_body;
  std::vector<std::string> targets;
  std::string attr;  // set ns.attr = ...
  std::string name;
  std::vector<std::pair<std::string, ExprPtr>> params;  // macro parameters, default or null
};

}  // namespace tandem::engine::jinja

#endif  // TANDEM_ENGINE_TOKENIZER_JINJA_AST_H_
