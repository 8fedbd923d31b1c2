// Renders chat templates for jinja_reference.py, which compares the output
// with Python's jinja2 byte for byte. Reads a JSON document
// {"now": {...}, "cases": [{"template": PATH, "context": {...}}, ...]} from
// argv[1] and prints [{"ok": true, "output": TEXT} | {"ok": false,
// "error": MESSAGE}, ...] as JSON on stdout.
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>

#include "engine/tokenizer/jinja/json.h"
#include "engine/tokenizer/jinja/template.h"

namespace jinja = tandem::engine::jinja;

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: jinja_render_tool CASES.json\n";
    return 2;
  }
  std::ifstream in(argv[1], std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  absl::StatusOr<jinja::Value> doc = jinja::ParseJson(ss.str());
  if (!doc.ok() || !doc->is_dict()) {
    std::cerr << "bad cases file: " << doc.status() << "\n";
    return 2;
  }
  jinja::RenderOptions options;
  if (const jinja::Value* now = doc->as_dict().Find("now"); now != nullptr && now->is_dict()) {
    auto field = [&](const char* name, int def) {
      const jinja::Value* v = now->as_dict().Find(name);
      return v != nullptr && v->is_int() ? static_cast<int>(v->as_int()) : def;
    };
    options.now = {field("year", 2024), field("month", 1), field("day", 1),
                   field("hour", 0),    field("minute", 0), field("second", 0)};
  }
  jinja::List results;
  const jinja::Value* cases = doc->as_dict().Find("cases");
  for (const jinja::Value& c : cases->as_list()) {
    std::ifstream t(c.as_dict().Find("template")->as_string(), std::ios::binary);
    std::stringstream src;
    src << t.rdbuf();
    jinja::Dict result;
    absl::StatusOr<jinja::Template> tmpl = jinja::Template::Parse(src.str());
    absl::StatusOr<std::string> out = tmpl.ok() ? tmpl->Render(c.as_dict().Find("context")->as_dict(), options)
                                                : absl::StatusOr<std::string>(tmpl.status());
    result.Set("ok", jinja::Value(out.ok()));
    if (out.ok()) result.Set("output", jinja::Value(*out));
    else result.Set("error", jinja::Value(std::string(out.status().ToString())));
    results.push_back(jinja::Value(std::move(result)));
  }
  absl::StatusOr<std::string> json = jinja::ToJson(jinja::Value(std::move(results)));
  std::cout << *json;
  return 0;
}
