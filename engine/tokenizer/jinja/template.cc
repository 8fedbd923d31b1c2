#include "engine/tokenizer/jinja/template.h"

#include <cmath>
#include <ctime>
#include <unordered_map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/tokenizer/jinja/builtins.h"
#include "engine/tokenizer/jinja/parser.h"

namespace tandem::engine::jinja {
namespace {

// Variables of the template, a for loop or a macro call; a lookup walks to
// the parent. jinja2 scopes the same way: a `set` inside a loop or macro
// does not reach outside it, one inside an `if` does.
struct Scope {
  std::shared_ptr<Scope> parent;
  std::unordered_map<std::string, Value> vars;

  const Value* Find(const std::string& name) const {
    for (const Scope* s = this; s != nullptr; s = s->parent.get()) {
      auto it = s->vars.find(name);
      if (it != s->vars.end()) return &it->second;
    }
    return nullptr;
  }
};
using ScopePtr = std::shared_ptr<Scope>;

enum class Flow { kNormal, kBreak, kContinue };

absl::Status At(Pos p, const absl::Status& s) {
  if (s.ok()) return s;
  // Keep the innermost position: a macro's error names the macro's line.
  const std::string msg(s.message());
  if (!msg.empty() && msg[0] >= '0' && msg[0] <= '9' && msg.find(": ") != std::string::npos) return s;
  return absl::Status(s.code(), Cat(p.line, ":", p.column, ": ", msg));
}

class Renderer {
 public:
  explicit Renderer(const RenderOptions& options) : options_(options) {}

  absl::StatusOr<std::string> Run(const Body& body, const Dict& context) {
    auto globals = std::make_shared<Scope>();
    AddGlobals(globals.get());
    auto top = std::make_shared<Scope>();
    top->parent = globals;
    for (const auto& [k, v] : context.items) top->vars[k.Str()] = v;
    std::string result;
    out_ = &result;
    absl::StatusOr<Flow> flow = Exec(body, top);
    // Namespaces are the only mutable values, so every reference cycle
    // (`ns.self = ns`, `ns.l = [ns]`) runs through one: emptying them frees it.
    for (Value& ns : namespaces_) ns.mutable_dict().items.clear();
    if (!flow.ok()) return flow.status();
    return result;
  }

 private:
  absl::Status Step(Pos p) {
    if (++steps_ > options_.limits.max_steps) {
      return absl::ResourceExhaustedError(Cat(
          p.line, ":", p.column, ": template exceeded ", options_.limits.max_steps, " steps"));
    }
    return absl::OkStatus();
  }

  // Work proportional to `n` elements or bytes built in one operation
  // (range(), list and string concatenation), counted against max_steps so
  // that a few operations cannot build unbounded values.
  absl::Status Charge(int64_t n) {
    steps_ += n;
    if (steps_ > options_.limits.max_steps) {
      return absl::ResourceExhaustedError(Cat("template exceeded ", options_.limits.max_steps, " steps"));
    }
    return absl::OkStatus();
  }

  absl::Status Emit(Pos p, std::string_view text) {
    emitted_ += static_cast<int64_t>(text.size());
    if (emitted_ > options_.limits.max_output_bytes) {
      return absl::ResourceExhaustedError(Cat(p.line, ":", p.column, ": template output exceeded ",
                                                       options_.limits.max_output_bytes, " bytes"));
    }
    out_->append(text);
    return absl::OkStatus();
  }

