// A session turn planned and committed without a server
// (gateway/sessions/turn_plan.h), on stories260K's tokenizer with the plain
// template: the first turn's prompt is the system prompt and the message;
// a turn overflowing its window evicts under REPREFILL and cuts the KV's
// tokens under SHIFT, never the kept prefix; bad request fields are named;
// routing follows the KV holder's blocks; a commit appends the turn and
// turn after turn the record never holds more tokens than its window, nor
// after a reply that rolled in it (the window is full then).
#include "gateway/sessions/turn_plan.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "engine/tokenizer/tokenizer.h"
#include "gateway/api_keys.h"
#include "tests/test_paths.h"

namespace tandem::gateway {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr char kSystem[] = "A story about a cat.";
constexpr char kReply[] = "The cat ran and played in the sun all day.";

class TurnPlanTest : public ::testing::Test {
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

  TurnOptions Options() const {
    TurnOptions options;
    options.tokenizer = tok_;
    options.chat_template = &chat_;
    options.model_name = "stories260K";
    options.evict_to = 0.75;
    return options;
  }
  std::vector<int32_t> SystemTokens() const {
    return *RenderTokens({{.role = "system", .content = kSystem}}, false, *tok_, chat_);
  }
  // A session as CreateSession leaves it, with `turns` exchanges already
  // held (REPREFILL only: a SHIFT record's KV tokens come from its commits).
  tandem::v1::SessionRecord Session(tandem::v1::WindowPolicy policy, int32_t window,
                                    int32_t keep_first, int turns = 0) const {
    tandem::v1::SessionRecord r;
    r.set_session_id("s-1");
    r.set_version(1);
    r.set_tenant("acme");
    r.set_system_prompt(kSystem);
    r.mutable_window()->set_max_tokens(window);
    r.mutable_window()->set_keep_first(keep_first);
    r.mutable_window()->set_policy(policy);
    for (int i = 0; i < turns; ++i) {
      tandem::v1::ChatMessage* u = r.add_turns();
      u->set_role("user");
      u->set_content("Tell me about day " + std::to_string(i) + ".");
      tandem::v1::ChatMessage* a = r.add_turns();
      a->set_role("assistant");
      a->set_content(kReply);
    }
    r.set_tokens_held(static_cast<int32_t>(SystemTokens().size()));
    return r;
  }
  static tandem::v1::ChatRequest Chat(const std::string& message, int32_t max_tokens = 20) {
    tandem::v1::ChatRequest c;
    c.set_session_id("s-1");
    c.set_message(message);
    c.set_max_tokens(max_tokens);
    return c;
  }
  // The reply kReply as a decode worker sends it, ending with EOS.
  TurnResult Reply(const std::string& decode_address) const {
    TurnResult r;
    r.reply = kReply;
    r.decode_address = decode_address;
    r.reply_ids = tok_->Encode(kReply, {.add_special = false});
    r.reply_ids.push_back(tok_->eos_id());
    return r;
  }

  static engine::Tokenizer* tok_;
  const engine::ChatTemplate chat_ = engine::ChatTemplate::Detect("");
};
engine::Tokenizer* TurnPlanTest::tok_ = nullptr;

TEST_F(TurnPlanTest, FirstTurnIsTheSystemPromptAndTheMessage) {
  const int32_t keep = static_cast<int32_t>(SystemTokens().size());
  const tandem::v1::SessionRecord r = Session(tandem::v1::WINDOW_POLICY_REPREFILL, 256, keep);
  absl::StatusOr<ChatTurnPlan> plan = PlanChatTurn(r, Chat("Hello there."), Options());
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->window.turns_evicted, 0);
  EXPECT_TRUE(plan->window.kept_turns.empty());
  ASSERT_TRUE(plan->request.ok()) << plan->request.status();
  const std::vector<int32_t> expected = *RenderTokens(
      {{.role = "system", .content = kSystem}, {.role = "user", .content = "Hello there."}}, true,
      *tok_, chat_);
  EXPECT_EQ(plan->request->prompt_ids, expected);
  EXPECT_EQ(plan->window.prompt_ids, expected);
  EXPECT_EQ(plan->request->max_tokens, 20);
  EXPECT_EQ(plan->request->cache_salt, TenantSalt("acme"));
  EXPECT_EQ(plan->turn.session_id, "s-1");
  EXPECT_EQ(plan->turn.kv_holder, "");
  EXPECT_FALSE(plan->turn.local_prefill);
  EXPECT_FALSE(plan->turn.private_kv);
  EXPECT_EQ(plan->turn.roll_window, 0);  // no block size known: no roll
  EXPECT_FALSE(plan->turn.commit);

