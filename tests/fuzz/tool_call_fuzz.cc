// libFuzzer target: the tool-call parser (gateway/tools/tool_call_parser.h)
// on any generated text. The first byte picks the format and whether
// parallel calls are kept, the second the size of the pieces the rest is fed
// in. Any input gives content and calls, never a crash, and the streamed
// result equals the whole one.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "gateway/tools/tool_call_parser.h"

namespace tools = tandem::gateway::tools;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  constexpr tools::ToolCallFormat kFormats[] = {
      tools::ToolCallFormat::kNone,       tools::ToolCallFormat::kJson,
      tools::ToolCallFormat::kHermes,     tools::ToolCallFormat::kLlama3Json,
      tools::ToolCallFormat::kMistral,    tools::ToolCallFormat::kGranite,
      tools::ToolCallFormat::kQwen3Coder};
  const tools::ToolCallFormat format = kFormats[data[0] % 7];
  const bool parallel = (data[0] & 0x80) != 0;
  const size_t step = 1 + data[1] % 16;
  const std::string_view text(reinterpret_cast<const char*>(data + 2), size - 2);
  const tools::ToolCallChunk whole = tools::ToolCallParser::ParseAll(format, parallel, text);
  tools::ToolCallParser parser(format, parallel);
  std::string content;
  size_t calls = 0;
  for (size_t i = 0; i < text.size(); i += step) {
    const tools::ToolCallChunk c = parser.Feed(text.substr(i, step));
    content += c.content;
    calls += c.calls.size();
  }
  const tools::ToolCallChunk rest = parser.Finish();
  content += rest.content;
  calls += rest.calls.size();
  if (content != whole.content || calls != whole.calls.size()) std::abort();
  return 0;
}
