// libFuzzer target: the Jinja interpreter that renders a model's chat
// template. The input is the template source; it is rendered with a fixed
// conversation (tools and a tool call included) under small limits. Any
// input gives a rendering or an error status, never a crash, a hang or
// unbounded memory.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "engine/tokenizer/jinja/json.h"
#include "engine/tokenizer/jinja/template.h"

namespace jinja = tandem::engine::jinja;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const jinja::Dict* const kContext = [] {
    auto* d = new jinja::Dict();
    d->Set("messages", *jinja::ParseJson(R"([
      {"role": "system", "content": "S"},
      {"role": "user", "content": "  hi \u00e9 "},
      {"role": "assistant", "content": null, "tool_calls": [{"id": "abcDEF123", "type": "function",
        "function": {"name": "f", "arguments": {"x": [1, 2.5, null]}}}]},
      {"role": "tool", "tool_call_id": "abcDEF123", "content": "{\"ok\": true}"}])"));
    d->Set("tools", *jinja::ParseJson(R"([{"type": "function", "function": {"name": "f",
      "parameters": {"type": "object", "properties": {"x": {"type": "array"}}}}}])"));
    d->Set("add_generation_prompt", jinja::Value(true));
    d->Set("bos_token", jinja::Value("<s>"));
    d->Set("eos_token", jinja::Value("</s>"));
    return d;
  }();
  absl::StatusOr<jinja::Template> t =
      jinja::Template::Parse(std::string_view(reinterpret_cast<const char*>(data), size));
  if (!t.ok()) return 0;
  jinja::RenderOptions options;
  options.limits.max_steps = 20'000;
  options.limits.max_output_bytes = 1 << 16;
  (void)t->Render(*kContext, options);
  return 0;
}