  const CommittedTurn next = CommitChatTurn(r, *plan, Reply("decode-a"), Options());
  EXPECT_EQ(next.record.version(), 2);
  ASSERT_EQ(next.record.turns_size(), 2);
  EXPECT_EQ(next.record.turns(0).role(), "user");
  EXPECT_EQ(next.record.turns(0).content(), "Hello there.");
  EXPECT_EQ(next.record.turns(1).role(), "assistant");
  EXPECT_EQ(next.record.turns(1).content(), kReply);
  EXPECT_EQ(next.record.kv_holder(), "decode-a");
  EXPECT_EQ(next.record.tokens_held(),
            static_cast<int32_t>(
                RenderTokens(SessionMessages(next.record), false, *tok_, chat_)->size()));
  EXPECT_EQ(next.record.turns_evicted(), 0);
  EXPECT_EQ(next.usage.session_tokens_held(), next.record.tokens_held());
  EXPECT_EQ(next.usage.session_tokens_evicted(), 0);
  EXPECT_FALSE(next.usage.session_rebuilt());  // there was no holder to lose
}

TEST_F(TurnPlanTest, ReprefillOverflowEvictsOldTurnsButNotTheKeptPrefix) {
  // keep_first covers the system prompt and the first exchange's start.
  const int32_t keep = static_cast<int32_t>(SystemTokens().size()) + 5;
  const tandem::v1::SessionRecord r = Session(tandem::v1::WINDOW_POLICY_REPREFILL, 250, keep, 10);
  absl::StatusOr<ChatTurnPlan> plan = PlanChatTurn(r, Chat("And then?"), Options());
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_TRUE(plan->request.ok()) << plan->request.status();
  EXPECT_GT(plan->window.turns_evicted, 0);
  EXPECT_GT(plan->window.tokens_evicted, 0);
  // The first exchange starts inside keep_first: it stays, the next go.
  ASSERT_GE(plan->window.kept_turns.size(), 4u);
  EXPECT_EQ(plan->window.kept_turns[0].content(), r.turns(0).content());
  EXPECT_EQ(plan->window.kept_turns[2].content(),
            r.turns(2 + 2 * plan->window.turns_evicted).content());
  // The system prompt begins the prompt; prompt and reply fit the target.
  const std::vector<int32_t> system = SystemTokens();
  const std::vector<int32_t>& prompt = plan->request->prompt_ids;
  ASSERT_GE(prompt.size(), system.size());
  EXPECT_TRUE(std::equal(system.begin(), system.end(), prompt.begin()));
  EXPECT_LE(static_cast<double>(prompt.size()) + 20, 0.75 * 250);
  EXPECT_EQ(prompt, plan->window.prompt_ids);

  const CommittedTurn next = CommitChatTurn(r, *plan, Reply("decode-a"), Options());
  EXPECT_EQ(next.record.turns_size(), static_cast<int>(plan->window.kept_turns.size()) + 2);
  EXPECT_EQ(next.record.turns(next.record.turns_size() - 2).content(), "And then?");
  EXPECT_EQ(next.record.turns_evicted(), plan->window.turns_evicted);
  EXPECT_EQ(next.record.tokens_evicted(), plan->window.tokens_evicted);
  EXPECT_EQ(next.record.system_prompt(), kSystem);
  EXPECT_LE(next.record.tokens_held(), 250);
  EXPECT_EQ(next.usage.session_tokens_evicted(), plan->window.tokens_evicted);
}

