// The prompt template of `tandem chat` (cli/chat_transcript.h).
#include "cli/chat_transcript.h"

#include <gtest/gtest.h>

namespace tandem::cli {
namespace {

TEST(ChatTranscriptTest, FirstTurnWithoutSystem) {
  ChatTranscript t("");
  EXPECT_EQ(t.PromptFor("Hi"), "User: Hi\nAssistant:");
  EXPECT_EQ(t.turns(), 0);
}

TEST(ChatTranscriptTest, EachPromptExtendsThePreviousPromptAndReply) {
  ChatTranscript t("Be brief.");
  const std::string first = t.PromptFor("Hi");
  EXPECT_EQ(first, "Be brief.\n\nUser: Hi\nAssistant:");
  t.Commit("Hi", " Hello!");
  const std::string second = t.PromptFor("Bye");
  EXPECT_EQ(second, "Be brief.\n\nUser: Hi\nAssistant: Hello!\nUser: Bye\nAssistant:");
  // Byte-exact extension is what lets the prefix cache reuse the KV.
  EXPECT_EQ(second.rfind(first + " Hello!", 0), 0u);
  EXPECT_EQ(t.turns(), 1);
}

TEST(ChatTranscriptTest, ResetKeepsTheSystemText) {
  ChatTranscript t("S");
  t.Commit("a", " b");
  t.Reset();
  EXPECT_EQ(t.turns(), 0);
  EXPECT_EQ(t.PromptFor("c"), "S\n\nUser: c\nAssistant:");
}

TEST(ChatTranscriptTest, StopStringIsTheNextUserLine) {
  EXPECT_STREQ(ChatTranscript::kStopString, "\nUser:");
}

}  // namespace
}  // namespace tandem::cli
