// The engine's scheduler: continuous batching gives each sequence the same
// tokens as running it alone (also under preemption), requests are validated
// with messages naming the field, cancelling frees KV blocks, seeded
// sampling is deterministic, logit adjustments (penalties, biases,
// min_tokens, stop_token_ids) act and continue across engines, and prompt
// logprobs equal what generation reported for the same tokens.
#include "engine/engine.h"

#include <algorithm>
#include <map>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/engine/test_backends.h"
#include "tests/engine/test_models.h"

namespace tandem::engine {
namespace {

using ::testing::HasSubstr;
using testing::LoadSynthetic;
using testing::TinyOptions;

std::unique_ptr<Engine> MakeEngine(const Model& model, EngineOptions o = {}) {
  auto e = Engine::Create(model, testing::MakeTestBackend(2), o);
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
    auto events = testing::Tokens(e.Step());
    EXPECT_TRUE(events.ok()) << events.status();
    for (const TokenEvent& ev : *events) {
      if (ev.finish != FinishReason::kCancelled) out[ev.seq_id].push_back(ev.token.id);
    }
  }
  return out;
}

// Every event until the engine is idle, in order.
std::vector<TokenEvent> AllEvents(Engine& e) {
  std::vector<TokenEvent> all;
  while (e.HasWork()) {
    auto events = testing::Tokens(e.Step());
    EXPECT_TRUE(events.ok()) << events.status();
    if (!events.ok()) break;
    for (TokenEvent& ev : *events) all.push_back(std::move(ev));
  }
  return all;
}

std::vector<int32_t> Prompt(int n, int32_t salt) {
  std::vector<int32_t> p = {1};
  for (int i = 1; i < n; ++i) p.push_back(3 + (i * 7 + salt * 13) % 290);
  return p;
}

// The batching tests' requests: sequence s has a (5 + 9s)-token prompt and is
// greedy or sampled by turns.
GenerationRequest MixedRequest(int s) {
  return Request(Prompt(5 + 9 * s, s), 12, s, s % 2 ? 0.8f : 0.0f);
}

// The first n MixedRequests' tokens, each run alone.
std::vector<std::vector<int32_t>> SoloRuns(const Model& model, int n) {
  std::vector<std::vector<int32_t>> solo;
  for (int s = 0; s < n; ++s) {
    auto e = MakeEngine(model);
    const int64_t id = *e->Add(MixedRequest(s));
    solo.push_back(RunAll(*e)[id]);
  }
  return solo;
}

TEST(EngineTest, BatchedSequencesMatchSoloRuns) {
  auto model = LoadSynthetic(TinyOptions());
  const std::vector<std::vector<int32_t>> solo = SoloRuns(*model, 5);
  // Same requests together, in small steps so prefill chunks and decodes mix,
  // and a tiny KV budget so sequences get preempted and recomputed.
  EngineOptions o;
  o.max_batch_tokens = 7;
  o.kv.block_size = 4;
  o.kv.budget_bytes = 16 * 2 * 2 * 4 * 32 * 4;  // 16 blocks of this model
  auto e = MakeEngine(*model, o);
  std::vector<int64_t> ids;
  for (int s = 0; s < 5; ++s) ids.push_back(*e->Add(MixedRequest(s)));
  auto together = RunAll(*e);
  for (int s = 0; s < 5; ++s) EXPECT_EQ(together[ids[s]], solo[s]) << "sequence " << s;
  EXPECT_GT(e->stats().preemptions, 0);
  EXPECT_EQ(e->stats().blocks_used, 0);
}

// An inter-token latency target changes which tokens share a step, never
// what comes out: every sequence ends as it does alone. The budget shows in
// the stats; a target no step can meet still moves every sequence (a token
// of a prompt and one running sequence a step at least), and a generous one
// only grows it.
TEST(EngineTest, AnItlTargetChangesStepsNotOutputs) {
  auto model = LoadSynthetic(TinyOptions());
  constexpr int kSequences = 5;
  const std::vector<std::vector<int32_t>> solo = SoloRuns(*model, kSequences);
  for (const double target : {1e-9, 3600.0}) {
    EngineOptions o;
    o.max_batch_tokens = 16;
    o.itl_target_s = target;
    auto e = MakeEngine(*model, o);
    std::vector<int64_t> ids;
    for (int s = 0; s < kSequences; ++s) ids.push_back(*e->Add(MixedRequest(s)));
    int32_t most_running = 0;
    std::map<int64_t, std::vector<int32_t>> together;
    while (e->HasWork()) {
      auto events = testing::Tokens(e->Step());
      ASSERT_TRUE(events.ok()) << events.status();
      for (const TokenEvent& ev : *events) together[ev.seq_id].push_back(ev.token.id);
      most_running = std::max(most_running, e->stats().running);
    }
    for (int s = 0; s < kSequences; ++s) {
      EXPECT_EQ(together[ids[s]], solo[s]) << "target " << target << " sequence " << s;
    }
    const EngineStats stats = e->stats();
    if (target < 1) {
      // Every step was over: the budget fell to one token, one sequence.
      EXPECT_EQ(stats.itl_step_tokens, 1);
      EXPECT_EQ(stats.itl_max_running, 1);
      EXPECT_LT(most_running, kSequences);
    } else {
      // Every step was under: the budget only grew (to the options' bound).
      EXPECT_GE(stats.itl_step_tokens, kItlInitialTokens);
      EXPECT_LE(stats.itl_step_tokens, 16);
    }
  }
  EngineOptions bad;
  bad.itl_target_s = -1;
  auto refused = Engine::Create(*model, testing::MakeTestBackend(2), bad);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("itl_target_s"), std::string::npos);
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
  auto first = testing::Tokens(e->Step());
  ASSERT_TRUE(first.ok());
  EXPECT_GT(e->stats().blocks_used, 0);
  e->Cancel(a);
  auto events = testing::Tokens(e->Step());
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
    auto events = testing::Tokens(e->Step());
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
  const std::vector<TokenEvent> all = AllEvents(*e);
  ASSERT_FALSE(all.empty());
  EXPECT_EQ(all.back().seq_id, id);
  EXPECT_EQ(all.back().finish, FinishReason::kEos);
  EXPECT_EQ(all.back().token.id, model->tokenizer().eos_id());
}