  void AddGlobals(Scope* g) {
    g->vars["range"] = MakeFunction("range", [this](const CallArgs& a) -> absl::StatusOr<Value> {
      int64_t start = 0, stop = 0, step = 1;
      const auto& p = a.positional;
      for (const Value& v : p) {
        if (!v.is_int() && !v.is_bool()) return absl::InvalidArgumentError(Cat("'", v.TypeName(), "' object cannot be interpreted as an integer"));
      }
      auto I = [](const Value& v) { return v.is_bool() ? (v.as_bool() ? 1 : 0) : v.as_int(); };
      if (p.size() == 1) stop = I(p[0]);
      else if (p.size() == 2) start = I(p[0]), stop = I(p[1]);
      else if (p.size() == 3) start = I(p[0]), stop = I(p[1]), step = I(p[2]);
      else return absl::InvalidArgumentError("range expected 1 to 3 arguments");
      if (step == 0) return absl::InvalidArgumentError("range() arg 3 must not be zero");
      const int64_t n = step > 0 ? (stop > start ? (stop - start + step - 1) / step : 0)
                                 : (start > stop ? (start - stop - step - 1) / -step : 0);
      if (absl::Status s = Charge(n); !s.ok()) return s;
      List out;
      for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) out.push_back(Value(i));
      return Value(std::move(out));
    });
    g->vars["namespace"] = MakeFunction("namespace", [this](const CallArgs& a) -> absl::StatusOr<Value> {
      Dict d;
      d.is_namespace = true;
      for (const Value& v : a.positional) {
        if (!v.is_dict()) return absl::InvalidArgumentError("namespace() takes a mapping");
        for (const auto& [k, x] : v.as_dict().items) d.Set(k, x);
      }
      for (const auto& [k, v] : a.keyword) d.Set(k, v);
      Value ns(std::move(d));
      namespaces_.push_back(ns);
      return ns;
    });
    g->vars["dict"] = MakeFunction("dict", [](const CallArgs& a) -> absl::StatusOr<Value> {
      Dict d;
      for (const Value& v : a.positional) {
        if (!v.is_dict()) return absl::InvalidArgumentError("dict() takes a mapping");
        for (const auto& [k, x] : v.as_dict().items) d.Set(k, x);
      }
      for (const auto& [k, v] : a.keyword) d.Set(k, v);
      return Value(std::move(d));
    });
    g->vars["raise_exception"] = MakeFunction("raise_exception", [](const CallArgs& a) -> absl::StatusOr<Value> {
      const Value* msg = a.Get(0, "message");
      return absl::InvalidArgumentError(msg == nullptr ? "raise_exception" : msg->Str());
    });
    const RenderTime t = options_.now;
    g->vars["strftime_now"] = MakeFunction("strftime_now", [t](const CallArgs& a) -> absl::StatusOr<Value> {
      const Value* fmt = a.Get(0, "format");
      if (fmt == nullptr || !fmt->is_string()) return absl::InvalidArgumentError("strftime_now takes a format string");
      std::tm tm{};
      tm.tm_year = t.year - 1900;
      tm.tm_mon = t.month - 1;
      tm.tm_mday = t.day;
      tm.tm_hour = t.hour;
      tm.tm_min = t.minute;
      tm.tm_sec = t.second;
      std::time_t secs = timegm(&tm);  // fills in the weekday and year day
      gmtime_r(&secs, &tm);
      char buf[512];
      const size_t n = std::strftime(buf, sizeof(buf), fmt->as_string().c_str(), &tm);
      return Value(std::string(buf, n));
    });
  }

  absl::StatusOr<Flow> Exec(const Body& body, const ScopePtr& scope) {
    for (const NodePtr& n : body) {
      absl::StatusOr<Flow> f = ExecNode(*n, scope);
      if (!f.ok() || *f != Flow::kNormal) return f;
    }
    return Flow::kNormal;
  }

  absl::StatusOr<std::string> Capture(const Body& body, const ScopePtr& scope) {
    std::string buf;
    std::string* saved = out_;
    out_ = &buf;
    absl::StatusOr<Flow> f = Exec(body, scope);
    out_ = saved;
    if (!f.ok()) return f.status();
    return buf;
  }

