// The conversation `tandem chat` keeps and the plain-text template that turns
// it into one growing prompt (the gateway's API is a completion API):
//
//   {system}\n\n                      (only when --system is set)
//   User: {turn 1}\nAssistant:{reply 1}\n
//   User: {turn 2}\nAssistant:
//
// Replies are kept byte for byte as generated, so each turn's prompt extends
// the previous prompt and reply exactly and the service's prefix cache can
// reuse their KV. Generation stops at kStopString, before the model starts
// writing the user's next line itself. Used by cli/chat_command.cc;
// thread-compatible.
#ifndef TANDEM_CLI_CHAT_TRANSCRIPT_H_
#define TANDEM_CLI_CHAT_TRANSCRIPT_H_

#include <string>

namespace tandem::cli {

class ChatTranscript {
 public:
  static constexpr char kStopString[] = "\nUser:";

  explicit ChatTranscript(std::string system);

  // The prompt asking for the reply to `user_text`: the conversation so far,
  // then "User: {user_text}\nAssistant:". Does not change the transcript.
  std::string PromptFor(const std::string& user_text) const;

  // Records a finished turn; the next PromptFor builds on it.
  void Commit(const std::string& user_text, const std::string& reply);

  // Forgets every turn; keeps the system text.
  void Reset();

  int turns() const { return turns_; }

 private:
  std::string system_;
  std::string history_;  // committed turns in template form
  int turns_ = 0;
};

}  // namespace tandem::cli

#endif  // TANDEM_CLI_CHAT_TRANSCRIPT_H_