TEST(EngineTest, ExportedKvContinuesInAnotherEngine) {
  auto model = LoadSynthetic(TinyOptions());
  for (float temperature : {0.0f, 0.9f}) {
    // Reference: one engine does everything.
    auto solo = MakeEngine(*model);
    const int64_t solo_id = *solo->Add(Request(Prompt(37, 9), 10, 77, temperature));
    const std::vector<int32_t> expected = RunAll(*solo)[solo_id];

    // Prefill side: one token, KV exported on finish.
    EngineOptions prefill_options;
    prefill_options.kv.block_size = 16;
    auto prefill = MakeEngine(*model, prefill_options);
    GenerationRequest first_req = Request(Prompt(37, 9), 1, 77, temperature);
    first_req.export_kv = true;
    ASSERT_TRUE(prefill->Add(first_req).ok());
    auto events = testing::Tokens(prefill->Step());
    ASSERT_TRUE(events.ok());
    ASSERT_EQ(events->size(), 1u);
    const TokenEvent& first = events->front();
    ASSERT_NE(first.kv, nullptr);
    EXPECT_EQ(first.kv->n_tokens, 37);
    EXPECT_EQ(first.kv->blocks.size(), 3u);
    EXPECT_EQ(prefill->stats().blocks_used, 0);  // the snapshot is a copy

    // Decode side continues from the snapshot.
    auto decode = MakeEngine(*model);
    const int64_t id =
        *decode->AddWithKv(Request(Prompt(37, 9), 10, 77, temperature), first.token, first.kv);
    std::vector<int32_t> got = {first.token.id};
    auto decoded = RunAll(*decode);
    for (int32_t t : decoded[id]) got.push_back(t);
    EXPECT_EQ(got, expected) << "temperature " << temperature;
    EXPECT_EQ(decode->stats().blocks_used, 0);
  }
}

