#include "engine/constrain/grammar.h"

#include <memory>
#include <string>
#include <vector>

#include "engine/constrain/constraint.h"
#include "engine/constrain/json_schema.h"
#include "engine/constrain/matcher.h"
#include "engine/constrain/regex.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tandem::engine::constrain {
namespace {

using ::testing::HasSubstr;

// A vocabulary of the 256 single bytes (ids = byte values) plus an end id.
std::shared_ptr<const TokenVocabulary> ByteVocab() {
  std::vector<std::string> bytes(257);
  for (int b = 0; b < 256; ++b) bytes[b] = std::string(1, static_cast<char>(b));
  return std::make_shared<TokenVocabulary>(bytes, std::vector<int32_t>{256});
}

// Whether the grammar accepts exactly `text` as a whole output.
bool Accepts(const std::string& gbnf, const std::string& text) {
  absl::StatusOr<Grammar> g = Grammar::Parse(gbnf);
  EXPECT_TRUE(g.ok()) << g.status();
  if (!g.ok()) return false;
  Matcher m(std::make_shared<CompiledGrammar>(*std::move(g), ByteVocab()));
  return m.AcceptBytes(text) && m.CanEnd();
}

bool SchemaAccepts(const std::string& schema, const std::string& json) {
  absl::StatusOr<std::string> gbnf = JsonSchemaToGbnf(schema);
  EXPECT_TRUE(gbnf.ok()) << gbnf.status();
  return gbnf.ok() && Accepts(*gbnf, json);
}

bool RegexAccepts(const std::string& re, const std::string& text) {
  absl::StatusOr<std::string> expr = RegexToGbnf(re, RegexTarget::kText);
  EXPECT_TRUE(expr.ok()) << expr.status();
  return expr.ok() && Accepts("root ::= " + *expr, text);
}

TEST(GrammarTest, ParsesRulesAlternativesAndRepetitions) {
  const std::string g = R"(
    root ::= greeting " " name ("!" | "?")?   # a comment
    greeting ::= "hi" | "hello"
    name ::= [A-Z] [a-z]{1,3}
  )";
  EXPECT_TRUE(Accepts(g, "hi Bob"));
  EXPECT_TRUE(Accepts(g, "hello Anna!"));
  EXPECT_TRUE(Accepts(g, "hi Al?"));
  EXPECT_FALSE(Accepts(g, "hi B"));
  EXPECT_FALSE(Accepts(g, "hi Bobby"));
  EXPECT_FALSE(Accepts(g, "hey Bob"));
  EXPECT_FALSE(Accepts(g, "hi Bob!!"));
}

TEST(GrammarTest, RulesContinueOnTheNextLine) {
  const std::string g = "root ::= \"a\"\n  \"b\"\n  | \"c\"\nx ::= \"y\"\n";
  EXPECT_TRUE(Accepts(g, "ab"));
  EXPECT_TRUE(Accepts(g, "c"));
  EXPECT_FALSE(Accepts(g, "a"));
}

TEST(GrammarTest, StarPlusAndCountedRepetition) {
  EXPECT_TRUE(Accepts("root ::= \"a\"*", ""));
  EXPECT_TRUE(Accepts("root ::= \"a\"*", "aaaa"));
  EXPECT_FALSE(Accepts("root ::= \"a\"+", ""));
  EXPECT_TRUE(Accepts("root ::= (\"ab\")+", "ababab"));
  EXPECT_TRUE(Accepts("root ::= \"x\"{2,}", "xxxxx"));
  EXPECT_FALSE(Accepts("root ::= \"x\"{2,}", "x"));
  EXPECT_TRUE(Accepts("root ::= \"x\"{3}", "xxx"));
  EXPECT_FALSE(Accepts("root ::= \"x\"{3}", "xxxx"));
}

TEST(GrammarTest, ClassesMatchWholeUtf8Characters) {
  const std::string g = R"(root ::= [^"]+)";
  EXPECT_TRUE(Accepts(g, "caf\xC3\xA9"));          // é: two bytes
  EXPECT_TRUE(Accepts(g, "\xF0\x9F\x98\x80"));     // U+1F600: four bytes
  EXPECT_FALSE(Accepts(g, "a\"b"));
  EXPECT_FALSE(Accepts(g, "\xC3"));                // half a character
  EXPECT_FALSE(Accepts(g, "\xED\xA0\x80"));        // a surrogate is not UTF-8
  EXPECT_TRUE(Accepts(R"(root ::= [\u00e0-\u00ff])", "\xC3\xA9"));
  EXPECT_FALSE(Accepts(R"(root ::= [\u00e0-\u00ff])", "e"));
  EXPECT_TRUE(Accepts("root ::= .", "\xE2\x82\xAC"));  // €
}

