// The scheduler's step budget: decode rows come before any prompt chunk's
// share, a StepBudget caps the step's tokens and admissions while prompts
// keep their minimum, and streams already under way wait ahead of new ones.
#include "engine/sched/scheduler.h"

#include <gtest/gtest.h>

#include <memory>
#include <vector>

namespace tandem::engine {
namespace {

constexpr int32_t kBlockSize = 4;

std::unique_ptr<Sequence> MakeSequence(int64_t id, int32_t prompt_tokens, int32_t n_generated = 0) {
  auto seq = std::make_unique<Sequence>();
  seq->id = id;
  for (int32_t i = 0; i < prompt_tokens; ++i) {
    seq->request.prompt.push_back(1 + i);
    seq->Append(1 + i);
  }
  seq->n_generated = n_generated;
  seq->request.private_kv = true;  // nothing from the prefix cache
  return seq;
}

// What the forward pass would leave: every planned token computed.
void Compute(Scheduler& s, const StepPlan& plan) {
  for (const ScheduledChunk& c : plan.chunks) s.Find(c.seq_id)->n_computed += c.count;
}

int32_t CountFor(const StepPlan& plan, int64_t id) {
  for (const ScheduledChunk& c : plan.chunks) {
    if (c.seq_id == id) return c.count;
  }
  return 0;
}

TEST(SchedulerTest, APromptChunkLeavesRoomForTheDecodeRowsAfterIt) {
  BlockPool pool(64);
  Scheduler s({.max_batch_tokens = 16, .max_running = 8}, pool, kBlockSize);
  s.Enqueue(MakeSequence(1, 4));
  s.Enqueue(MakeSequence(2, 4));
  StepPlan plan = s.Schedule();
  ASSERT_EQ(plan.chunks.size(), 2u);
  Compute(s, plan);
  // Sequence 1 (first in admission order) has 20 tokens to compute, as a
  // prompt does; sequence 2 decodes its next token.
  for (int i = 0; i < 20; ++i) s.Find(1)->Append(100 + i);
  s.Find(2)->Append(7);
  plan = s.Schedule();
  EXPECT_EQ(CountFor(plan, 1), 15);
  EXPECT_EQ(CountFor(plan, 2), 1);
}

TEST(SchedulerTest, AStepBudgetCapsTokensAndAdmissionsButNotDecodeRows) {
  BlockPool pool(256);
  Scheduler s({.max_batch_tokens = 64, .max_running = 64}, pool, kBlockSize);
  for (int64_t id = 1; id <= 6; ++id) s.Enqueue(MakeSequence(id, 3));
  StepPlan plan = s.Schedule({.max_running = 4});
  EXPECT_EQ(s.num_running(), 4);
  EXPECT_EQ(s.num_waiting(), 2);
  EXPECT_TRUE(plan.held_back);
  Compute(s, plan);
  for (int64_t id = 1; id <= 4; ++id) s.Find(id)->Append(9);
  // Four decode rows and a prompt waiting: a budget of 2 tokens still runs
  // every decode row, and the prompt gets its minimum share.
  s.Enqueue(MakeSequence(7, 30));
  plan = s.Schedule({.max_tokens = 2, .max_running = 8, .min_prefill_tokens = 3});
  for (int64_t id = 1; id <= 4; ++id) EXPECT_EQ(CountFor(plan, id), 1) << id;
  EXPECT_EQ(plan.tokens(), 7);
  EXPECT_EQ(CountFor(plan, 5), 3);  // the first waiting prompt, admitted
  EXPECT_EQ(s.num_running(), 5);
  // Without a budget the options' bound holds.
  Compute(s, plan);
  for (int64_t id = 1; id <= 4; ++id) s.Find(id)->Append(9);
  s.Find(5)->Append(9);
  plan = s.Schedule();
  EXPECT_EQ(plan.tokens(), 5 + 3 + 30);  // five decode rows, two prompts whole
  EXPECT_FALSE(plan.held_back);
}

TEST(SchedulerTest, StreamsUnderWayWaitAheadOfPromptsThatHaveNotBegun) {
  BlockPool pool(64);
  Scheduler s({.max_batch_tokens = 64, .max_running = 1}, pool, kBlockSize);
  s.Enqueue(MakeSequence(1, 4));
  s.Enqueue(MakeSequence(2, 4));
  s.Enqueue(MakeSequence(3, 5, /*n_generated=*/1));  // a hand-off with its first token
  s.Enqueue(MakeSequence(4, 6, /*n_generated=*/3));  // a migrated stream
  std::vector<int64_t> order;
  s.ForEachWaiting([&](Sequence& seq) { order.push_back(seq.id); });
  EXPECT_EQ(order, (std::vector<int64_t>{3, 4, 1, 2}));
  const StepPlan plan = s.Schedule();
  ASSERT_EQ(plan.chunks.size(), 1u);
  EXPECT_EQ(plan.chunks[0].seq_id, 3);
}

}  // namespace
}  // namespace tandem::engine