TEST_F(TurnPlanTest, ShiftOverflowCutsTheEvictedSpanAfterTheKeptPrefix) {
  const std::vector<int32_t> system = SystemTokens();
  const int32_t keep = static_cast<int32_t>(system.size());
  tandem::v1::SessionRecord r = Session(tandem::v1::WINDOW_POLICY_SHIFT, 160, keep);
  bool shifted = false;
  for (int i = 0; i < 20; ++i) {
    SCOPED_TRACE(i);
    absl::StatusOr<ChatTurnPlan> plan =
        PlanChatTurn(r, Chat("Tell me about day " + std::to_string(i) + "."), Options());
    ASSERT_TRUE(plan.ok()) << plan.status();
    ASSERT_TRUE(plan->request.ok()) << plan->request.status();
    EXPECT_TRUE(plan->turn.private_kv);
    // The holder's KV is the only copy: the turn is prefilled there.
    EXPECT_EQ(plan->turn.local_prefill, !r.kv_holder().empty());
    EXPECT_EQ(plan->turn.shift_from, plan->window.shift_from);
    EXPECT_EQ(plan->turn.shift_count, plan->window.shift_count);
    if (plan->window.shift_count > 0) {
      shifted = true;
      EXPECT_GE(plan->turn.shift_from, keep);  // never inside the kept prefix
      EXPECT_GT(plan->window.turns_evicted, 0);
    }
    // The prompt is the KV's tokens with the cut taken out, then the turn's.
    const std::vector<int32_t>& prompt = plan->request->prompt_ids;
    if (r.kv_token_ids_size() > 0) {
      const int32_t from = plan->window.shift_from;
      const int32_t count = plan->window.shift_count;
      std::vector<int32_t> kept(r.kv_token_ids().begin(), r.kv_token_ids().begin() + from);
      kept.insert(kept.end(), r.kv_token_ids().begin() + from + count, r.kv_token_ids().end());
      ASSERT_GE(prompt.size(), kept.size());
      EXPECT_TRUE(std::equal(kept.begin(), kept.end(), prompt.begin()));
    }
    EXPECT_TRUE(std::equal(system.begin(), system.end(), prompt.begin()));

    const CommittedTurn next = CommitChatTurn(r, *plan, Reply("decode-a"), Options());
    // The KV's tokens: the prompt and the reply without its EOS.
    std::vector<int32_t> kv = prompt;
    const std::vector<int32_t> reply = tok_->Encode(kReply, {.add_special = false});
    kv.insert(kv.end(), reply.begin(), reply.end());
    EXPECT_THAT(next.record.kv_token_ids(), ::testing::ElementsAreArray(kv));
    EXPECT_EQ(next.record.tokens_held(), static_cast<int32_t>(kv.size()));
    EXPECT_LE(next.record.tokens_held(), 160);
    EXPECT_EQ(next.record.turn_token_offsets_size() * 2, next.record.turns_size());
    EXPECT_EQ(next.record.kv_holder(), "decode-a");
    r = next.record;
  }
  EXPECT_TRUE(shifted);
  EXPECT_GT(r.turns_evicted(), 0);
  EXPECT_EQ(r.version(), 21);
}

TEST_F(TurnPlanTest, TurnAfterTurnTheRecordStaysWithinItsWindow) {
  for (tandem::v1::WindowPolicy policy :
       {tandem::v1::WINDOW_POLICY_REPREFILL, tandem::v1::WINDOW_POLICY_SHIFT}) {
    SCOPED_TRACE(tandem::v1::WindowPolicy_Name(policy));
    const int32_t window = 120;
    tandem::v1::SessionRecord r =
        Session(policy, window, static_cast<int32_t>(SystemTokens().size()));
    for (int i = 0; i < 30; ++i) {
      absl::StatusOr<ChatTurnPlan> plan =
          PlanChatTurn(r, Chat("What happened next, " + std::to_string(i) + "?", 0), Options());
      ASSERT_TRUE(plan.ok()) << plan.status();
      ASSERT_TRUE(plan->request.ok()) << plan->request.status();
      // Without a roll the reply is clamped to the window's room.
      EXPECT_LE(plan->request->prompt_ids.size() + plan->request->max_tokens,
                static_cast<size_t>(window));
      const CommittedTurn next = CommitChatTurn(r, *plan, Reply("decode-a"), Options());
      EXPECT_EQ(next.record.version(), r.version() + 1);
      EXPECT_EQ(next.record.turns(next.record.turns_size() - 1).content(), kReply);
      EXPECT_LE(next.record.tokens_held(), window) << "turn " << i;
      EXPECT_GE(next.record.turns_evicted(), r.turns_evicted());
      r = next.record;
    }
    EXPECT_GT(r.turns_evicted(), 0);
  }
}

