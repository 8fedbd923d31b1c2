// A Jinja template as HF transformers renders chat templates: jinja2 with
// trim_blocks and lstrip_blocks, the loopcontrols extension, an immutable
// sandbox (no list.append, dict.update, ...), `tojson` as json.dumps with
// ensure_ascii=False, and the globals raise_exception() and
// strftime_now(). ChatTemplate renders a model's `tokenizer.chat_template`
// with it. A parsed Template is immutable and thread-safe; each Render works
// on its own state.
#ifndef TANDEM_ENGINE_TOKENIZER_JINJA_TEMPLATE_H_
#define TANDEM_ENGINE_TOKENIZER_JINJA_TEMPLATE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "engine/tokenizer/jinja/ast.h"
#include "engine/tokenizer/jinja/value.h"

namespace tandem::engine::jinja {

// Bounds on one render, so that a hostile template cannot stall its caller.
struct RenderLimits {
  int64_t max_steps = 2'000'000;         // statements and expressions evaluated
  int64_t max_output_bytes = 8 << 20;    // text produced, captured text included
  int max_call_depth = 64;               // nested macro calls
};

// The calendar time strftime_now() formats: an input, so tests are
// deterministic (the gateway passes the current UTC time).
struct RenderTime {
  int year = 2024;
  int month = 1;  // 1..12
  int day = 1;    // 1..31
  int hour = 0;
  int minute = 0;
  int second = 0;
};

struct RenderOptions {
  RenderLimits limits;
  RenderTime now;
};

class Template {
 public:
  // InvalidArgument "line:column: ..." for a syntax error.
  static absl::StatusOr<Template> Parse(std::string_view source);

  // The text for `context`'s variables. Errors carry "line:column: " of the
  // failing statement or expression: InvalidArgument for a type or lookup
  // error and for raise_exception() (its message verbatim after the
  // position), ResourceExhausted when a limit is hit.
  absl::StatusOr<std::string> Render(const Dict& context, const RenderOptions& options) const;

 private:
  explicit Template(std::shared_ptr<const Body> body) : body_(std::move(body)) {}
  std::shared_ptr<const Body> body_;
};

}  // namespace tandem::engine::jinja

#endif  // TANDEM_ENGINE_TOKENIZER_JINJA_TEMPLATE_H_
