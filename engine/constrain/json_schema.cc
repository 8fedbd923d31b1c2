#include "engine/constrain/json_schema.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "engine/constrain/regex.h"
#include "engine/tokenizer/jinja/json.h"
#include "engine/tokenizer/jinja/value.h"

namespace tandem::engine::constrain {
namespace {

using jinja::Dict;
using jinja::Value;

// The building blocks every schema grammar shares.
constexpr char kBaseRules[] = R"(ws ::= ("" | " " | "\n" [ \t]{0,16})
json-char ::= [^"\\\x00-\x1F] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4})
json-string ::= "\"" json-char* "\""
json-int ::= "-"? ("0" | [1-9] [0-9]{0,15})
json-number ::= json-int ("." [0-9]{1,16})? ([eE] [-+]? [0-9]{1,3})?
json-boolean ::= "true" | "false"
json-null ::= "null"
json-value ::= json-object | json-array | json-string | json-number | json-boolean | json-null
json-pair ::= json-string ws ":" ws json-value
json-object ::= "{" ws (json-pair ws ("," ws json-pair ws)*)? "}"
json-array ::= "[" ws (json-value ws ("," ws json-value ws)*)? "]"
)";

// Keywords that only describe; they never change what is accepted.
const absl::flat_hash_set<std::string_view>& Annotations() {
  static const auto* set = new absl::flat_hash_set<std::string_view>{
      "title",    "description", "default",  "examples",  "$schema", "$id",
      "$comment", "deprecated",  "readOnly", "writeOnly", "$defs",   "definitions"};
  return *set;
}

std::string Literal(std::string_view text) {
  std::string out;
  AppendGbnfLiteral(text, &out);
  return out;
}

std::string EscapePointer(std::string_view key) {
  std::string out;
  for (char c : key) {
    if (c == '~') {
      out += "~0";
    } else if (c == '/') {
      out += "~1";
    } else {
      out.push_back(c);
    }
  }
  return out;
}

class SchemaConverter {
 public:
  explicit SchemaConverter(const CompileLimits& limits) : limits_(limits) {}

  absl::StatusOr<std::string> Convert(const Value& root) {
    root_ = &root;
    ASSIGN_OR_RETURN(std::string expr, Visit(root, "", "root-value", 0));
    std::string out = absl::StrCat("root ::= ", expr, "\n");
    for (const auto& [name, body] : rules_) absl::StrAppend(&out, name, " ::= ", body, "\n");
    out += kBaseRules;
    if (static_cast<int64_t>(out.size()) > limits_.max_text_bytes) {
      return absl::InvalidArgumentError(
          absl::StrCat("the schema expands to more than ", limits_.max_text_bytes, " bytes"));
    }
    return out;
  }

 private:
  static absl::Status Error(const std::string& path, absl::string_view what) {
    return absl::InvalidArgumentError(
        absl::StrCat("at ", path.empty() ? std::string("/") : path, ": ", what));
  }

  // A fresh rule name from `hint` (kept to GBNF's name characters).
  std::string RuleName(const std::string& hint) {
    std::string base;
    for (char c : hint) {
      const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                      (c >= '0' && c <= '9') || c == '-';
      base.push_back(ok ? c : '-');
    }
    if (base.empty()) base = "schema";
    std::string name = base;
    for (int i = 2; used_.contains(name); ++i) name = absl::StrCat(base, "-", i);
    used_.insert(name);
    return name;
  }

  absl::Status AddRule(const std::string& name, std::string body) {
    total_ += static_cast<int64_t>(name.size() + body.size());
    if (total_ > limits_.max_text_bytes) {
      return absl::InvalidArgumentError(
          absl::StrCat("the schema expands to more than ", limits_.max_text_bytes, " bytes"));
    }
    rules_.emplace_back(name, std::move(body));
    return absl::OkStatus();
  }