TEST_F(TurnPlanTest, AReplyThatFillsItsRoomStillFitsTheWindow) {
  // Replies of exactly max_tokens with no EOS: what the template appends
  // after a reply once it is held (the plain template's "\n") must have
  // been reserved too. With a block size the reply could roll, but one that
  // fits its room is not clamped differently.
  const std::vector<int32_t> text = tok_->Encode(kReply, {.add_special = false});
  for (const bool blocks : {false, true}) {
    SCOPED_TRACE(blocks ? "block_size 16" : "no block size");
    TurnOptions options = Options();
    options.evict_to = 1.0;  // evicts no more than the turn needs: the tightest fit
    if (blocks) options.block_size = 16;
    const int32_t window = 160;
    tandem::v1::SessionRecord r = Session(tandem::v1::WINDOW_POLICY_REPREFILL, window,
                                          static_cast<int32_t>(SystemTokens().size()));
    for (int i = 0; i < 20; ++i) {
      absl::StatusOr<ChatTurnPlan> plan =
          PlanChatTurn(r, Chat("What happened on day " + std::to_string(i) + "?", 24), options);
      ASSERT_TRUE(plan.ok()) << plan.status();
      ASSERT_TRUE(plan->request.ok()) << plan->request.status();
      TurnResult reply;
      reply.decode_address = "decode-a";
      while (static_cast<int32_t>(reply.reply_ids.size()) < plan->request->max_tokens) {
        reply.reply_ids.push_back(text[reply.reply_ids.size() % text.size()]);
      }
      reply.reply = tok_->Decode(reply.reply_ids);
      const CommittedTurn next = CommitChatTurn(r, *plan, reply, options);
      EXPECT_LE(next.record.tokens_held(), window) << "turn " << i;
      EXPECT_LE(next.usage.session_tokens_held(), window) << "turn " << i;
      r = next.record;
    }
    EXPECT_GT(r.turns_evicted(), 0);
  }
}

TEST_F(TurnPlanTest, AReplyThatRolledLeavesTheWindowFull) {
  // A reply far longer than the window rolls in it on the decode worker:
  // the context then holds the window's tokens, not the whole reply's.
  const std::vector<int32_t> text = tok_->Encode(kReply, {.add_special = false});
  for (auto policy : {tandem::v1::WINDOW_POLICY_REPREFILL, tandem::v1::WINDOW_POLICY_SHIFT}) {
    SCOPED_TRACE(policy == tandem::v1::WINDOW_POLICY_SHIFT ? "SHIFT" : "REPREFILL");
    TurnOptions options = Options();
    options.block_size = 16;
    const int32_t window = 128;
    const tandem::v1::SessionRecord r =
        Session(policy, window, static_cast<int32_t>(SystemTokens().size()));
    absl::StatusOr<ChatTurnPlan> plan = PlanChatTurn(r, Chat("Tell me a long story.", 300),
                                                     options);
    ASSERT_TRUE(plan.ok()) << plan.status();
    ASSERT_TRUE(plan->request.ok()) << plan->request.status();
    EXPECT_EQ(plan->request->max_tokens, 300);  // rolls: not clamped to the window
    EXPECT_EQ(plan->turn.roll_window, window);
    TurnResult reply;
    reply.decode_address = "decode-a";
    while (reply.reply_ids.size() < 300) {
      reply.reply_ids.push_back(text[reply.reply_ids.size() % text.size()]);
    }
    reply.reply = tok_->Decode(reply.reply_ids);
    const CommittedTurn next = CommitChatTurn(r, *plan, reply, options);
    EXPECT_EQ(next.record.tokens_held(), window);
    EXPECT_EQ(next.usage.session_tokens_held(), window);
    // The record keeps the whole reply; the next turn evicts it whole.
    EXPECT_EQ(next.record.turns(1).content(), reply.reply);
    absl::StatusOr<ChatTurnPlan> after = PlanChatTurn(next.record, Chat("And then?"), options);
    ASSERT_TRUE(after.ok()) << after.status();
    EXPECT_EQ(after->window.turns_evicted, 1);
    const CommittedTurn again = CommitChatTurn(next.record, *after, Reply("decode-a"), options);
    EXPECT_LT(again.record.tokens_held(), window);
    EXPECT_EQ(again.record.turns_evicted(), 1);
  }
}