  absl::StatusOr<Flow> ExecNode(const Node& n, const ScopePtr& scope) {
    if (absl::Status s = Step(n.pos); !s.ok()) return s;
    switch (n.kind) {
      case Node::Kind::kText:
        if (absl::Status s = Emit(n.pos, n.text); !s.ok()) return s;
        return Flow::kNormal;
      case Node::Kind::kOutput: {
        absl::StatusOr<Value> v = Eval(*n.expr, scope);
        if (!v.ok()) return v.status();
        if (absl::Status s = Emit(n.pos, v->Str()); !s.ok()) return s;
        return Flow::kNormal;
      }
      case Node::Kind::kIf:
        for (const auto& [cond, body] : n.branches) {
          absl::StatusOr<Value> c = Eval(*cond, scope);
          if (!c.ok()) return c.status();
          if (c->Truthy()) return Exec(body, scope);
        }
        return Exec(n.else_body, scope);
      case Node::Kind::kFor:
        return ExecFor(n, scope);
      case Node::Kind::kSet: {
        absl::StatusOr<Value> v = Eval(*n.expr, scope);
        if (!v.ok()) return v.status();
        if (!n.attr.empty()) {
          const Value* target = scope->Find(n.targets[0]);
          if (target == nullptr || !target->is_dict() || !target->as_dict().is_namespace) {
            return At(n.pos, absl::InvalidArgumentError("can only set attributes of a namespace"));
          }
          const_cast<Value*>(target)->mutable_dict().Set(n.attr, std::move(*v));
          return Flow::kNormal;
        }
        if (absl::Status s = Assign(n.targets, *v, scope.get()); !s.ok()) return At(n.pos, s);
        return Flow::kNormal;
      }
      case Node::Kind::kSetBlock: {
        absl::StatusOr<std::string> text = Capture(n.body, scope);
        if (!text.ok()) return text.status();
        scope->vars[n.targets[0]] = Value(std::move(*text));
        return Flow::kNormal;
      }
      case Node::Kind::kMacro:
        scope->vars[n.name] = MakeMacro(n, scope);
        return Flow::kNormal;
      case Node::Kind::kBreak:
        return Flow::kBreak;
      case Node::Kind::kContinue:
        return Flow::kContinue;
      case Node::Kind::kFilterBlock: {
        absl::StatusOr<std::string> text = Capture(n.body, scope);
        if (!text.ok()) return text.status();
        absl::StatusOr<Value> v = EvalFilter(*n.expr, Value(std::move(*text)), scope);
        if (!v.ok()) return v.status();
        if (absl::Status s = Emit(n.pos, v->Str()); !s.ok()) return s;
        return Flow::kNormal;
      }
      case Node::Kind::kScope:
        return Exec(n.body, scope);
    }
    return Flow::kNormal;
  }

  static absl::Status Assign(const std::vector<std::string>& targets, const Value& v, Scope* scope) {
    if (targets.size() == 1) {
      scope->vars[targets[0]] = v;
      return absl::OkStatus();
    }
    absl::StatusOr<List> items = Iterate(v);
    if (!items.ok()) return items.status();
    if (items->size() != targets.size()) {
      return absl::InvalidArgumentError(Cat("cannot unpack ", items->size(), " values into ", targets.size()));
    }
    for (size_t i = 0; i < targets.size(); ++i) scope->vars[targets[i]] = (*items)[i];
    return absl::OkStatus();
  }

  absl::StatusOr<Flow> ExecFor(const Node& n, const ScopePtr& scope) {
    absl::StatusOr<Value> seq = Eval(*n.expr, scope);
    if (!seq.ok()) return seq.status();
    absl::StatusOr<List> all = Iterate(*seq);
    if (!all.ok()) return At(n.expr->pos, all.status());
    if (absl::Status s = Charge(static_cast<int64_t>(all->size())); !s.ok()) return At(n.pos, s);
    auto loop_scope = std::make_shared<Scope>();
    loop_scope->parent = scope;
    List items;
    if (n.cond) {
      for (const Value& item : *all) {
        if (absl::Status s = Assign(n.targets, item, loop_scope.get()); !s.ok()) return At(n.pos, s);
        absl::StatusOr<Value> keep = Eval(*n.cond, loop_scope);
        if (!keep.ok()) return keep.status();
        if (keep->Truthy()) items.push_back(item);
      }
    } else {
      items = std::move(*all);
    }
    const int64_t len = static_cast<int64_t>(items.size());
    for (int64_t i = 0; i < len; ++i) {
      if (absl::Status s = Step(n.pos); !s.ok()) return s;
      // jinja2 gives each iteration fresh variables: a `set` in one
      // iteration is gone in the next.
      loop_scope = std::make_shared<Scope>();
      loop_scope->parent = scope;
      if (absl::Status s = Assign(n.targets, items[static_cast<size_t>(i)], loop_scope.get()); !s.ok()) {
        return At(n.pos, s);
      }
      Dict loop;
      loop.Set("index", Value(i + 1));
      loop.Set("index0", Value(i));
      loop.Set("revindex", Value(len - i));
      loop.Set("revindex0", Value(len - i - 1));
      loop.Set("first", Value(i == 0));
      loop.Set("last", Value(i == len - 1));
      loop.Set("length", Value(len));
      loop.Set("depth", Value(1));
      loop.Set("depth0", Value(0));
      loop.Set("previtem", i > 0 ? items[static_cast<size_t>(i - 1)] : Value::MakeUndefined("previtem"));
      loop.Set("nextitem", i + 1 < len ? items[static_cast<size_t>(i + 1)] : Value::MakeUndefined("nextitem"));
      loop.Set("cycle", MakeFunction("cycle", [i](const CallArgs& a) -> absl::StatusOr<Value> {
        if (a.positional.empty()) return absl::InvalidArgumentError("no items for cycling given");
        return a.positional[static_cast<size_t>(i) % a.positional.size()];
      }));
      loop_scope->vars["loop"] = Value(std::move(loop));
      absl::StatusOr<Flow> f = Exec(n.body, loop_scope);
      if (!f.ok()) return f;
      if (*f == Flow::kBreak) break;
    }
    if (len == 0) return Exec(n.else_body, scope);
    return Flow::kNormal;
  }