  // A compact JSON literal of `v` (const and enum members).
  absl::StatusOr<std::string> ConstLiteral(const Value& v, const std::string& path) {
    absl::StatusOr<std::string> json =
        jinja::ToJson(v, {.indent = std::nullopt, .sort_keys = false, .ensure_ascii = false,
                         .item_separator = ",", .key_separator = ":"});
    if (!json.ok()) return Error(path, json.status().message());
    return Literal(*json);
  }

  // A GBNF expression for `schema` (a rule name or a short expression).
  absl::StatusOr<std::string> Visit(const Value& schema, const std::string& path,
                                    const std::string& hint, int32_t depth) {
    if (depth > limits_.max_depth) return Error(path, "the schema nests too deeply");
    if (schema.is_bool()) {
      if (schema.as_bool()) return std::string("json-value");
      return Error(path, "the schema `false` matches nothing");
    }
    if (!schema.is_dict()) return Error(path, "a schema must be an object or a boolean");
    const Dict& d = schema.as_dict();
    for (const auto& [key, value] : d.items) {
      if (!key.is_string()) return Error(path, "keys must be strings");
      const std::string& k = key.as_string();
      if (Annotations().contains(k)) continue;
      static const absl::flat_hash_set<std::string_view> kKnown = {
          "type",       "properties", "required",    "additionalProperties",
          "items",      "prefixItems", "minItems",   "maxItems",
          "enum",       "const",      "anyOf",       "oneOf",
          "allOf",      "$ref",       "pattern",     "minLength",
          "maxLength",  "format",     "nullable"};
      if (!kKnown.contains(k)) return Error(path, absl::StrCat("`", k, "` is not supported"));
    }
    if (const Value* ref = d.Find("$ref")) return Ref(*ref, path, depth);
    if (const Value* c = d.Find("const")) return ConstLiteral(*c, path + "/const");
    if (const Value* e = d.Find("enum")) {
      if (!e->is_list() || e->as_list().empty()) {
        return Error(path + "/enum", "must be a non-empty array");
      }
      std::vector<std::string> alts;
      for (size_t i = 0; i < e->as_list().size(); ++i) {
        ASSIGN_OR_RETURN(std::string lit,
                         ConstLiteral(e->as_list()[i], absl::StrCat(path, "/enum/", i)));
        alts.push_back(std::move(lit));
      }
      return Group(alts);
    }
    for (const char* key : {"anyOf", "oneOf"}) {
      if (const Value* any = d.Find(key)) {
        if (!any->is_list() || any->as_list().empty()) {
          return Error(absl::StrCat(path, "/", key), "must be a non-empty array");
        }
        std::vector<std::string> alts;
        for (size_t i = 0; i < any->as_list().size(); ++i) {
          ASSIGN_OR_RETURN(std::string alt,
                           Visit(any->as_list()[i], absl::StrCat(path, "/", key, "/", i),
                                 absl::StrCat(hint, "-", i), depth + 1));
          alts.push_back(std::move(alt));
        }
        return Nullable(d, Group(alts));
      }
    }
    if (const Value* all = d.Find("allOf")) {
      if (!all->is_list() || all->as_list().size() != 1) {
        return Error(path + "/allOf", "only an allOf of one schema is supported");
      }
      return Visit(all->as_list()[0], path + "/allOf/0", hint, depth + 1);
    }
    const Value* type = d.Find("type");
    std::vector<std::string> types;
    if (type == nullptr) {
      if (d.Find("properties") || d.Find("additionalProperties") || d.Find("required")) {
        types = {"object"};
      } else if (d.Find("items") || d.Find("prefixItems")) {
        types = {"array"};
      } else if (d.Find("pattern") || d.Find("minLength") || d.Find("maxLength") ||
                 d.Find("format")) {
        types = {"string"};
      } else {
        return Nullable(d, "json-value");
      }
    } else if (type->is_string()) {
      types = {type->as_string()};
    } else if (type->is_list()) {
      for (const Value& t : type->as_list()) {
        if (!t.is_string()) return Error(path + "/type", "must be a string or strings");
        types.push_back(t.as_string());
      }
    } else {
      return Error(path + "/type", "must be a string or an array of strings");
    }
    std::vector<std::string> alts;
    for (const std::string& t : types) {
      ASSIGN_OR_RETURN(std::string alt, OfType(t, d, path, hint, depth));
      alts.push_back(std::move(alt));
    }
    return Nullable(d, Group(alts));
  }