TEST_F(TurnPlanTest, InvalidRequestFieldsAreNamed) {
  GatewayLimits limits;
  limits.max_prompt_bytes = 16;
  EXPECT_TRUE(ValidateChatRequest(Chat("Hello."), limits).ok());
  auto error = [&](const tandem::v1::ChatRequest& c) {
    const absl::Status s = ValidateChatRequest(c, limits);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    return std::string(s.message());
  };
  tandem::v1::ChatRequest c = Chat("Hello.");
  c.set_session_id("");
  EXPECT_THAT(error(c), StartsWith("session_id"));
  c.set_session_id(std::string(129, 'x'));
  EXPECT_THAT(error(c), StartsWith("session_id"));
  EXPECT_THAT(error(Chat("")), StartsWith("message"));
  EXPECT_THAT(error(Chat("A message longer than sixteen bytes.")), StartsWith("message"));
  EXPECT_THAT(error(Chat("Hello.", -1)), StartsWith("max_tokens"));

  // Fields checked with the prompt: the turn is planned, its request refused.
  const int32_t keep = static_cast<int32_t>(SystemTokens().size());
  const tandem::v1::SessionRecord r = Session(tandem::v1::WINDOW_POLICY_REPREFILL, 256, keep);
  tandem::v1::ChatRequest hot = Chat("Hello.");
  hot.mutable_sampling()->set_temperature(-1);
  absl::StatusOr<ChatTurnPlan> plan = PlanChatTurn(r, hot, Options());
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->request.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(plan->request.status().message()), StartsWith("sampling.temperature"));
  tandem::v1::ChatRequest stop = Chat("Hello.");
  stop.add_stop("");
  plan = PlanChatTurn(r, stop, Options());
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_THAT(std::string(plan->request.status().message()), StartsWith("stop[0]"));
  tandem::v1::ChatRequest logprobs = Chat("Hello.");
  logprobs.set_top_logprobs(1000);
  plan = PlanChatTurn(r, logprobs, Options());
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_THAT(std::string(plan->request.status().message()), StartsWith("top_logprobs"));

  // A message the window cannot hold even alone.
  std::string huge;
  for (int i = 0; i < 40; ++i) huge += "Tom ran to the big red house. ";
  const tandem::v1::SessionRecord small = Session(tandem::v1::WINDOW_POLICY_REPREFILL, 64, keep);
  for (tandem::v1::WindowPolicy policy :
       {tandem::v1::WINDOW_POLICY_REPREFILL, tandem::v1::WINDOW_POLICY_SHIFT}) {
    tandem::v1::SessionRecord s = small;
    s.mutable_window()->set_policy(policy);
    const absl::StatusOr<ChatTurnPlan> too_long = PlanChatTurn(s, Chat(huge), Options());
    EXPECT_EQ(too_long.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(too_long.status().message()), StartsWith("message"));
  }
}