TEST(EngineTest, ImportRefusesMismatchedKv) {
  auto model = LoadSynthetic(TinyOptions());
  auto prefill = MakeEngine(*model);
  GenerationRequest r = Request(Prompt(20, 1), 1);
  r.export_kv = true;
  ASSERT_TRUE(prefill->Add(r).ok());
  auto events = testing::Tokens(prefill->Step());
  ASSERT_TRUE(events.ok());
  const TokenEvent first = events->front();
  EngineOptions f16;
  f16.kv.dtype = GgmlType::kF16;
  auto other_dtype = MakeEngine(*model, f16);
  auto s = other_dtype->AddWithKv(Request(Prompt(20, 1), 5), first.token, first.kv);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(s.status().message()), HasSubstr("kv.dtype"));
  auto decode = MakeEngine(*model);
  s = decode->AddWithKv(Request(Prompt(21, 1), 5), first.token, first.kv);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.status().message()), HasSubstr("kv.n_tokens"));
  auto tampered = std::make_shared<KvSnapshot>(*first.kv);
  tampered->model_fingerprint ^= 1;
  s = decode->AddWithKv(Request(Prompt(20, 1), 5), first.token, tampered);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(s.status().message()), HasSubstr("kv.model_fingerprint"));
}

TEST(EngineTest, SequenceLongerThanThePoolFinishesInsteadOfLooping) {
  auto model = LoadSynthetic(TinyOptions());
  EngineOptions o;
  o.kv.block_size = 4;
  o.kv.budget_bytes = 5 * 2 * 2 * 4 * 32 * 4;  // 5 blocks = 20 positions
  auto e = MakeEngine(*model, o);
  const int64_t id = *e->Add(Request(Prompt(10, 2), 100));
  auto out = RunAll(*e);
  EXPECT_EQ(out[id].size(), 11u);  // grows to 21 tokens, the last never fed
}


// Penalties, biases and min_tokens: a sequence continued in another engine
// (the decode worker after the prefill worker's first token) rebuilds the
// same adjustment state and so draws what one engine draws.
TEST(EngineLogitAdjustmentsTest, ContinueInAnotherEngineAsInOne) {
  auto model = LoadSynthetic(TinyOptions());
  auto adjusted = [](float temperature) {
    GenerationRequest r = Request(Prompt(37, 9), 12, 77, temperature);
    r.sampling.frequency_penalty = 1.5f;
    r.sampling.presence_penalty = 0.5f;
    r.sampling.repetition_penalty = 1.3f;
    r.sampling.logit_bias = {{.id = 5, .bias = 3.0f}, {.id = 40, .bias = -100.0f}};
    return r;
  };
  for (float temperature : {0.0f, 0.9f}) {
    auto solo = MakeEngine(*model);
    const int64_t solo_id = *solo->Add(adjusted(temperature));
    const std::vector<int32_t> expected = RunAll(*solo)[solo_id];
    ASSERT_EQ(expected.size(), 12u);
    EXPECT_EQ(std::count(expected.begin(), expected.end(), 40), 0);

    auto plain = MakeEngine(*model);
    const int64_t plain_id = *plain->Add(Request(Prompt(37, 9), 12, 77, temperature));
    EXPECT_NE(RunAll(*plain)[plain_id], expected) << "the adjustments change nothing";

    auto prefill = MakeEngine(*model);
    GenerationRequest first_req = adjusted(temperature);
    first_req.max_tokens = 1;
    first_req.export_kv = true;
    ASSERT_TRUE(prefill->Add(first_req).ok());
    auto events = testing::Tokens(prefill->Step());
    ASSERT_TRUE(events.ok());
    ASSERT_EQ(events->size(), 1u);
    auto decode = MakeEngine(*model);
    const int64_t id =
        *decode->AddWithKv(adjusted(temperature), events->front().token, events->front().kv);
    std::vector<int32_t> got = {events->front().token.id};
    auto decoded = RunAll(*decode);
    for (int32_t t : decoded[id]) got.push_back(t);
    EXPECT_EQ(got, expected) << "temperature " << temperature;
  }
}