  static std::string Group(const std::vector<std::string>& alts) {
    if (alts.size() == 1) return alts[0];
    return absl::StrCat("(", absl::StrJoin(alts, " | "), ")");
  }

  // OpenAPI's `nullable: true` adds null.
  static std::string Nullable(const Dict& d, std::string expr) {
    const Value* n = d.Find("nullable");
    if (n != nullptr && n->is_bool() && n->as_bool()) return absl::StrCat("(", expr, " | json-null)");
    return expr;
  }

  absl::StatusOr<std::string> OfType(const std::string& t, const Dict& d, const std::string& path,
                                     const std::string& hint, int32_t depth) {
    if (t == "string") return String(d, path, hint);
    if (t == "integer") return std::string("json-int");
    if (t == "number") return std::string("json-number");
    if (t == "boolean") return std::string("json-boolean");
    if (t == "null") return std::string("json-null");
    if (t == "object") return Object(d, path, hint, depth);
    if (t == "array") return Array(d, path, hint, depth);
    return Error(path + "/type", absl::StrCat("unknown type \"", t, "\""));
  }

  absl::StatusOr<int32_t> Count(const Dict& d, const char* key, const std::string& path) {
    const Value* v = d.Find(key);
    if (v == nullptr) return -1;
    if (!v->is_int() || v->as_int() < 0) {
      return Error(absl::StrCat(path, "/", key), "must be a non-negative integer");
    }
    if (v->as_int() > limits_.max_repeat) {
      return Error(absl::StrCat(path, "/", key),
                   absl::StrCat("exceeds the limit of ", limits_.max_repeat));
    }
    return static_cast<int32_t>(v->as_int());
  }

  static std::string Repeat(const std::string& unit, int32_t min, int32_t max) {
    if (max < 0) {
      if (min <= 0) return absl::StrCat(unit, "*");
      if (min == 1) return absl::StrCat(unit, "+");
      return absl::StrCat(unit, "{", min, ",}");
    }
    if (min == max) return absl::StrCat(unit, "{", min, "}");
    return absl::StrCat(unit, "{", min, ",", max, "}");
  }

  absl::StatusOr<std::string> String(const Dict& d, const std::string& path,
                                     const std::string& hint) {
    if (const Value* p = d.Find("pattern")) {
      if (!p->is_string()) return Error(path + "/pattern", "must be a string");
      absl::StatusOr<std::string> re = RegexToGbnf(p->as_string(), RegexTarget::kJsonString, limits_);
      if (!re.ok()) return Error(path + "/pattern", re.status().message());
      const std::string name = RuleName(absl::StrCat(hint, "-string"));
      RETURN_IF_ERROR(AddRule(name, absl::StrCat("\"\\\"\" ", *re, " \"\\\"\"")));
      return name;
    }
    if (const Value* f = d.Find("format")) {
      if (!f->is_string()) return Error(path + "/format", "must be a string");
      const std::string& format = f->as_string();
      static const std::map<std::string, std::string> kFormats = {
          {"date", R"([0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01]))"},
          {"time", R"(([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\.[0-9]{1,9})?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9]))"},
          {"date-time",
           R"([0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])T([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\.[0-9]{1,9})?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9]))"},
          {"uuid", R"([0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12})"},
      };
      auto it = kFormats.find(format);
      if (it == kFormats.end()) {
        return Error(path + "/format", absl::StrCat("format \"", format, "\" is not supported"));
      }
      ASSIGN_OR_RETURN(std::string re, RegexToGbnf(it->second, RegexTarget::kJsonString, limits_));
      const std::string name = RuleName(absl::StrCat(hint, "-", format));
      RETURN_IF_ERROR(AddRule(name, absl::StrCat("\"\\\"\" ", re, " \"\\\"\"")));
      return name;
    }
    ASSIGN_OR_RETURN(int32_t min, Count(d, "minLength", path));
    ASSIGN_OR_RETURN(int32_t max, Count(d, "maxLength", path));
    if (min < 0 && max < 0) return std::string("json-string");
    if (max >= 0 && min > max) return Error(path, "minLength exceeds maxLength");
    const std::string name = RuleName(absl::StrCat(hint, "-string"));
    RETURN_IF_ERROR(AddRule(
        name, absl::StrCat("\"\\\"\" ", Repeat("json-char", std::max(min, 0), max), " \"\\\"\"")));
    return name;
  }