TEST_F(TurnPlanTest, RoutingFollowsTheHoldersBlocks) {
  const int32_t keep = static_cast<int32_t>(SystemTokens().size());
  tandem::v1::SessionRecord r = Session(tandem::v1::WINDOW_POLICY_REPREFILL, 256, keep, 2);
  r.set_kv_holder("decode-a");
  TurnOptions options = Options();
  options.block_size = 16;
  options.local_prefill_tokens = 32;
  int32_t held = 0;
  std::string asked_holder;
  uint64_t asked_salt = 0;
  options.held_blocks = [&](const std::string& holder, std::span<const int32_t> prompt,
                            uint64_t salt) {
    asked_holder = holder;
    asked_salt = salt;
    return held < 0 ? held : static_cast<int32_t>(prompt.size() / 16) - held;
  };
  // The holder lacks less than one block: it prefills the turn itself.
  held = 0;
  absl::StatusOr<ChatTurnPlan> plan = PlanChatTurn(r, Chat("And then?", 2000), options);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_TRUE(plan->request.ok()) << plan->request.status();
  EXPECT_EQ(asked_holder, "decode-a");
  EXPECT_EQ(asked_salt, TenantSalt("acme"));
  EXPECT_TRUE(plan->turn.local_prefill);
  EXPECT_EQ(plan->turn.holder_blocks,
            static_cast<int32_t>(plan->request->prompt_ids.size() / 16));
  // The window has room for two blocks after the kept prefix: the reply
  // rolls in it, so max_tokens is not clamped to the window.
  EXPECT_EQ(plan->turn.roll_window, 256);
  EXPECT_EQ(plan->turn.roll_keep, keep);
  EXPECT_EQ(plan->request->max_tokens, 2000);
  // Lacking more than local_prefill_tokens: a prefill worker pulls the
  // blocks the holder has.
  held = 3;
  plan = PlanChatTurn(r, Chat("And then?"), options);
  ASSERT_TRUE(plan.ok());
  EXPECT_FALSE(plan->turn.local_prefill);
  EXPECT_EQ(plan->turn.holder_blocks,
            static_cast<int32_t>(plan->request->prompt_ids.size() / 16) - 3);
  // Not known reachable.
  held = -1;
  plan = PlanChatTurn(r, Chat("And then?"), options);
  ASSERT_TRUE(plan.ok());
  EXPECT_FALSE(plan->turn.local_prefill);
  EXPECT_EQ(plan->turn.holder_blocks, 0);
  // No block size known: no roll, no local prefill, the reply clamped.
  options.block_size.reset();
  plan = PlanChatTurn(r, Chat("And then?", 2000), options);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->turn.roll_window, 0);
  EXPECT_FALSE(plan->turn.local_prefill);
  // The clamp leaves room for what closes the reply once it is held.
  std::vector<engine::ChatMessage> replied = SessionMessages(r);
  replied.push_back({.role = "user", .content = "And then?"});
  replied.push_back({.role = "assistant", .content = ""});
  const absl::StatusOr<std::vector<int32_t>> closed = RenderTokens(replied, false, *tok_, chat_);
  ASSERT_TRUE(closed.ok());
  EXPECT_GT(closed->size(), plan->request->prompt_ids.size());
  EXPECT_EQ(plan->request->max_tokens, 256 - static_cast<int32_t>(closed->size()));
}

TEST_F(TurnPlanTest, ACommitOnAnotherWorkerRebuildsTheSession) {
  const int32_t keep = static_cast<int32_t>(SystemTokens().size());
  tandem::v1::SessionRecord r = Session(tandem::v1::WINDOW_POLICY_REPREFILL, 256, keep, 1);
  r.set_kv_holder("decode-a");
  absl::StatusOr<ChatTurnPlan> plan = PlanChatTurn(r, Chat("And then?"), Options());
  ASSERT_TRUE(plan.ok()) << plan.status();
  CommittedTurn moved = CommitChatTurn(r, *plan, Reply("decode-b"), Options());
  EXPECT_EQ(moved.record.kv_holder(), "decode-b");
  EXPECT_TRUE(moved.usage.session_rebuilt());
  // The prefill's token ended the reply: no decode worker, the holder stays.
  CommittedTurn stayed = CommitChatTurn(r, *plan, Reply(""), Options());
  EXPECT_EQ(stayed.record.kv_holder(), "decode-a");
  EXPECT_FALSE(stayed.usage.session_rebuilt());
  EXPECT_EQ(stayed.record.turns_size(), 4);
}

}  // namespace
}  // namespace tandem::gateway
