// A session turn's plan (gateway/sessions/session_window.h), on stories260K's
// tokenizer with the plain template: REPREFILL's prompt is exactly the
// rendered truncated conversation; turns starting inside keep_first are
// never evicted; eviction goes down to the target fraction; SHIFT cuts the
// evicted turns' span out of the session's tokens and appends only the new
// turn's.
#include "gateway/sessions/session_window.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "engine/tokenizer/tokenizer.h"
#include "tests/test_paths.h"

namespace tandem::gateway {
namespace {

class SessionWindowTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto t = engine::LoadTokenizer(tandem::test_paths::StoriesPath());
    ASSERT_TRUE(t.ok()) << t.status();
    tok_ = t->release();
  }
  static void TearDownTestSuite() {
    delete tok_;
    tok_ = nullptr;
  }

  // A session of `turns` exchanges of about 20 tokens each.
  tandem::v1::SessionRecord Session(int turns, int32_t window, int32_t keep_first) {
    tandem::v1::SessionRecord r;
    r.set_system_prompt("A story about a cat.");
    r.mutable_window()->set_max_tokens(window);
    r.mutable_window()->set_keep_first(keep_first);
    for (int i = 0; i < turns; ++i) {
      tandem::v1::ChatMessage* u = r.add_turns();
      u->set_role("user");
      u->set_content("Tell me about day " + std::to_string(i) + ".");
      tandem::v1::ChatMessage* a = r.add_turns();
      a->set_role("assistant");
      a->set_content("The cat ran and played in the sun all day.");
    }
    return r;
  }
  int32_t SystemTokens() {
    return static_cast<int32_t>(
        RenderTokens({{.role = "system", .content = "A story about a cat."}}, false, *tok_, chat_)
            ->size());
  }

  static engine::Tokenizer* tok_;
  const engine::ChatTemplate chat_ = engine::ChatTemplate::Detect("");
};
engine::Tokenizer* SessionWindowTest::tok_ = nullptr;

TEST_F(SessionWindowTest, ReprefillPromptIsTheTruncatedConversationRendered) {
  const tandem::v1::SessionRecord r = Session(10, 150, SystemTokens());
  absl::StatusOr<TurnPlan> plan = PlanTurn(r, "And then?", 20, *tok_, chat_, 0.75);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_GT(plan->turns_evicted, 0);
  EXPECT_LE(static_cast<double>(plan->prompt_ids.size()) + 20, 0.75 * 150);
  EXPECT_EQ(plan->kept_turns.size() + 2 * plan->turns_evicted, 20u);
  // The oldest turns went: the kept ones are the newest.
  EXPECT_EQ(plan->kept_turns.back().content(), r.turns(19).content());
  EXPECT_EQ(plan->kept_turns.front().content(), r.turns(2 * plan->turns_evicted).content());
  std::vector<engine::ChatMessage> expected = {{.role = "system", .content = r.system_prompt()}};
  for (const auto& m : plan->kept_turns) expected.push_back({m.role(), m.content()});
  expected.push_back({.role = "user", .content = "And then?"});
  EXPECT_EQ(plan->prompt_ids, *RenderTokens(expected, true, *tok_, chat_));
  // No eviction when it fits.
  const tandem::v1::SessionRecord big = Session(2, 1000, SystemTokens());
  absl::StatusOr<TurnPlan> roomy = PlanTurn(big, "And then?", 20, *tok_, chat_, 0.75);
  ASSERT_TRUE(roomy.ok());
  EXPECT_EQ(roomy->turns_evicted, 0);
  EXPECT_EQ(roomy->tokens_evicted, 0);
}

TEST_F(SessionWindowTest, TurnsStartingInsideKeepFirstStay) {
  // keep_first covers the system prompt and the first exchange.
  const tandem::v1::SessionRecord r = Session(10, 250, SystemTokens() + 5);
  absl::StatusOr<TurnPlan> plan = PlanTurn(r, "And then?", 20, *tok_, chat_, 0.75);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_GT(plan->turns_evicted, 0);
  ASSERT_GE(plan->kept_turns.size(), 4u);
  EXPECT_EQ(plan->kept_turns[0].content(), r.turns(0).content());
  EXPECT_EQ(plan->kept_turns[2].content(), r.turns(2 * (plan->turns_evicted + 1)).content());
}

TEST_F(SessionWindowTest, AMessageThatCannotFitNamesTheField) {
  const tandem::v1::SessionRecord r = Session(1, 40, SystemTokens());
  std::string huge;
  for (int i = 0; i < 20; ++i) huge += "The cat ran to the house. ";
  absl::StatusOr<TurnPlan> plan = PlanTurn(r, huge, 8, *tok_, chat_, 0.75);
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(plan.status().message(), ::testing::HasSubstr("message"));
}

TEST_F(SessionWindowTest, ShiftCutsTheEvictedSpanAndAppendsOnlyTheNewTurn) {
  // The session's tokens as its turns built them: the system prompt, then
  // each exchange's tokens.
  tandem::v1::SessionRecord r = Session(0, 120, SystemTokens());
  std::vector<int32_t> tokens =
      *RenderTokens({{.role = "system", .content = r.system_prompt()}}, false, *tok_, chat_);
  for (int i = 0; i < 4; ++i) {
    absl::StatusOr<TurnPlan> plan = PlanShiftTurn(r, "Day " + std::to_string(i) + "?", 8,
                                                  *tok_, chat_, 0.75);
    ASSERT_TRUE(plan.ok()) << plan.status();
    // The new turn's tokens follow what the session held, minus any cut.
    std::vector<int32_t> kept(tokens.begin(), tokens.begin() + plan->shift_from);
    kept.insert(kept.end(), tokens.begin() + plan->shift_from + plan->shift_count, tokens.end());
    ASSERT_GE(plan->prompt_ids.size(), kept.size());
    EXPECT_TRUE(std::equal(kept.begin(), kept.end(), plan->prompt_ids.begin())) << "turn " << i;
    EXPECT_EQ(plan->turn_offsets.back(), static_cast<int32_t>(kept.size()));
    // Commit the turn as the gateway does, with a 20-token reply.
    tokens = plan->prompt_ids;
    const std::vector<int32_t> reply =
        tok_->Encode(" The cat ran and played all day long in the sun.", {});
    tokens.insert(tokens.end(), reply.begin(), reply.end());
    r.clear_turns();
    for (const auto& m : plan->kept_turns) *r.add_turns() = m;
    tandem::v1::ChatMessage* u = r.add_turns();
    u->set_role("user");
    u->set_content("Day " + std::to_string(i) + "?");
    tandem::v1::ChatMessage* a = r.add_turns();
    a->set_role("assistant");
    a->set_content("The cat ran and played all day long in the sun.");
    r.mutable_kv_token_ids()->Assign(tokens.begin(), tokens.end());
    r.mutable_turn_token_offsets()->Assign(plan->turn_offsets.begin(), plan->turn_offsets.end());
    if (i == 3) {
      EXPECT_GT(plan->turns_evicted, 0);
      EXPECT_EQ(plan->shift_from, SystemTokens());  // right after the kept system prompt
      EXPECT_GT(plan->shift_count, 0);
    }
  }
}

}  // namespace
}  // namespace tandem::gateway
