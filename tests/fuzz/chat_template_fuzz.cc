// libFuzzer target: the chat-template renderer. The first byte picks a
// family by name (or, past the names, detection from the text up to the
// first NUL); the rest is NUL-separated role / content pairs (a role byte
// 0-2 is system, user or assistant, anything else a role of its own bytes,
// which must be refused by name). Any input gives a rendering or an
// INVALID_ARGUMENT, never a crash.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "engine/tokenizer/chat_template.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  static const char* const kNames[] = {
      "plain",      "chatml",     "llama2",           "llama2-sys",  "llama2-sys-bos",
      "llama2-sys-strip", "mistral-v1", "mistral-v3", "mistral-v3-tekken", "mistral-v7",
      "llama3",     "gemma",      "phi3",             "zephyr"};
  constexpr size_t kFamilies = sizeof(kNames) / sizeof(kNames[0]);
  std::string_view rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  tandem::engine::ChatTemplate chat = tandem::engine::ChatTemplate::Detect("");
  if (data[0] < kFamilies) {
    chat = *tandem::engine::ChatTemplate::FromName(kNames[data[0]]);
  } else {
    const size_t end = rest.find('\0');
    chat = tandem::engine::ChatTemplate::Detect(rest.substr(0, end));
    rest = end == std::string_view::npos ? std::string_view() : rest.substr(end + 1);
  }
  std::vector<tandem::engine::ChatMessage> messages;
  while (!rest.empty()) {
    const size_t role_end = rest.find('\0');
    std::string_view role = rest.substr(0, role_end);
    rest = role_end == std::string_view::npos ? std::string_view() : rest.substr(role_end + 1);
    const size_t content_end = rest.find('\0');
    std::string_view content = rest.substr(0, content_end);
    rest = content_end == std::string_view::npos ? std::string_view() : rest.substr(content_end + 1);
    static const char* const kRoles[] = {"system", "user", "assistant"};
    const bool known = role.size() == 1 && static_cast<uint8_t>(role[0]) < 3;
    messages.push_back({.role = known ? kRoles[static_cast<uint8_t>(role[0])] : std::string(role),
                        .content = std::string(content)});
  }
  for (bool generation_prompt : {false, true}) {
    (void)chat.Render(messages, generation_prompt);
  }
  return 0;
}