TEST(GrammarTest, ErrorsNameTheLineOrTheRule) {
  auto error = [](const std::string& text) {
    absl::StatusOr<Grammar> g = Grammar::Parse(text);
    EXPECT_FALSE(g.ok());
    EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument);
    return std::string(g.status().message());
  };
  EXPECT_THAT(error("root ::= foo"), HasSubstr("undefined rule 'foo'"));
  EXPECT_THAT(error("start ::= \"a\""), HasSubstr("no 'root' rule"));
  EXPECT_THAT(error("root ::= root \"a\" | \"b\""), HasSubstr("left-recursive"));
  EXPECT_THAT(error("root ::= x\nx ::= \"a\" x"), HasSubstr("matches nothing"));
  EXPECT_THAT(error("root ::= \"a\"\nroot ::= \"b\""), HasSubstr("defined twice"));
  EXPECT_THAT(error("root ::= \"abc"), HasSubstr("1:"));
  EXPECT_THAT(error("root ::= \"a\"\nx ::= [b"), HasSubstr("2:"));
  EXPECT_THAT(error("root ::= \"a\"{5,2}"), HasSubstr("n < m"));
  EXPECT_THAT(error(""), HasSubstr("no rules"));
  absl::StatusOr<Grammar> big = Grammar::Parse("root ::= \"a\"{900}", {.max_elements = 100});
  EXPECT_FALSE(big.ok());
}

TEST(GrammarTest, DeadAlternativesArePruned) {
  // `x` can never finish, so "b" x is dropped and "b" leads nowhere.
  const std::string g = "root ::= \"a\" | \"b\" x\nx ::= \"c\" x";
  absl::StatusOr<Grammar> parsed = Grammar::Parse(g);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  Matcher m(std::make_shared<CompiledGrammar>(*std::move(parsed), ByteVocab()));
  EXPECT_FALSE(m.AcceptBytes("b"));
  EXPECT_TRUE(m.AcceptBytes("a"));
  EXPECT_TRUE(m.IsTerminated());
}

TEST(GrammarTest, HostileGrammarsStayBounded) {
  // A chain of 50000 rules: expanded without recursion.
  std::string chain = "root ::= r0\n";
  for (int i = 0; i < 50000; ++i) chain += "r" + std::to_string(i) + " ::= r" + std::to_string(i + 1) + "\n";
  chain += "r50000 ::= \"x\"\n";
  EXPECT_TRUE(Accepts(chain, "x"));
  EXPECT_FALSE(Grammar::Parse("root ::= \"a\"" + std::string(1000, '*')).ok());
  // Each level doubles the ways to derive nothing: the expansion stops at
  // its bound instead of running 2^30 steps.
  std::string doubling = "root ::= e0 \"a\"\n";
  for (int i = 0; i < 30; ++i) {
    doubling += "e" + std::to_string(i) + " ::= e" + std::to_string(i + 1) + " e" +
                std::to_string(i + 1) + "\n";
  }
  doubling += "e30 ::= \"\" | \"b\"\n";
  absl::StatusOr<Grammar> g = Grammar::Parse(doubling);
  ASSERT_TRUE(g.ok()) << g.status();
  auto compiled = std::make_shared<CompiledGrammar>(*std::move(g), ByteVocab(),
                                                    MatcherLimits{.max_stacks = 64});
  Matcher m(compiled);
  std::vector<uint64_t> mask(static_cast<size_t>(compiled->mask_words()));
  (void)m.FillMask(mask);  // either answer, promptly
}

TEST(RegexTest, CommonSyntax) {
  EXPECT_TRUE(RegexAccepts(R"(\d{3}-\d{4})", "555-1234"));
  EXPECT_FALSE(RegexAccepts(R"(\d{3}-\d{4})", "55-1234"));
  EXPECT_TRUE(RegexAccepts("^(cat|dog)s?$", "dogs"));
  EXPECT_FALSE(RegexAccepts("^(cat|dog)s?$", "cow"));
  EXPECT_TRUE(RegexAccepts(R"([A-Z][a-z]*(?: [A-Z][a-z]*)*)", "New York City"));
  EXPECT_TRUE(RegexAccepts(R"(\w+@\w+\.com)", "me@example.com"));
  EXPECT_TRUE(RegexAccepts("a.c", "a\xC3\xA9" "c"));
  EXPECT_FALSE(RegexAccepts("a.c", "a\nc"));
  EXPECT_TRUE(RegexAccepts(R"([^\s]+)", "x-y"));
  EXPECT_FALSE(RegexAccepts(R"([^\s]+)", "x y"));
  EXPECT_TRUE(RegexAccepts(R"(\u00e9|\x41)", "A"));
  EXPECT_TRUE(RegexAccepts("(?<year>[0-9]{4})", "2026"));
  EXPECT_TRUE(RegexAccepts("a{2,3}?b", "aab"));
}