TEST(EngineLogitAdjustmentsTest, StopTokenIdsEndTheSequence) {
  auto model = LoadSynthetic(TinyOptions());
  auto e = MakeEngine(*model);
  const int64_t free_id = *e->Add(Request(Prompt(8, 2), 16));
  const std::vector<int32_t> free_run = RunAll(*e)[free_id];
  ASSERT_EQ(free_run.size(), 16u);
  const int32_t stop = free_run[5];
  const auto first = std::find(free_run.begin(), free_run.end(), stop) - free_run.begin();

  GenerationRequest r = Request(Prompt(8, 2), 16);
  r.sampling.stop_token_ids = {stop};
  ASSERT_TRUE(e->Add(r).ok());
  const std::vector<TokenEvent> all = AllEvents(*e);
  ASSERT_EQ(static_cast<int64_t>(all.size()), first + 1);
  EXPECT_EQ(all.back().token.id, stop);
  EXPECT_EQ(all.back().finish, FinishReason::kStop);
}

TEST(EngineLogitAdjustmentsTest, MinTokensHoldsBackEndOfGeneration) {
  auto model = LoadSynthetic(TinyOptions());
  const int32_t eos = model->tokenizer().eos_id();
  ASSERT_GE(eos, 0);
  auto run = [&](int32_t min_tokens) {
    auto e = MakeEngine(*model);
    GenerationRequest r = Request(Prompt(8, 3), 32);
    r.ignore_eos = false;
    r.sampling.logit_bias = {{.id = eos, .bias = 100.0f}};  // EOS whenever allowed
    r.sampling.min_tokens = min_tokens;
    EXPECT_TRUE(e->Add(r).ok());
    return AllEvents(*e);
  };
  EXPECT_EQ(run(0).size(), 1u);
  const std::vector<TokenEvent> held = run(5);
  ASSERT_EQ(held.size(), 6u);
  for (int i = 0; i < 5; ++i) EXPECT_NE(held[i].token.id, eos) << i;
  EXPECT_EQ(held.back().token.id, eos);
  EXPECT_EQ(held.back().finish, FinishReason::kEos);
}

