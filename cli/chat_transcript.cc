#include "cli/chat_transcript.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace tandem::cli {

ChatTranscript::ChatTranscript(std::string system) : system_(std::move(system)) {}

std::string ChatTranscript::PromptFor(const std::string& user_text) const {
  return absl::StrCat(system_.empty() ? "" : absl::StrCat(system_, "\n\n"), history_,
                      "User: ", user_text, "\nAssistant:");
}

void ChatTranscript::Commit(const std::string& user_text, const std::string& reply) {
  absl::StrAppend(&history_, "User: ", user_text, "\nAssistant:", reply, "\n");
  ++turns_;
}

void ChatTranscript::Reset() {
  history_.clear();
  turns_ = 0;
}

}  // namespace tandem::cli