  absl::StatusOr<std::string> Object(const Dict& d, const std::string& path,
                                     const std::string& hint, int32_t depth) {
    // (key, required, value expression) in the schema's order.
    struct Prop {
      std::string key;
      bool required = false;
      std::string value;
    };
    std::vector<Prop> props;
    absl::flat_hash_set<std::string> required;
    if (const Value* r = d.Find("required")) {
      if (!r->is_list()) return Error(path + "/required", "must be an array of strings");
      for (const Value& k : r->as_list()) {
        if (!k.is_string()) return Error(path + "/required", "must be an array of strings");
        required.insert(k.as_string());
      }
    }
    const Value* properties = d.Find("properties");
    if (properties != nullptr && !properties->is_dict()) {
      return Error(path + "/properties", "must be an object");
    }
    absl::flat_hash_set<std::string> listed;
    if (properties != nullptr) {
      for (const auto& [key, sub] : properties->as_dict().items) {
        const std::string& k = key.as_string();
        const std::string sub_path = absl::StrCat(path, "/properties/", EscapePointer(k));
        ASSIGN_OR_RETURN(std::string value,
                         Visit(sub, sub_path, absl::StrCat(hint, "-", k), depth + 1));
        props.push_back({k, required.contains(k), std::move(value)});
        listed.insert(k);
      }
    }
    // Required but not described: any value.
    if (const Value* r = d.Find("required")) {
      for (const Value& k : r->as_list()) {
        if (!listed.contains(k.as_string())) {
          props.push_back({k.as_string(), true, "json-value"});
          listed.insert(k.as_string());
        }
      }
    }
    // Extra properties: with additionalProperties true or a schema, or with
    // neither properties nor additionalProperties (a free-form object).
    std::string extra;
    const Value* additional = d.Find("additionalProperties");
    if (additional != nullptr) {
      if (additional->is_bool()) {
        if (additional->as_bool()) extra = "json-value";
      } else {
        ASSIGN_OR_RETURN(extra, Visit(*additional, path + "/additionalProperties",
                                      absl::StrCat(hint, "-additional"), depth + 1));
      }
    } else if (props.empty()) {
      extra = "json-value";
    }
    if (props.empty() && extra == "json-value") return std::string("json-object");

    const std::string base = RuleName(absl::StrCat(hint, "-object"));
    std::vector<std::string> kv(props.size());
    for (size_t i = 0; i < props.size(); ++i) {
      kv[i] = RuleName(absl::StrCat(base, "-", props[i].key, "-kv"));
      RETURN_IF_ERROR(AddRule(kv[i], absl::StrCat(Literal(QuotedKey(props[i].key)),
                                                  " ws \":\" ws ", props[i].value)));
    }
    std::string extra_kv;
    if (!extra.empty()) {
      extra_kv = RuleName(absl::StrCat(base, "-extra-kv"));
      RETURN_IF_ERROR(AddRule(extra_kv, absl::StrCat("json-string ws \":\" ws ", extra)));
    }
    // after[i]: properties i.. once something has been written (each comes
    // after a comma); first[i]: properties i.. with nothing written yet.
    const size_t n = props.size();
    std::vector<std::string> after(n + 1);
    std::vector<std::string> first(n + 1);
    after[n] = extra.empty() ? "\"\"" : absl::StrCat("(\",\" ws ", extra_kv, " ws)*");
    first[n] = extra.empty() ? "\"\"" : absl::StrCat("(", extra_kv, " ws ", after[n], ")?");
    for (size_t j = n; j-- > 0;) {
      const std::string a = RuleName(absl::StrCat(base, "-after-", j));
      const std::string f = RuleName(absl::StrCat(base, "-first-", j));
      const std::string take_after = absl::StrCat("\",\" ws ", kv[j], " ws ", after[j + 1]);
      const std::string take_first = absl::StrCat(kv[j], " ws ", after[j + 1]);
      if (props[j].required) {
        RETURN_IF_ERROR(AddRule(a, take_after));
        RETURN_IF_ERROR(AddRule(f, take_first));
      } else {
        RETURN_IF_ERROR(AddRule(a, absl::StrCat(take_after, " | ", after[j + 1])));
        RETURN_IF_ERROR(AddRule(f, absl::StrCat(take_first, " | ", first[j + 1])));
      }
      after[j] = a;
      first[j] = f;
    }
    RETURN_IF_ERROR(AddRule(base, absl::StrCat("\"{\" ws ", first[0], " \"}\"")));
    return base;
  }