TEST(RegexTest, UnsupportedFeaturesAreRefusedWithTheOffset) {
  auto error = [](const std::string& re) {
    absl::StatusOr<std::string> g = RegexToGbnf(re, RegexTarget::kText);
    EXPECT_FALSE(g.ok());
    return std::string(g.status().message());
  };
  EXPECT_THAT(error(R"((a)\1)"), HasSubstr("backreferences"));
  EXPECT_THAT(error("(?=a)"), HasSubstr("lookaround"));
  EXPECT_THAT(error("a(b"), HasSubstr("missing ')'"));
  EXPECT_THAT(error("a)"), HasSubstr("at offset 1"));
  EXPECT_THAT(error("*a"), HasSubstr("nothing to repeat"));
  EXPECT_THAT(error("[z-a]"), HasSubstr("reversed"));
  EXPECT_THAT(error("a{1001}"), HasSubstr("exceeds"));
}

TEST(RegexTest, JsonStringTargetEscapes) {
  absl::StatusOr<std::string> expr = RegexToGbnf(R"(a"[\\b]\n)", RegexTarget::kJsonString);
  ASSERT_TRUE(expr.ok()) << expr.status();
  // The JSON texts of a"\<newline> and a"b<newline>.
  EXPECT_TRUE(Accepts("root ::= " + *expr, R"(a\"\\\n)"));
  EXPECT_TRUE(Accepts("root ::= " + *expr, R"(a\"b\n)"));
  EXPECT_FALSE(Accepts("root ::= " + *expr, "a\"b\n"));
}

constexpr char kPerson[] = R"({
  "type": "object",
  "title": "Person",
  "properties": {
    "name": {"type": "string", "minLength": 1, "maxLength": 8},
    "age": {"type": "integer"},
    "email": {"type": "string", "pattern": "^[a-z]+@[a-z]+\\.org$"},
    "tags": {"type": "array", "items": {"enum": ["a", "b", 3]}, "minItems": 1, "maxItems": 2},
    "kind": {"anyOf": [{"const": "cat"}, {"type": "null"}]}
  },
  "required": ["name", "age"],
  "additionalProperties": false
})";

TEST(JsonSchemaTest, ObjectsWithRequiredAndOptionalProperties) {
  EXPECT_TRUE(SchemaAccepts(kPerson, R"({"name":"Al","age":3})"));
  EXPECT_TRUE(SchemaAccepts(kPerson, R"({ "name": "Al", "age": -12, "kind": null })"));
  EXPECT_TRUE(SchemaAccepts(kPerson, R"({"name":"Al","age":0,"email":"x@y.org","tags":["a",3]})"));
  EXPECT_TRUE(SchemaAccepts(kPerson, "{\n  \"name\": \"\\u00e9\",\n  \"age\": 7,\n  \"kind\": \"cat\"\n}"));
  EXPECT_FALSE(SchemaAccepts(kPerson, R"({"age":3,"name":"Al"})"));        // order
  EXPECT_FALSE(SchemaAccepts(kPerson, R"({"name":"Al"})"));                // required
  EXPECT_FALSE(SchemaAccepts(kPerson, R"({"name":"","age":3})"));          // minLength
  EXPECT_FALSE(SchemaAccepts(kPerson, R"({"name":"Al","age":3.5})"));      // integer
  EXPECT_FALSE(SchemaAccepts(kPerson, R"({"name":"Al","age":3,"x":1})"));  // additional
  EXPECT_FALSE(SchemaAccepts(kPerson, R"({"name":"Al","age":3,"tags":[]})"));
  EXPECT_FALSE(SchemaAccepts(kPerson, R"({"name":"Al","age":3,"tags":["a","b","a"]})"));
  EXPECT_FALSE(SchemaAccepts(kPerson, R"({"name":"Al","age":3,"email":"x@y.com"})"));
  EXPECT_FALSE(SchemaAccepts(kPerson, R"({"name":"Al","age":01})"));
  EXPECT_FALSE(SchemaAccepts(kPerson, R"({"name":"Al","age":3} )"));  // nothing after
}