TEST(EngineLogitAdjustmentsTest, TokenIdsOutsideTheVocabularyAreRefused) {
  auto model = LoadSynthetic(TinyOptions());
  auto e = MakeEngine(*model);
  GenerationRequest r = Request(Prompt(8, 3), 4);
  r.sampling.logit_bias = {{.id = model->tokenizer().n_vocab(), .bias = 1.0f}};
  absl::StatusOr<int64_t> added = e->Add(r);
  EXPECT_EQ(added.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(added.status().message(), HasSubstr("logit_bias[0]"));
}


// Prompt logprobs: a prompt made of a greedy run's own tokens reports, at
// each of those positions, exactly what the run reported when it generated
// them; the whole prompt is computed (no prefix cache) in several chunks.
TEST(EnginePromptLogprobsTest, EqualWhatGenerationReportedForTheSameTokens) {
  auto model = LoadSynthetic(TinyOptions());
  auto e = MakeEngine(*model);
  const std::vector<int32_t> head = Prompt(8, 6);
  ASSERT_TRUE(e->Add(Request(head, 70)).ok());
  const std::vector<TokenEvent> run = AllEvents(*e);
  ASSERT_EQ(run.size(), 70u);
  std::vector<int32_t> prompt = head;
  for (const TokenEvent& ev : run) prompt.push_back(ev.token.id);

  GenerationRequest r = Request(prompt, 1);
  r.prompt_logprobs = 3;
  ASSERT_TRUE(e->Add(r).ok());
  const std::vector<TokenEvent> events = AllEvents(*e);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].cached_tokens, 0);  // the run's blocks were cached, not used
  const std::vector<SampledToken>& got = events[0].prompt_logprobs;
  ASSERT_EQ(got.size(), prompt.size() - 1);
  for (size_t i = 0; i + 1 < prompt.size(); ++i) EXPECT_EQ(got[i].id, prompt[i + 1]) << i;
  for (size_t t = 0; t < run.size(); ++t) {
    const SampledToken& p = got[head.size() - 1 + t];
    EXPECT_NEAR(p.logprob, run[t].token.logprob, 1e-4) << t;
    ASSERT_EQ(p.top.size(), 3u);
    for (int k = 0; k < 3; ++k) {
      EXPECT_EQ(p.top[k].id, run[t].token.top[k].id) << t << "/" << k;
      EXPECT_NEAR(p.top[k].logprob, run[t].token.top[k].logprob, 1e-4);
    }
  }
}

// Several requests gathering prompt logprobs at once share a step's
// kPromptLogprobsChunk rows (the logits scratch holds one row per sequence
// and that many more: with 4 running, 68 rows, which three 64-token chunks
// would overrun) and each gets what it gets alone.
TEST(EnginePromptLogprobsTest, ConcurrentRequestsShareTheStepsRows) {
  auto model = LoadSynthetic(TinyOptions());
  EngineOptions o;
  o.max_running = 4;
  std::vector<std::vector<SampledToken>> alone;
  for (int32_t salt = 1; salt <= 3; ++salt) {
    auto e = MakeEngine(*model, o);
    GenerationRequest r = Request(Prompt(150, salt), 2);
    r.prompt_logprobs = 2;
    ASSERT_TRUE(e->Add(r).ok());
    const std::vector<TokenEvent> events = AllEvents(*e);
    ASSERT_FALSE(events.empty());
    alone.push_back(events.front().prompt_logprobs);
  }
  auto e = MakeEngine(*model, o);
  std::vector<int64_t> ids;
  for (int32_t salt = 1; salt <= 3; ++salt) {
    GenerationRequest r = Request(Prompt(150, salt), 2);
    r.prompt_logprobs = 2;
    ids.push_back(*e->Add(r));
  }
  ASSERT_TRUE(e->Add(Request(Prompt(20, 9), 8)).ok());  // an ordinary one beside them
  const std::vector<TokenEvent> events = AllEvents(*e);
  int firsts = 0;
  for (const TokenEvent& ev : events) {
    const auto at = std::find(ids.begin(), ids.end(), ev.seq_id);
    if (at == ids.end() || ev.prompt_logprobs.empty()) continue;
    ++firsts;
    const std::vector<SampledToken>& want = alone[at - ids.begin()];
    ASSERT_EQ(ev.prompt_logprobs.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_EQ(ev.prompt_logprobs[i].id, want[i].id) << i;
      EXPECT_NEAR(ev.prompt_logprobs[i].logprob, want[i].logprob, 1e-4) << i;
    }
  }
  EXPECT_EQ(firsts, 3);
}

TEST(EnginePromptLogprobsTest, RangeIsChecked) {
  auto model = LoadSynthetic(TinyOptions());
  auto e = MakeEngine(*model);
  GenerationRequest r = Request(Prompt(8, 6), 1);
  r.prompt_logprobs = 21;
  EXPECT_THAT(e->Add(r).status().message(), HasSubstr("prompt_logprobs"));
}

}  // namespace
}  // namespace tandem::engine