  static std::string QuotedKey(const std::string& key) {
    absl::StatusOr<std::string> json = jinja::ToJson(Value(key));
    return json.ok() ? *json : absl::StrCat("\"", key, "\"");
  }

  absl::StatusOr<std::string> Array(const Dict& d, const std::string& path,
                                    const std::string& hint, int32_t depth) {
    ASSIGN_OR_RETURN(int32_t min, Count(d, "minItems", path));
    ASSIGN_OR_RETURN(int32_t max, Count(d, "maxItems", path));
    min = std::max(min, 0);
    if (max >= 0 && min > max) return Error(path, "minItems exceeds maxItems");
    std::vector<std::string> prefix;
    if (const Value* p = d.Find("prefixItems")) {
      if (!p->is_list()) return Error(path + "/prefixItems", "must be an array of schemas");
      for (size_t i = 0; i < p->as_list().size(); ++i) {
        ASSIGN_OR_RETURN(std::string item,
                         Visit(p->as_list()[i], absl::StrCat(path, "/prefixItems/", i),
                               absl::StrCat(hint, "-", i), depth + 1));
        prefix.push_back(std::move(item));
      }
    }
    std::string item = "json-value";
    if (const Value* items = d.Find("items")) {
      if (items->is_bool() && !items->as_bool()) {
        item.clear();
      } else {
        ASSIGN_OR_RETURN(item, Visit(*items, path + "/items", absl::StrCat(hint, "-item"),
                                     depth + 1));
      }
    }
    const std::string name = RuleName(absl::StrCat(hint, "-array"));
    // The items in order: prefix items (each may end the array once min is
    // met), then repeated `item`s up to max.
    const auto np = static_cast<int32_t>(prefix.size());
    if (max >= 0 && np > max) prefix.resize(static_cast<size_t>(max));
    std::vector<std::string> elems = prefix;
    // Written as a chain from the back: tail(k) = what may follow k items.
    std::string tail;
    const int32_t n_prefix = static_cast<int32_t>(prefix.size());
    if (item.empty() || (max >= 0 && max <= n_prefix)) {
      tail = "\"\"";
    } else {
      const int32_t more_min = std::max(0, min - n_prefix);
      const int32_t more_max = max < 0 ? -1 : max - n_prefix;
      // Each further item follows a comma (or opens the array when there
      // are no prefix items).
      const std::string sep_item = absl::StrCat("(\",\" ws ", item, " ws)");
      if (n_prefix == 0) {
        const std::string rest =
            Repeat(sep_item, std::max(0, more_min - 1), more_max < 0 ? -1 : more_max - 1);
        tail = absl::StrCat(item, " ws ", rest);
        if (more_min == 0) tail = absl::StrCat("(", tail, ")?");
      } else {
        tail = Repeat(sep_item, more_min, more_max);
      }
    }
    // Prefix items from the back: item k is required when k < min.
    std::string body = tail;
    for (int32_t k = n_prefix; k-- > 0;) {
      const std::string sep = k == 0 ? "" : "\",\" ws ";
      const std::string take = absl::StrCat(sep, prefix[k], " ws ", body);
      body = k < min ? take : absl::StrCat("(", take, ")?");
    }
    RETURN_IF_ERROR(AddRule(name, absl::StrCat("\"[\" ws ", body, " \"]\"")));
    return name;
  }

