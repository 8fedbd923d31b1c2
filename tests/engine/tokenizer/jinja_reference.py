#!/usr/bin/env python3
"""Renders every chat template in chat_templates/ with several conversations,
once with Python's jinja2 set up as HF transformers sets it up and once with
Tandem's interpreter (jinja_render_tool), and fails unless the outputs are
byte-equal (or both renders fail; a raise_exception() message must match).

Usage: jinja_reference.py RENDER_TOOL TEMPLATES_DIR...
Exits 77 (ctest's skip code) when python3-jinja2 is not installed.
"""
import datetime
import glob
import json
import os
import subprocess
import sys
import tempfile

try:
    import jinja2
    from jinja2 import nodes
    from jinja2.ext import Extension, loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment
except ImportError:
    print("SKIP: python3-jinja2 is not installed (scripts/install_deps.sh installs it)")
    sys.exit(77)

NOW = datetime.datetime(2024, 7, 26, 12, 30, 5)


class RaisedException(Exception):
    pass


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    # As transformers' chat template renderer defines it.
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def strftime_now(format):
    return NOW.strftime(format)


class GenerationTracker(Extension):
    """transformers' {% generation %} block, which renders its body as is."""
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return nodes.CallBlock(self.call_method("_render"), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def make_env():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[GenerationTracker, loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city.",
        "parameters": {"type": "object", "properties": {
            "location": {"type": "string", "description": "City and country, e.g. Paris, France"},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
            "required": ["location"]}}},
    {"type": "function", "function": {
        "name": "search",
        "description": "Search the web.",
        "parameters": {"type": "object", "properties": {
            "query": {"type": "string"},
            "max_results": {"type": "integer", "default": 5},
            "tags": {"type": "array", "items": {"type": "string"}}},
            "required": ["query"]}}},
]

SYSTEM = {"role": "system", "content": "You are a helpful assistant."}
TOOL_CALL = {"id": "abcDEF123", "type": "function",
             "function": {"name": "get_weather", "arguments": {"location": "Paris, France", "unit": "celsius"}}}


def tool_turns(content):
    return [
        {"role": "user", "content": "What is the weather in Paris?"},
        {"role": "assistant", "content": content, "tool_calls": [TOOL_CALL]},
        {"role": "tool", "tool_call_id": "abcDEF123", "name": "get_weather",
         "content": "{\"temperature\": 21.5, \"condition\": \"sunny\"}"},
        {"role": "assistant", "content": "It is sunny and 21.5 °C in Paris."},
        {"role": "user", "content": "Thanks!"},
    ]


CONVERSATIONS = {
    "basic": dict(messages=[SYSTEM, {"role": "user", "content": "Hello!"}], add_generation_prompt=True),
    "multi_turn": dict(messages=[SYSTEM, {"role": "user", "content": "Hi"},
                                 {"role": "assistant", "content": "Hello, how can I help?"},
                                 {"role": "user", "content": "Tell me a joke."}], add_generation_prompt=True),
    "multi_turn_no_prompt": dict(messages=[SYSTEM, {"role": "user", "content": "Hi"},
                                           {"role": "assistant", "content": "Hello, how can I help?"}],
                                 add_generation_prompt=False),
    "no_system": dict(messages=[{"role": "user", "content": "Hi"},
                                {"role": "assistant", "content": "Hello!"},
                                {"role": "user", "content": "What is 2+2?"}], add_generation_prompt=True),
    "unicode_spaces": dict(messages=[{"role": "system", "content": "  Réponds en français, s'il te plaît.\n"},
                                     {"role": "user", "content": " 你好 \"quoted\" 'single' \\ back\n\ttab 🙂 "},
                                     {"role": "assistant", "content": "\n  Bonjour !  \n"},
                                     {"role": "user", "content": "<tag> & {{ not jinja }} {% raw %}"}],
                           add_generation_prompt=True),
    "tools": dict(messages=[SYSTEM, {"role": "user", "content": "What is the weather in Paris?"}],
                  tools=TOOLS, add_generation_prompt=True),
    "tools_no_system": dict(messages=[{"role": "user", "content": "Search for jinja."}],
                            tools=TOOLS, add_generation_prompt=True),
    "tool_calls": dict(messages=[SYSTEM] + tool_turns(None), tools=TOOLS, add_generation_prompt=True),
    "tool_calls_empty_content": dict(messages=tool_turns(""), tools=TOOLS, add_generation_prompt=True),
}


def context(conv):
    ctx = {"messages": conv["messages"], "tools": conv.get("tools"), "documents": None,
           "add_generation_prompt": conv["add_generation_prompt"],
           "bos_token": "<s>", "eos_token": "</s>"}
    return ctx


def render_python(env, source, ctx):
    try:
        return {"ok": True, "output": env.from_string(source).render(**ctx)}
    except jinja2.exceptions.TemplateError as e:
        return {"ok": False, "error": str(e), "raised": type(e) is jinja2.exceptions.TemplateError}
    except Exception as e:  # a type error in the template
        return {"ok": False, "error": f"{type(e).__name__}: {e}", "raised": False}


def main():
    tool, template_dirs = sys.argv[1], sys.argv[2:]
    env = make_env()
    templates = sorted(p for d in template_dirs for p in glob.glob(os.path.join(d, "*.jinja")))
    cases, expected = [], []
    for path in templates:
        source = open(path, encoding="utf-8").read()
        for name, conv in CONVERSATIONS.items():
            ctx = context(conv)
            cases.append({"template": path, "context": ctx, "name": f"{os.path.basename(path)} / {name}"})
            expected.append(render_python(env, source, ctx))
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False, encoding="utf-8") as f:
        json.dump({"now": {"year": NOW.year, "month": NOW.month, "day": NOW.day, "hour": NOW.hour,
                           "minute": NOW.minute, "second": NOW.second},
                   "cases": [{"template": c["template"], "context": c["context"]} for c in cases]}, f)
        cases_path = f.name
    try:
        proc = subprocess.run([tool, cases_path], capture_output=True, check=False)
    finally:
        os.unlink(cases_path)
    if proc.returncode != 0:
        print(proc.stderr.decode(errors="replace"))
        return 1
    got = json.loads(proc.stdout.decode("utf-8"))
    equal = both_failed = 0
    failures = []
    for case, want, have in zip(cases, expected, got):
        if want["ok"] and have["ok"] and want["output"] == have["output"]:
            equal += 1
        elif not want["ok"] and not have["ok"] and (not want["raised"] or have["error"].endswith(want["error"])):
            both_failed += 1
            if os.environ.get("VERBOSE"):
                print(f"BOTH FAILED {case['name']}: {want['error'][:100]} | {have['error'][:100]}")
        else:
            failures.append((case["name"], want, have))
    for name, want, have in failures:
        print(f"MISMATCH {name}")
        print("  jinja2: " + (repr(want["output"]) if want["ok"] else "error: " + want["error"])[:2000])
        print("  tandem: " + (repr(have["output"]) if have["ok"] else "error: " + have["error"])[:2000])
    print(f"{len(templates)} templates x {len(CONVERSATIONS)} conversations: {equal} byte-equal, "
          f"{both_failed} failing in both, {len(failures)} mismatched")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
