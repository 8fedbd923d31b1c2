// The Jinja interpreter, feature by feature: each case's expected text is
// what Python's jinja2 3.1 renders for the same source under HF
// transformers' settings (generated with jinja_reference.py's environment),
// then errors with their positions and the render limits.
#include "engine/tokenizer/jinja/template.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "engine/tokenizer/jinja/json.h"

namespace tandem::engine::jinja {
namespace {

using ::testing::HasSubstr;

struct Case {
  const char* name;
  const char* source;
  const char* expected;
};

const Case kCases[] = {
    {"trim_and_lstrip_blocks",
     "  {% if true %}\nyes\n  {% endif %}\nend\n",
     "yes\nend"},
    {"dash_whitespace_control",
     "a  \n {%- if true -%}  \n b {{- ' c ' -}} \n d{% endif %}",
     "ab c d"},
    {"plus_keeps_whitespace",
     "x\n  {%+ if true +%}\ny{% endif %}",
     "x\n  \ny"},
    {"comments",
     "a {# note #}\n  {#- gone -#}  b\n{# line #}\nc",
     "a b\nc"},
    {"loop_variables",
     "{% for x in ['a','b','c'] %}{{ loop.index }}{{ loop.index0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}{{ loop.revindex }}{% if not loop.last %},{% endif %}{% endfor %}",
     "10TrueFalse33,21FalseFalse32,32FalseTrue31"},
    {"loop_filter_else_break_continue",
     "{% for x in range(10) if x is odd %}{% if x == 7 %}{% break %}{% endif %}{% if x == 3 %}{% continue %}{% endif %}{{ x }}/{{ loop.length }} {% endfor %}{% for y in [] %}no{% else %}empty{% endfor %}",
     "1/5 5/5 empty"},
    {"set_in_loop_does_not_leak",
     "{% set x = 1 %}{% for i in range(2) %}{% set x = x + 10 %}{{ x }} {% endfor %}{{ x }}",
     "11 11 1"},
    {"namespace",
     "{% set ns = namespace(n=0, s='') %}{% for i in range(4) %}{% set ns.n = ns.n + i %}{% set ns.s = ns.s ~ i %}{% endfor %}{{ ns.n }} {{ ns.s }}",
     "6 0123"},
    {"macro_defaults_and_keywords",
     "{% macro tag(name, body='x', close=true) %}<{{ name }}>{{ body }}{% if close %}</{{ name }}>{% endif %}{% endmacro %}{{ tag('a') }}{{ tag('b', 'y') }}{{ tag('c', close=false) }}",
     "<a>x</a><b>y</b><c>x"},
    {"set_block",
     "{% set block %}\n  hello {{ 1 + 1 }}\n{% endset %}[{{ block }}]",
     "[  hello 2\n]"},
    {"arithmetic",
     "{{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 2 ** 10 }} {{ 1 + 2 * 3 - 4 }} {{ 1.5 + 1 }} {{ 10 / 4 * 2 }} {{ 3 - -1 }}",
     "3 -4 2 3.5 1024 3 2.5 5.0 4"},
    {"strings",
     "{{ 'a' ~ 1 ~ none }} {{ 'ab' * 3 }} {{ 'Hello'[1:3] }} {{ 'Hello'[::-1] }} {{ 'Hello'[-1] }} {{ '\xc3""\xa9""\xe4""\xbd""\xa0""\xe5""\xa5""\xbd""'[1] }} {{ 'x' in 'xyz' }} {{ 'q' not in 'xyz' }}",
     "a1None ababab el olleH o \xe4""\xbd""\xa0"" True True"},
    {"string_methods",
     "{{ '  a b  '.strip() }}|{{ 'xxaxx'.strip('x') }}|{{ '  a'.lstrip() }}|{{ 'a  '.rstrip() }}|{{ 'a,b,,c'.split(',') }}|{{ ' a  b '.split() }}|{{ 'abc'.startswith('ab') }}|{{ 'abc'.endswith(('x', 'bc')) }}|{{ 'aBc'.upper() }}{{ 'aBc'.lower() }}|{{ 'hello wORLD'.title() }}|{{ 'a-a'.replace('a', 'b') }}|{{ '{} and {name}'.format(1, name='n') }}|{{ 'hello'.capitalize() }}|{{ 'a b'.split(' ', 1) }}",
     "a b|a|a|a|['a', 'b', '', 'c']|['a', 'b']|True|True|ABCabc|Hello World|b-b|1 and n|Hello|['a', 'b']"},
    {"lists_and_slices",
     "{% set xs = [1, 2, 3, 4, 5] %}{{ xs[1:] }} {{ xs[:-1] }} {{ xs[::-1] }} {{ xs[::2] }} {{ xs[-2] }} {{ xs[1:4:2] }} {{ xs | length }} {{ 3 in xs }} {{ xs + [6] }} {{ xs[10] is defined }}",
     "[2, 3, 4, 5] [1, 2, 3, 4] [5, 4, 3, 2, 1] [1, 3, 5] 4 [2, 4] 5 True [1, 2, 3, 4, 5, 6] False"},
    {"dicts",
     "{% set d = {'b': 1, 'a': [1, 'x'], 'c': none} %}{{ d }} {{ d.b }} {{ d['a'][1] }} {{ d.get('z', 'dflt') }} {{ d.get('b') }} {{ d.keys() | list }} {{ d.values() | list }} {% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %} {{ 'a' in d }}",
     "{'b': 1, 'a': [1, 'x'], 'c': None} 1 x dflt 1 ['b', 'a', 'c'] [1, [1, 'x'], None] b=1;a=[1, 'x'];c=None; True"},
    {"repr",
     "{{ [1, 'a', \"it's\", none, true, false, 1.5, 2.0, 1e20, 0.0001, 1e-5, {'k': [none]}] }}",
     "[1, 'a', \"it's\", None, True, False, 1.5, 2.0, 1e+20, 0.0001, 1e-05, {'k': [None]}]"},
    {"ternary_and_logic",
     "{{ 'y' if 1 > 0 else 'n' }} {{ 'y' if [] else 'n' }} {{ none or 'b' }} {{ 0 and 'x' }} {{ not none }} {{ 1 < 2 < 3 }} {{ 1 == 1.0 }} {{ true == 1 }} [{{ 'x' if false }}]",
     "y n b 0 True True True True []"},
    {"tests",
     "{{ x is defined }} {{ none is none }} {{ 'a' is string }} {{ {} is mapping }} {{ [] is iterable }} {{ 1.5 is number }} {{ [] is sequence }} {{ true is boolean }} {{ 2 is even }} {{ 3 is odd }} {{ 9 is divisibleby 3 }} {{ 'a' is equalto 'a' }} {{ true is true }} {{ 0 is false }} {{ 1 is integer }} {{ 1.0 is float }} {{ x is undefined }} {{ 'a' is not none }}",
     "False True True True True True True True True True True True True False True True True True"},
    {"tojson",
     "{{ {'a': [1, 2.5, '\xc3""\xa9""\"\\n'], 'b': {}, 'c': [], 'd': none, 'e': true} | tojson }}|{{ {'a': [1, {'b': 2}], 'c': []} | tojson(indent=2) }}|{{ 'x' | tojson }}|{{ {'z': 1, 'a': 2} | tojson(sort_keys=true) }}|{{ {'a': 1} | tojson(separators=(',', ':')) }}",
     "{\"a\": [1, 2.5, \"\xc3""\xa9""\\\"\\n\"], \"b\": {}, \"c\": [], \"d\": null, \"e\": true}|{\n  \"a\": [\n    1,\n    {\n      \"b\": 2\n    }\n  ],\n  \"c\": []\n}|\"x\"|{\"a\": 2, \"z\": 1}|{\"a\":1}"},
    {"filters_text",
     "{{ '  x  ' | trim }}|{{ 'ab' | upper }}|{{ 'AB' | lower }}|{{ 'hello big-world (x)' | title }}|{{ 'hELLO' | capitalize }}|{{ 'a b c' | wordcount }}|{{ 'aXbX' | replace('X', '-') }}|{{ 42 | string }}|{{ 'abc' | reverse }}|{{ 'line1\\nline2\\n\\nline3' | indent(2) }}|{{ 'a\\nb' | indent(2, first=true) }}",
     "x|AB|ab|Hello Big-World (X)|Hello|3|a-b-|42|cba|line1\n  line2\n\n  line3|  a\n  b"},
    {"filters_numbers",
     "{{ '42' | int }} {{ '4.7' | int }} {{ 'x' | int }} {{ 'x' | int(7) }} {{ '2.5' | float }} {{ 3 | float }} {{ 2.567 | round(2) }} {{ 2.5 | round }} {{ -3 | abs }} {{ [1, 2, 3] | sum }} {{ [3, 1, 2] | max }} {{ [3, 1, 2] | min }}",
     "42 4 0 7 2.5 3.0 2.57 2.0 3 6 3 1"},
    {"filters_lists",
     "{% set xs = [{'n': 'b', 'k': 1}, {'n': 'a', 'k': 2}, {'n': 'B', 'k': 1}] %}{{ xs | map(attribute='n') | join(', ') }}|{{ xs | selectattr('k', 'equalto', 1) | map(attribute='n') | list }}|{{ xs | rejectattr('k', '==', 1) | list | length }}|{{ xs | sort(attribute='n') | map(attribute='n') | join }}|{{ ['b', 'A', 'a', 'B'] | unique | list }}|{{ ['b', 'A', 'c'] | sort }}|{{ [3, 1, 2] | sort(reverse=true) }}|{{ xs | first }}|{{ [1, 2] | last }}|{{ 'ab' | list }}|{{ {'b': 1, 'a': 2} | dictsort }}|{{ {'b': 1, 'a': 2} | items | list }}|{{ [1, 2, 3] | select('odd') | list }}|{{ ['a', 'b'] | map('upper') | join('-') }}|{{ [none, 1, 0, 'x'] | select | list }}",
     "b, a, B|['b', 'B']|1|abB|['b', 'A']|['A', 'b', 'c']|[3, 2, 1]|{'n': 'b', 'k': 1}|2|['a', 'b']|[('a', 2), ('b', 1)]|[('b', 1), ('a', 2)]|[1, 3]|A-B|[1, 'x']"},
    {"default",
     "{{ x | default('d') }} {{ none | default('d') }} {{ '' | default('d', true) }} {{ x | d('short') }} {{ 0 | default(5) }}",
     "d None d short 0"},
    {"undefined_prints_empty",
     "[{{ x }}][{{ x | length }}][{% for i in x %}{{ i }}{% endfor %}][{{ x ~ 'a' }}][{{ {'a': 1}.b }}]",
     "[][0][][a][]"},
    {"strftime_now",
     "{{ strftime_now('%d %b %Y') }} {{ strftime_now('%Y-%m-%d %H:%M:%S %A') }}",
     "26 Jul 2024 2024-07-26 12:30:05 Friday"},
    {"unicode",
     "{{ '\xc3""\xa9""\xe4""\xbd""\xa0""\xe5""\xa5""\xbd""\xf0""\x9f""\x99""\x82""' | length }} {{ '\xc3""\xa9""\xe4""\xbd""\xa0""\xe5""\xa5""\xbd""\xf0""\x9f""\x99""\x82""' | tojson }} {{ '\xc3""\xa9""\xe4""\xbd""\xa0""\xe5""\xa5""\xbd""\xf0""\x9f""\x99""\x82""'[::-1] }} {{ ['\xc3""\xa9""'] }}",
     "4 \"\xc3""\xa9""\xe4""\xbd""\xa0""\xe5""\xa5""\xbd""\xf0""\x9f""\x99""\x82""\" \xf0""\x9f""\x99""\x82""\xe5""\xa5""\xbd""\xe4""\xbd""\xa0""\xc3""\xa9"" ['\xc3""\xa9""']"},
    {"generation_block_and_filter_block",
     "{% generation %}gen {{ 1 }}{% endgeneration %}|{% filter upper %}shout {{ 'x' }}{% endfilter %}",
     "gen 1|SHOUT X"},
    {"markup_safe_escapes_plain",
     "{{ 'a<'|safe + '<b>' }}|{{ '<i>' + '&'|safe }}|{{ '<x>' ~ '<y>'|safe }}",
     "a<&lt;b&gt;|&lt;i&gt;&|<x><y>"},
    {"range_and_dict_global",
     "{{ range(3) | list }} {{ range(1, 7, 2) | list }} {{ range(5, 0, -2) | list }} {{ dict(a=1, b='x') }}",
     "[0, 1, 2] [1, 3, 5] [5, 3, 1] {'a': 1, 'b': 'x'}"},
    {"string_concat_in_loop_with_trim",
     "{%- for m in ms %}\n    {{- m.role + ': ' + m.content | trim }}\n{% endfor %}",
     "user: hi\nassistant: yo\n"},
};

Dict Context() {
  absl::StatusOr<Value> ms = ParseJson(
      R"([{"role": "user", "content": "  hi  "}, {"role": "assistant", "content": "yo\n"}])");
  Dict d;
  d.Set("ms", *ms);
  return d;
}

RenderOptions Options() {
  RenderOptions o;
  o.now = RenderTime{2024, 7, 26, 12, 30, 5};
  return o;
}

absl::StatusOr<std::string> Render(std::string_view source, const RenderOptions& options = Options()) {
  absl::StatusOr<Template> t = Template::Parse(source);
  if (!t.ok()) return t.status();
  return t->Render(Context(), options);
}

TEST(JinjaTest, RendersAsJinja2Does) {
  for (const Case& c : kCases) {
    absl::StatusOr<std::string> out = Render(c.source);
    ASSERT_TRUE(out.ok()) << c.name << ": " << out.status();
    EXPECT_EQ(*out, c.expected) << c.name;
  }
}

TEST(JinjaTest, SyntaxErrorsNameTheirPosition) {
  EXPECT_THAT(Render("ok\n  {% if x %}never closed").status().message(), HasSubstr("2:25: unexpected end of template"));
  EXPECT_THAT(Render("{{ 1 + }}").status().message(), HasSubstr("1:8: expected an expression"));
  EXPECT_THAT(Render("a\n{% frobnicate %}").status().message(), HasSubstr("2:4: unknown statement 'frobnicate'"));
  EXPECT_THAT(Render("{{ 'unterminated }}").status().message(), HasSubstr("1:4: unterminated string"));
  EXPECT_EQ(Render("{% for %}").status().code(), absl::StatusCode::kInvalidArgument);
  // Nesting that would exhaust the stack is a syntax error.
  EXPECT_THAT(Render("{{ " + std::string(100000, '(') + "1" + std::string(100000, ')') + " }}").status().message(),
              HasSubstr("nested too deeply"));
  EXPECT_THAT(Render("{{ " + std::string(100000, '-') + "1 }}").status().message(), HasSubstr("nested too deeply"));
  std::string chain = "{{ 1";
  for (int i = 0; i < 100000; ++i) chain += " + 1";
  EXPECT_THAT(Render(chain + " }}").status().message(), HasSubstr("nested too deeply"));
  std::string filters = "{{ 'x'";
  for (int i = 0; i < 100000; ++i) filters += " | trim";
  EXPECT_THAT(Render(filters + " }}").status().message(), HasSubstr("nested too deeply"));
  std::string ifs;
  for (int i = 0; i < 10000; ++i) ifs += "{% if true %}";
  EXPECT_THAT(Render(ifs).status().message(), HasSubstr("nested too deeply"));
}

TEST(JinjaTest, RaiseExceptionAndTypeErrorsNameTheirPosition) {
  absl::StatusOr<std::string> raised = Render("x\n  {{ raise_exception('Roles must alternate') }}");
  EXPECT_EQ(raised.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(raised.status().message(), "2:6: Roles must alternate");
  EXPECT_THAT(Render("{{ 'a' + 1 }}").status().message(), HasSubstr("1:8: unsupported operand"));
  EXPECT_THAT(Render("{{ x.y }}").status().message(), HasSubstr("'x' is undefined"));
  EXPECT_THAT(Render("{{ [].append(1) }}").status().message(), HasSubstr("unsafe"));
  EXPECT_THAT(Render("{{ 1 | nosuchfilter }}").status().message(), HasSubstr("No filter named 'nosuchfilter'"));
  EXPECT_THAT(Render("{{ none | tojson }}{{ x | tojson }}").status().message(), HasSubstr("not JSON serializable"));
  // Arguments of the wrong type fail by name (found by jinja_fuzz).
  EXPECT_THAT(Render("{{ 'a' | indent([1]) }}").status().message(), HasSubstr("indent: width"));
  EXPECT_THAT(Render("{{ 1.5 | round('x') }}").status().message(), HasSubstr("round: precision"));
  // Python raises on an empty separator; here it splits nothing rather
  // than looping.
  EXPECT_EQ(*Render("{{ 'abc'.split('') }}"), "['abc']");
}

TEST(JinjaTest, LimitsStopHostileTemplates) {
  RenderOptions o = Options();
  o.limits.max_steps = 10'000;
  absl::StatusOr<std::string> loop = Render("{% for i in range(1000) %}{% for j in range(1000) %}{% endfor %}{% endfor %}", o);
  EXPECT_EQ(loop.status().code(), absl::StatusCode::kResourceExhausted);
  o = Options();
  o.limits.max_output_bytes = 1000;
  absl::StatusOr<std::string> big = Render("{% for i in range(100) %}{{ 'x' * 50 }}{% endfor %}", o);
  EXPECT_EQ(big.status().code(), absl::StatusCode::kResourceExhausted);
  absl::StatusOr<std::string> doubling = Render(
      "{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set ns.s = ns.s + ns.s %}{% endfor %}", o);
  EXPECT_EQ(doubling.status().code(), absl::StatusCode::kResourceExhausted);
  o = Options();
  o.limits.max_steps = 100'000;
  absl::StatusOr<std::string> lists = Render(
      "{% set ns = namespace(l=[1]) %}{% for i in range(64) %}{% set ns.l = ns.l + ns.l %}{% endfor %}", o);
  EXPECT_EQ(lists.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(Render("{{ range(100000000) | length }}", o).status().code(), absl::StatusCode::kResourceExhausted);
  absl::StatusOr<std::string> recursion = Render("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}");
  EXPECT_EQ(recursion.status().code(), absl::StatusCode::kResourceExhausted);
}

TEST(JinjaTest, ParsedTemplateRendersManyContexts) {
  absl::StatusOr<Template> t = Template::Parse("{{ bos_token }}{% for m in messages %}{{ m.content }}{% endfor %}");
  ASSERT_TRUE(t.ok());
  for (int i = 0; i < 3; ++i) {
    Dict ctx;
    ctx.Set("bos_token", Value("<s>"));
    ctx.Set("messages", Value(List{Value(Dict{{{Value("content"), Value(std::to_string(i))}}})}));
    absl::StatusOr<std::string> out = t->Render(ctx, Options());
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_EQ(*out, "<s>" + std::to_string(i));
  }
}

TEST(JinjaJsonTest, RoundTripsAsPythonPrintsIt) {
  absl::StatusOr<Value> v = ParseJson(R"({"a": [1, 2.5, -3e-7, "\u00e9\ud83d\ude42\n"], "b": {"c": null, "d": true}})");
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(*ToJson(*v), "{\"a\": [1, 2.5, -3e-07, \"\xc3\xa9\xf0\x9f\x99\x82\\n\"], \"b\": {\"c\": null, \"d\": true}}");
  JsonFormat ascii;
  ascii.ensure_ascii = true;
  EXPECT_EQ(*ToJson(Value("\xc3\xa9\xf0\x9f\x99\x82"), ascii), "\"\\u00e9\\ud83d\\ude42\"");
  EXPECT_FALSE(ParseJson("{\"a\": }").ok());
  EXPECT_FALSE(ParseJson("[1, 2").ok());
}

}  // namespace
}  // namespace tandem::engine::jinja