  absl::StatusOr<std::string> Ref(const Value& ref, const std::string& path, int32_t depth) {
    if (!ref.is_string()) return Error(path + "/$ref", "must be a string");
    const std::string& target = ref.as_string();
    if (auto it = refs_.find(target); it != refs_.end()) return it->second;
    if (target.empty() || target[0] != '#') {
      return Error(path + "/$ref", absl::StrCat("only references within the document are supported, got \"", target, "\""));
    }
    // Walk the JSON pointer from the root.
    const Value* node = root_;
    std::string_view rest = std::string_view(target).substr(1);
    std::string hint = "ref";
    while (!rest.empty()) {
      if (rest[0] != '/') return Error(path + "/$ref", "malformed JSON pointer");
      rest.remove_prefix(1);
      const size_t slash = rest.find('/');
      std::string token(rest.substr(0, slash));
      rest = slash == std::string_view::npos ? std::string_view() : rest.substr(slash);
      std::string key;
      for (size_t i = 0; i < token.size(); ++i) {
        if (token[i] == '~' && i + 1 < token.size()) {
          key.push_back(token[i + 1] == '1' ? '/' : '~');
          ++i;
        } else {
          key.push_back(token[i]);
        }
      }
      if (!node->is_dict()) return Error(path + "/$ref", absl::StrCat("\"", target, "\" does not resolve"));
      node = node->as_dict().Find(key);
      if (node == nullptr) return Error(path + "/$ref", absl::StrCat("\"", target, "\" does not resolve"));
      hint = key;
    }
    // The name is known before the body, so a schema can refer to itself.
    const std::string name = RuleName(absl::StrCat("ref-", hint));
    refs_[target] = name;
    const size_t slot = rules_.size();
    rules_.emplace_back(name, "");
    ASSIGN_OR_RETURN(std::string body, Visit(*node, target.substr(1), hint, depth + 1));
    rules_[slot].second = body;
    return name;
  }

  const CompileLimits& limits_;
  const Value* root_ = nullptr;
  std::vector<std::pair<std::string, std::string>> rules_;
  absl::flat_hash_set<std::string> used_ = {"root", "ws", "json-char", "json-string", "json-int",
                                            "json-number", "json-boolean", "json-null",
                                            "json-value", "json-pair", "json-object",
                                            "json-array"};
  absl::flat_hash_map<std::string, std::string> refs_;
  int64_t total_ = 0;
};

}  // namespace

absl::StatusOr<std::string> JsonSchemaToGbnf(std::string_view schema, const CompileLimits& limits) {
  if (static_cast<int64_t>(schema.size()) > limits.max_text_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("the schema is longer than ", limits.max_text_bytes, " bytes"));
  }
  absl::StatusOr<Value> parsed = jinja::ParseJson(schema);
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("not valid JSON: ", parsed.status().message()));
  }
  return SchemaConverter(limits).Convert(*parsed);
}

std::string JsonObjectGbnf() {
  return absl::StrCat("root ::= json-object\n", kBaseRules);
}

}  // namespace tandem::engine::constrain
