// The engine's scheduler: continuous batching gives each sequence the same
// tokens as running it alone (also under preemption), requests are validated
// with messages naming the field, cancelling frees KV blocks, and seeded
// sampling is deterministic.
#include "engine/engine.h"

#include <map>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/engine/test_models.h"

namespace tandem::engine {
namespace {

using ::testing::HasSubstr;
using testing::LoadSynthetic;
using testing::TinyOptions;

std::unique_ptr<Engine> MakeEngine(const Model& model, EngineOptions o = {}) {
  auto e = Engine::Create(model, MakeCpuBackend({.threads = 2}), o);
  EXPECT_TRUE(e.ok()) << e.status();
  return std::move(*e);
}

GenerationRequest Request(std::vector<int32_t> prompt, int32_t max_tokens, uint64_t seed = 0,
                          float temperature = 0.0f) {
  GenerationRequest r;
  r.prompt = std::move(prompt);
  r.max_tokens = max_tokens;
  r.ignore_eos = true;
  r.sampling.temperature = temperature;
  r.sampling.seed = seed;
  r.top_logprobs = 3;
  return r;
}

std::map<int64_t, std::vector<int32_t>> RunAll(Engine& e) {
  std::map<int64_t, std::vector<int32_t>> out;
  while (e.HasWork()) {
    auto events = e.Step();
    EXPECT_TRUE(events.ok()) << events.status();
    for (const TokenEvent& ev : *events) {
      if (ev.finish != FinishReason::kCancelled) out[ev.seq_id].push_back(ev.token.id);
    }
  }
  return out;
}

std::vector<int32_t> Prompt(int n, int32_t salt) {
  std::vector<int32_t> p = {1};
  for (int i = 1; i < n; ++i) p.push_back(3 + (i * 7 + salt * 13) % 290);
  return p;
}

TEST(EngineTest, BatchedSequencesMatchSoloRuns) {
  auto model = LoadSynthetic(TinyOptions());
  std::vector<std::vector<int32_t>> solo;
  for (int s = 0; s < 5; ++s) {
    auto e = MakeEngine(*model);
    const int64_t id = *e->Add(Request(Prompt(5 + 9 * s, s), 12, s, s % 2 ? 0.8f : 0.0f));
    solo.push_back(RunAll(*e)[id]);
  }
  // Same requests together, in small steps so prefill chunks and decodes mix,
  // and a tiny KV budget so sequences get preempted and recomputed.
  EngineOptions o;
  o.max_batch_tokens = 7;
  o.kv.block_size = 4;
  o.kv.budget_bytes = 16 * 2 * 2 * 4 * 32 * 4;  // 16 blocks of this model
  auto e = MakeEngine(*model, o);
  std::vector<int64_t> ids;
  for (int s = 0; s < 5; ++s) {
    ids.push_back(*e->Add(Request(Prompt(5 + 9 * s, s), 12, s, s % 2 ? 0.8f : 0.0f)));
  }
  auto together = RunAll(*e);
  for (int s = 0; s < 5; ++s) EXPECT_EQ(together[ids[s]], solo[s]) << "sequence " << s;
  EXPECT_GT(e->stats().preemptions, 0);
  EXPECT_EQ(e->stats().blocks_used, 0);
}

TEST(EngineTest, InvalidRequestsNameTheField) {
  auto model = LoadSynthetic(TinyOptions());
  EngineOptions o;
  o.max_context = 64;
  auto e = MakeEngine(*model, o);
  auto expect = [&](GenerationRequest r, const char* field) {
    absl::StatusOr<int64_t> s = e->Add(std::move(r));
    ASSERT_FALSE(s.ok()) << field;
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument) << field;
    EXPECT_THAT(std::string(s.status().message()), HasSubstr(field));
  };
  expect(Request({}, 4), "prompt");
  expect(Request({1, 300}, 4), "prompt_token_ids[1]");
  expect(Request({1, -1}, 4), "prompt_token_ids[1]");
  expect(Request({1}, 0), "max_tokens");
  auto r = Request({1}, 4);
  r.top_logprobs = 21;
  expect(r, "top_logprobs");
  r = Request({1}, 4, 0, -1.0f);
  expect(r, "temperature");
  expect(Request(Prompt(65, 0), 4), "max_context");
  EXPECT_FALSE(e->HasWork());
}

TEST(EngineTest, CancelFreesBlocks) {
  auto model = LoadSynthetic(TinyOptions());
  auto e = MakeEngine(*model);
  const int64_t a = *e->Add(Request(Prompt(40, 1), 100));
  const int64_t b = *e->Add(Request(Prompt(20, 2), 3));
  auto first = e->Step();
  ASSERT_TRUE(first.ok());
  EXPECT_GT(e->stats().blocks_used, 0);
  e->Cancel(a);
  auto events = e->Step();
  ASSERT_TRUE(events.ok());
  bool saw_cancel = false;
  size_t b_tokens = 0;
  for (const auto* batch : {&*first, &*events}) {
    for (const TokenEvent& ev : *batch) {
      saw_cancel |= ev.seq_id == a && ev.finish == FinishReason::kCancelled;
      b_tokens += ev.seq_id == b;
    }
  }
  EXPECT_TRUE(saw_cancel);
  auto rest = RunAll(*e);
  EXPECT_EQ(b_tokens + rest[b].size(), 3u);
  EXPECT_EQ(e->stats().blocks_used, 0);
  EXPECT_EQ(e->stats().running, 0);
  e->Cancel(12345);  // unknown ids are ignored
  EXPECT_FALSE(e->HasWork());
}

TEST(EngineTest, StopsAtMaxContext) {
  auto model = LoadSynthetic(TinyOptions());
  EngineOptions o;
  o.max_context = 20;
  auto e = MakeEngine(*model, o);
  const int64_t id = *e->Add(Request(Prompt(15, 3), 100));
  FinishReason last = FinishReason::kNone;
  int n = 0;
  while (e->HasWork()) {
    auto events = e->Step();
    ASSERT_TRUE(events.ok());
    for (const TokenEvent& ev : *events) {
      EXPECT_EQ(ev.seq_id, id);
      last = ev.finish;
      ++n;
    }
  }
  // Positions 0..19 hold KV; the token sampled at position 19 is the last.
  EXPECT_EQ(n, 6);
  EXPECT_EQ(last, FinishReason::kLength);
}

TEST(EngineTest, SeededSamplingIsDeterministic) {
  auto model = LoadSynthetic(TinyOptions());
  auto run = [&](uint64_t seed) {
    auto e = MakeEngine(*model);
    const int64_t id = *e->Add(Request(Prompt(8, 4), 32, seed, 1.0f));
    return RunAll(*e)[id];
  };
  EXPECT_EQ(run(7), run(7));
  EXPECT_NE(run(7), run(8));
}

TEST(EngineTest, StopsAtEndOfGeneration) {
  auto model = LoadSynthetic(TinyOptions());
  auto e = MakeEngine(*model);
  // Sample at high temperature until EOS (id 2) shows up or max_tokens ends.
  GenerationRequest r = Request(Prompt(4, 5), 2000, 3, 50.0f);
  r.ignore_eos = false;
  const int64_t id = *e->Add(r);
  std::vector<TokenEvent> all;
  while (e->HasWork()) {
    auto events = e->Step();
    ASSERT_TRUE(events.ok());
    for (TokenEvent& ev : *events) all.push_back(ev);
  }
  ASSERT_FALSE(all.empty());
  EXPECT_EQ(all.back().seq_id, id);
  EXPECT_EQ(all.back().finish, FinishReason::kStop);
  EXPECT_EQ(all.back().token.id, model->tokenizer().eos_id());
}

}  // namespace
}  // namespace tandem::engine