  Value MakeMacro(const Node& n, const ScopePtr& scope) {
    const Node* node = &n;
    // The macro lives in the scope it captures: a weak reference keeps that
    // from being a cycle.
    std::weak_ptr<Scope> weak = scope;
    return MakeFunction(n.name, [this, node, weak](const CallArgs& a) -> absl::StatusOr<Value> {
      ScopePtr defining = weak.lock();
      if (defining == nullptr) {
        return absl::InvalidArgumentError(Cat("macro '", node->name, "' called outside the scope that defined it"));
      }
      if (++depth_ > options_.limits.max_call_depth) {
        --depth_;
        return absl::ResourceExhaustedError(
            Cat("macro calls nested deeper than ", options_.limits.max_call_depth));
      }
      auto scope = std::make_shared<Scope>();
      scope->parent = defining;
      absl::Status status;
      if (a.positional.size() > node->params.size()) {
        status = absl::InvalidArgumentError(Cat("macro '", node->name, "' takes not more than ",
                                                         node->params.size(), " argument(s)"));
      }
      for (size_t i = 0; status.ok() && i < node->params.size(); ++i) {
        const auto& [pname, def] = node->params[i];
        const Value* given = a.Get(i, pname);
        if (given != nullptr) {
          scope->vars[pname] = *given;
        } else if (def) {
          absl::StatusOr<Value> d = Eval(*def, scope);
          if (!d.ok()) status = d.status();
          else scope->vars[pname] = std::move(*d);
        } else {
          scope->vars[pname] = Value::MakeUndefined(pname);
        }
      }
      for (const auto& [k, v] : a.keyword) {
        bool known = false;
        for (const auto& p : node->params) known = known || p.first == k;
        if (!known && status.ok()) {
          status = absl::InvalidArgumentError(Cat("macro '", node->name, "' takes no keyword argument '", k, "'"));
        }
      }
      absl::StatusOr<std::string> text = status.ok() ? Capture(node->body, scope) : absl::StatusOr<std::string>(status);
      --depth_;
      if (!text.ok()) return At(node->pos, text.status());
      return Value(std::move(*text));
    });
  }

  absl::StatusOr<CallArgs> EvalArgs(const Expr& e, size_t first, const ScopePtr& scope) {
    CallArgs args;
    for (size_t i = first; i < e.kids.size(); ++i) {
      absl::StatusOr<Value> v = Eval(*e.kids[i], scope);
      if (!v.ok()) return v.status();
      args.positional.push_back(std::move(*v));
    }
    for (const auto& [k, x] : e.keyword) {
      absl::StatusOr<Value> v = Eval(*x, scope);
      if (!v.ok()) return v.status();
      args.keyword.emplace_back(k, std::move(*v));
    }
    return args;
  }

  absl::StatusOr<Value> EvalFilter(const Expr& e, const Value& subject, const ScopePtr& scope) {
    absl::StatusOr<CallArgs> args = EvalArgs(e, 1, scope);
    if (!args.ok()) return args.status();
    absl::StatusOr<Value> r = ApplyFilter(e.name, subject, *args);
    if (!r.ok()) return At(e.pos, r.status());
    return r;
  }