TEST(JsonSchemaTest, OnlyOptionalPropertiesAndAdditionalOnes) {
  const std::string s = R"({"properties": {"a": {"type": "boolean"}, "b": {"type": "number"}},
                           "additionalProperties": {"type": "string"}})";
  EXPECT_TRUE(SchemaAccepts(s, "{}"));
  EXPECT_TRUE(SchemaAccepts(s, R"({"b":1.5e3})"));
  EXPECT_TRUE(SchemaAccepts(s, R"({"a":true,"b":2,"z":"q"})"));
  EXPECT_TRUE(SchemaAccepts(s, R"({"z":"q","y":"r"})"));
  EXPECT_FALSE(SchemaAccepts(s, R"({"z":1})"));
  EXPECT_FALSE(SchemaAccepts(s, R"({,"b":1})"));
  EXPECT_FALSE(SchemaAccepts(s, R"({"b":1,})"));
}

TEST(JsonSchemaTest, RecursiveReferencesAndDefinitions) {
  const std::string s = R"({"$defs": {"node": {"type": "object",
      "properties": {"v": {"type": "integer"},
                     "next": {"anyOf": [{"$ref": "#/$defs/node"}, {"type": "null"}]}},
      "required": ["v", "next"]}},
    "$ref": "#/$defs/node"})";
  EXPECT_TRUE(SchemaAccepts(s, R"({"v":1,"next":{"v":2,"next":null}})"));
  EXPECT_FALSE(SchemaAccepts(s, R"({"v":1,"next":{"v":2}})"));
}

TEST(JsonSchemaTest, ArraysTuplesAndFreeValues) {
  EXPECT_TRUE(SchemaAccepts(R"({"type":"array","prefixItems":[{"type":"string"},{"type":"integer"}],"items":false})",
                            R"(["a", 1])"));
  EXPECT_FALSE(SchemaAccepts(R"({"type":"array","prefixItems":[{"type":"string"},{"type":"integer"}],"items":false})",
                             R"(["a", 1, 2])"));
  EXPECT_TRUE(SchemaAccepts(R"({"type":"array"})", R"([1, "x", {"a": [true, null]}])"));
  EXPECT_TRUE(SchemaAccepts(R"({})", R"("anything")"));
  EXPECT_TRUE(SchemaAccepts(R"({"type":["string","null"]})", "null"));
  EXPECT_TRUE(SchemaAccepts(R"({"type":"string","format":"date"})", R"("2026-11-25")"));
  EXPECT_FALSE(SchemaAccepts(R"({"type":"string","format":"date"})", R"("2026-13-25")"));
  EXPECT_TRUE(Accepts(JsonObjectGbnf(), R"({"a": [1, 2.5, "x"], "b": {}})"));
  EXPECT_FALSE(Accepts(JsonObjectGbnf(), R"([1])"));
}

TEST(JsonSchemaTest, UnsupportedOrInvalidSchemasNameThePath) {
  auto error = [](const std::string& schema) {
    absl::StatusOr<Grammar> g =
        CompileConstraint({.kind = OutputConstraint::Kind::kJsonSchema, .source = schema});
    EXPECT_FALSE(g.ok());
    EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument);
    return std::string(g.status().message());
  };
  EXPECT_THAT(error(R"({"properties": {"age": {"type": "integer", "minimum": 0}}})"),
              HasSubstr("at /properties/age: `minimum` is not supported"));
  EXPECT_THAT(error(R"({"type": "strin"})"), HasSubstr("unknown type"));
  EXPECT_THAT(error(R"({"$ref": "#/$defs/missing"})"), HasSubstr("does not resolve"));
  EXPECT_THAT(error(R"({"$ref": "http://x/y"})"), HasSubstr("within the document"));
  EXPECT_THAT(error(R"({"type": "string", "pattern": "(a"})"), HasSubstr("/pattern"));
  EXPECT_THAT(error(R"({"type": "string", "format": "uri"})"), HasSubstr("\"uri\""));
  EXPECT_THAT(error("{\"type\": "), HasSubstr("not valid JSON"));
  EXPECT_THAT(error("false"), HasSubstr("matches nothing"));
  EXPECT_THAT(error(R"({"type":"array","minItems":3,"maxItems":2})"), HasSubstr("minItems"));
}

TEST(JsonSchemaTest, FiftyPropertiesCompile) {
  std::string s = R"({"type":"object","properties":{)";
  for (int i = 0; i < 50; ++i) {
    if (i > 0) s += ",";
    s += "\"field_" + std::to_string(i) + "\":{\"type\":\"" +
         (i % 3 == 0 ? "string" : i % 3 == 1 ? "integer" : "boolean") + "\"}";
  }
  s += R"(},"required":["field_0","field_10","field_49"]})";
  absl::StatusOr<Grammar> g =
      CompileConstraint({.kind = OutputConstraint::Kind::kJsonSchema, .source = s});
  ASSERT_TRUE(g.ok()) << g.status();
}

}  // namespace
}  // namespace tandem::engine::constrain