  absl::StatusOr<Value> Eval(const Expr& e, const ScopePtr& scope) {
    if (absl::Status s = Step(e.pos); !s.ok()) return s;
    absl::StatusOr<Value> v = EvalInner(e, scope);
    if (!v.ok()) return At(e.pos, v.status());
    return v;
  }

  absl::StatusOr<Value> EvalInner(const Expr& e, const ScopePtr& scope) {
    switch (e.kind) {
      case Expr::Kind::kLiteral:
        return e.literal;
      case Expr::Kind::kName: {
        const Value* v = scope->Find(e.name);
        return v != nullptr ? *v : Value::MakeUndefined(e.name);
      }
      case Expr::Kind::kList: {
        List l;
        for (const ExprPtr& k : e.kids) {
          absl::StatusOr<Value> v = Eval(*k, scope);
          if (!v.ok()) return v;
          l.push_back(std::move(*v));
        }
        if (e.name == "tuple") return Value(std::move(l)).AsTuple();
        return Value(std::move(l));
      }
      case Expr::Kind::kDict: {
        Dict d;
        for (size_t i = 0; i + 1 < e.kids.size(); i += 2) {
          absl::StatusOr<Value> k = Eval(*e.kids[i], scope);
          if (!k.ok()) return k;
          absl::StatusOr<Value> v = Eval(*e.kids[i + 1], scope);
          if (!v.ok()) return v;
          if (k->is_list() || k->is_dict()) return absl::InvalidArgumentError(Cat("unhashable type: '", k->TypeName(), "'"));
          d.Set(std::move(*k), std::move(*v));
        }
        return Value(std::move(d));
      }
      case Expr::Kind::kAttr: {
        absl::StatusOr<Value> obj = Eval(*e.kids[0], scope);
        if (!obj.ok()) return obj;
        return GetAttr(*obj, e.name);
      }
      case Expr::Kind::kItem: {
        absl::StatusOr<Value> obj = Eval(*e.kids[0], scope);
        if (!obj.ok()) return obj;
        absl::StatusOr<Value> key = Eval(*e.kids[1], scope);
        if (!key.ok()) return key;
        return GetItem(*obj, *key);
      }
      case Expr::Kind::kSlice: {
        absl::StatusOr<Value> obj = Eval(*e.kids[0], scope);
        if (!obj.ok()) return obj;
        Value parts[3] = {Value::None(), Value::None(), Value::None()};
        for (int i = 0; i < 3; ++i) {
          if (!e.kids[static_cast<size_t>(i) + 1]) continue;
          absl::StatusOr<Value> p = Eval(*e.kids[static_cast<size_t>(i) + 1], scope);
          if (!p.ok()) return p;
          parts[i] = std::move(*p);
        }
        return Slice(*obj, parts[0], parts[1], parts[2]);
      }
      case Expr::Kind::kCall: {
        absl::StatusOr<Value> callee = Eval(*e.kids[0], scope);
        if (!callee.ok()) return callee;
        absl::StatusOr<CallArgs> args = EvalArgs(e, 1, scope);
        if (!args.ok()) return args.status();
        if (callee->is_undefined()) {
          return absl::InvalidArgumentError(Cat("'", callee->undefined_name(), "' is undefined"));
        }
        if (!callee->is_function()) {
          return absl::InvalidArgumentError(Cat("'", callee->TypeName(), "' object is not callable"));
        }
        absl::StatusOr<Value> result = callee->as_function().call(*args);
        if (result.ok() && result->is_list()) {
          if (absl::Status c = Charge(static_cast<int64_t>(result->as_list().size())); !c.ok()) return c;
        }
        return result;
      }
      case Expr::Kind::kFilter: {
        absl::StatusOr<Value> subject = Eval(*e.kids[0], scope);
        if (!subject.ok()) return subject;
        absl::StatusOr<CallArgs> args = EvalArgs(e, 1, scope);
        if (!args.ok()) return args.status();
        absl::StatusOr<Value> result = ApplyFilter(e.name, *subject, *args);
        // A list built from another value (`| list`, `| map(...)`) is work
        // in proportion to its length.
        if (result.ok() && result->is_list()) {
          if (absl::Status c = Charge(static_cast<int64_t>(result->as_list().size())); !c.ok()) return c;
        }
        return result;
      }
      case Expr::Kind::kTest: {
        absl::StatusOr<Value> subject = Eval(*e.kids[0], scope);
        if (!subject.ok()) return subject;
        absl::StatusOr<CallArgs> args = EvalArgs(e, 1, scope);
        if (!args.ok()) return args.status();
        absl::StatusOr<bool> r = ApplyTest(e.name, *subject, *args);
        if (!r.ok()) return r.status();
        return Value(*r != e.negated);
      }
      case Expr::Kind::kNot: {
        absl::StatusOr<Value> v = Eval(*e.kids[0], scope);
        if (!v.ok()) return v;
        return Value(!v->Truthy());
      }
      case Expr::Kind::kNeg:
      case Expr::Kind::kPos: {
        absl::StatusOr<Value> v = Eval(*e.kids[0], scope);
        if (!v.ok()) return v;
        if (v->is_undefined()) return absl::InvalidArgumentError(Cat("'", v->undefined_name(), "' is undefined"));
        if (!v->is_number()) return absl::InvalidArgumentError(Cat("bad operand type for unary -: '", v->TypeName(), "'"));
        if (e.kind == Expr::Kind::kPos) return v->is_bool() ? Value(static_cast<int64_t>(v->as_bool())) : *v;
        if (v->is_float()) return Value(-v->as_float());
        return Value(-(v->is_bool() ? static_cast<int64_t>(v->as_bool()) : v->as_int()));
      }
      case Expr::Kind::kAnd: {
        absl::StatusOr<Value> a = Eval(*e.kids[0], scope);
        if (!a.ok() || !a->Truthy()) return a;
        return Eval(*e.kids[1], scope);
      }
      case Expr::Kind::kOr: {
        absl::StatusOr<Value> a = Eval(*e.kids[0], scope);
        if (!a.ok() || a->Truthy()) return a;
        return Eval(*e.kids[1], scope);
      }
      case Expr::Kind::kTernary: {
        absl::StatusOr<Value> c = Eval(*e.kids[1], scope);
        if (!c.ok()) return c;
        if (c->Truthy()) return Eval(*e.kids[0], scope);
        if (!e.kids[2]) return Value::MakeUndefined("");
        return Eval(*e.kids[2], scope);
      }
      case Expr::Kind::kCompare: {
        absl::StatusOr<Value> left = Eval(*e.kids[0], scope);
        if (!left.ok()) return left;
        for (size_t i = 0; i < e.ops.size(); ++i) {
          absl::StatusOr<Value> right = Eval(*e.kids[i + 1], scope);
          if (!right.ok()) return right;
          absl::StatusOr<bool> r = CompareOp(e.ops[i], *left, *right);
          if (!r.ok()) return r.status();
          if (!*r) return Value(false);
          left = std::move(right);
        }
        return Value(true);
      }
      case Expr::Kind::kBinary: {
        absl::StatusOr<Value> a = Eval(*e.kids[0], scope);
        if (!a.ok()) return a;
        absl::StatusOr<Value> b = Eval(*e.kids[1], scope);
        if (!b.ok()) return b;
        return BinaryOp(e.name, *a, *b, options_.limits.max_output_bytes,
                        [this](int64_t n) { return Charge(n); });
      }
    }
    return absl::InternalError("unknown expression");
  }

  const RenderOptions& options_;
  std::string* out_ = nullptr;
  int64_t steps_ = 0;
  int64_t emitted_ = 0;
  int depth_ = 0;
  std::vector<Value> namespaces_;  // every namespace() made, emptied at the end
};

}  // namespace

absl::StatusOr<Template> Template::Parse(std::string_view source) {
  absl::StatusOr<Body> body = jinja::Parse(source);
  if (!body.ok()) return body.status();
  return Template(std::make_shared<const Body>(std::move(*body)));
}

absl::StatusOr<std::string> Template::Render(const Dict& context, const RenderOptions& options) const {
  return Renderer(options).Run(*body_, context);
}

}  // namespace tandem::engine::jinja
