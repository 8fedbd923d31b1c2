// The engine's prefix cache: a sequence admitted without KV takes the
// leading full blocks the pool already holds and computes only the rest,
// and its output is the same as without the cache (ids exactly, logprobs to
// 1e-5), alone, in mixed batches and under preemption.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "engine/engine.h"
#include "tests/engine/test_backends.h"
#include "tests/engine/test_models.h"

namespace tandem::engine {
namespace {

using testing::LoadSynthetic;
using testing::TinyOptions;

constexpr int32_t kBlockSize = 16;

std::unique_ptr<Engine> MakeEngine(const Model& model, int64_t budget_bytes = 256ll << 20) {
  EngineOptions o;
  o.kv.block_size = kBlockSize;
  o.kv.budget_bytes = budget_bytes;
  o.max_batch_tokens = 64;  // prompts prefill in chunks, mixed with decodes
  auto e = Engine::Create(model, testing::MakeTestBackend(1), o);
  EXPECT_TRUE(e.ok()) << e.status();
  return std::move(*e);
}

// `shared` leading tokens common to every `group`, then `n - shared` of its own.
std::vector<int32_t> Prompt(int n, int shared, int32_t group) {
  std::vector<int32_t> p = {1};
  for (int i = 1; i < n; ++i) {
    p.push_back(i < shared ? 3 + (i * 7) % 290 : 3 + (i * 11 + group * 37) % 290);
  }
  return p;
}

GenerationRequest Request(std::vector<int32_t> prompt, int32_t max_tokens, float temperature) {
  GenerationRequest r;
  r.prompt = std::move(prompt);
  r.max_tokens = max_tokens;
  r.ignore_eos = true;
  r.sampling.temperature = temperature;
  r.sampling.seed = 5;
  r.top_logprobs = 3;
  return r;
}

struct SeqRun {
  std::vector<SampledToken> tokens;
  int32_t cached = -1;
};

// Adds every request, steps to the end; each request's tokens, by index.
std::vector<SeqRun> RunAll(Engine& e, const std::vector<GenerationRequest>& requests) {
  std::map<int64_t, size_t> index;
  for (size_t i = 0; i < requests.size(); ++i) {
    absl::StatusOr<int64_t> id = e.Add(requests[i]);
    EXPECT_TRUE(id.ok()) << id.status();
    if (id.ok()) index[*id] = i;
  }
  std::vector<SeqRun> out(requests.size());
  while (e.HasWork()) {
    absl::StatusOr<StepOutput> step = e.Step();
    EXPECT_TRUE(step.ok()) << step.status();
    if (!step.ok()) break;
    for (const TokenEvent& t : step->tokens) {
      SeqRun& r = out[index.at(t.seq_id)];
      r.tokens.push_back(t.token);
      r.cached = t.cached_tokens;
    }
  }
  return out;
}

void ExpectSameTokens(const std::vector<SampledToken>& got, const std::vector<SampledToken>& want,
                      const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(got[i].id, want[i].id) << what << " token " << i;
    EXPECT_NEAR(got[i].logprob, want[i].logprob, 1e-5) << what << " token " << i;
    ASSERT_EQ(got[i].top.size(), want[i].top.size()) << what;
    for (size_t k = 0; k < got[i].top.size(); ++k) {
      EXPECT_EQ(got[i].top[k].id, want[i].top[k].id) << what << " token " << i << " top " << k;
      EXPECT_NEAR(got[i].top[k].logprob, want[i].top[k].logprob, 1e-5) << what;
    }
  }
}

class PrefixCacheTest : public ::testing::Test {
 protected:
  void SetUp() override { model_ = LoadSynthetic(TinyOptions()); }
  std::unique_ptr<Model> model_;
};

TEST_F(PrefixCacheTest, TheSamePromptTwiceComputesOnlyTheSuffix) {
  for (const int n : {70, 64, 17, 16, 5}) {
    const GenerationRequest req = Request(Prompt(n, n, 0), 6, 0.0f);
    auto engine = MakeEngine(*model_);
    const SeqRun first = RunAll(*engine, {req})[0];
    const SeqRun second = RunAll(*engine, {req})[0];
    EXPECT_EQ(first.cached, 0) << n;
    // Whole blocks, and never the last prompt token: its logits are needed.
    EXPECT_EQ(second.cached, (n - 1) / kBlockSize * kBlockSize) << n;
    ExpectSameTokens(second.tokens, first.tokens, "prompt of " + std::to_string(n));
    const EngineStats s = engine->stats();
    EXPECT_EQ(s.prefix_queried_tokens, 2 * n);
    EXPECT_EQ(s.prefix_hit_tokens, second.cached);
  }
}

TEST_F(PrefixCacheTest, SharedPrefixesInMixedBatchesMatchAnEngineWithoutACache) {
  // Eight requests in two groups sharing 40 (two full blocks and a partial)
  // or 100 tokens, greedy and sampled, run together after one warm-up each.
  std::vector<GenerationRequest> requests;
  for (int i = 0; i < 8; ++i) {
    const int shared = i % 2 == 0 ? 40 : 100;
    requests.push_back(Request(Prompt(90 + 7 * i, shared, i), 12, i % 3 == 0 ? 0.0f : 0.8f));
  }
  std::vector<SeqRun> reference;
  for (const GenerationRequest& r : requests) {
    auto fresh = MakeEngine(*model_);  // nothing cached, alone in its batch
    reference.push_back(RunAll(*fresh, {r})[0]);
  }
  auto engine = MakeEngine(*model_);
  RunAll(*engine, {Request(Prompt(60, 60, 0), 2, 0.0f)});  // warms the first shared blocks
  const std::vector<SeqRun> got = RunAll(*engine, requests);
  int64_t hit = 0;
  for (size_t i = 0; i < requests.size(); ++i) {
    ExpectSameTokens(got[i].tokens, reference[i].tokens, "request " + std::to_string(i));
    hit += got[i].cached;
  }
  EXPECT_GT(hit, 0);
}

TEST_F(PrefixCacheTest, OutputHoldsUnderPreemption) {
  // Room for ~20 blocks: four 100-token prompts generating 40 tokens each
  // (9 blocks apiece) cannot all run at once.
  const int64_t block_bytes =
      int64_t{2} * 2 * kBlockSize * 32 * static_cast<int64_t>(sizeof(float));  // K,V x layers
  std::vector<GenerationRequest> requests;
  for (int i = 0; i < 4; ++i) requests.push_back(Request(Prompt(100, 64, i), 40, 0.0f));
  std::vector<SeqRun> reference;
  for (const GenerationRequest& r : requests) {
    auto fresh = MakeEngine(*model_);
    reference.push_back(RunAll(*fresh, {r})[0]);
  }
  auto engine = MakeEngine(*model_, 20 * block_bytes);
  const std::vector<SeqRun> got = RunAll(*engine, requests);
  EXPECT_GT(engine->stats().preemptions, 0);
  EXPECT_GT(engine->stats().prefix_hit_tokens, 0);
  for (size_t i = 0; i < requests.size(); ++i) {
    ExpectSameTokens(got[i].tokens, reference[i].tokens, "request " + std::to_string(i));
  }
  // Everything went back: nothing used, every hashed block still cached.
  EXPECT_EQ(engine->stats().blocks_used, 0);
}

// Delta transfer, engine side: KV that leaves out the leading blocks the
// engine holds is placed after them; if they were evicted meanwhile, the
// prompt is computed instead. Either way the output is what a full import
// gives.
class DeltaImportTest : public PrefixCacheTest {
 protected:
  struct Prefilled {
    SampledToken first;
    std::shared_ptr<const KvSnapshot> kv;
  };
  Prefilled Prefill(const std::vector<int32_t>& prompt) {
    auto engine = MakeEngine(*model_);
    GenerationRequest r = Request(prompt, 1, 0.0f);
    r.export_kv = true;
    EXPECT_TRUE(engine->Add(r).ok());
    Prefilled out;
    while (engine->HasWork()) {
      absl::StatusOr<StepOutput> step = engine->Step();
      EXPECT_TRUE(step.ok()) << step.status();
      if (!step.ok()) break;
      for (TokenEvent& t : step->tokens) {
        out.first = t.token;
        out.kv = t.kv;
      }
    }
    return out;
  }
  static std::shared_ptr<const KvSnapshot> WithoutLeading(const KvSnapshot& full, int32_t skip) {
    auto delta = std::make_shared<KvSnapshot>(full);
    delta->first_block = skip;
    delta->blocks.erase(delta->blocks.begin(), delta->blocks.begin() + skip);
    return delta;
  }
  std::vector<SampledToken> Decode(Engine& e, const GenerationRequest& r, const Prefilled& p,
                                   std::shared_ptr<const KvSnapshot> kv) {
    absl::StatusOr<int64_t> id = e.AddWithKv(r, p.first, std::move(kv));
    EXPECT_TRUE(id.ok()) << id.status();
    std::vector<SampledToken> out;
    while (e.HasWork()) {
      absl::StatusOr<StepOutput> step = e.Step();
      EXPECT_TRUE(step.ok()) << step.status();
      if (!step.ok()) break;
      for (const TokenEvent& t : step->tokens) out.push_back(t.token);
    }
    return out;
  }
};

TEST_F(DeltaImportTest, LeadingBlocksComeFromTheCache) {
  const std::vector<int32_t> prompt = Prompt(75, 60, 1);  // 4 full blocks + 11
  const Prefilled p = Prefill(prompt);
  ASSERT_NE(p.kv, nullptr);
  const GenerationRequest r = Request(prompt, 8, 0.0f);
  auto reference_engine = MakeEngine(*model_);
  const std::vector<SampledToken> reference = Decode(*reference_engine, r, p, p.kv);

  auto engine = MakeEngine(*model_);
  // An earlier conversation left the first 3 blocks (48 shared tokens).
  RunAll(*engine, {Request(Prompt(50, 60, 2), 2, 0.0f)});
  const std::vector<SampledToken> got = Decode(*engine, r, p, WithoutLeading(*p.kv, 3));
  ExpectSameTokens(got, reference, "delta import");
  EXPECT_EQ(engine->stats().delta_fallbacks, 0);
  EXPECT_EQ(engine->stats().blocks_used, 0);
}

TEST_F(DeltaImportTest, EvictedLeadingBlocksAreComputed) {
  const std::vector<int32_t> prompt = Prompt(75, 75, 1);
  const Prefilled p = Prefill(prompt);
  ASSERT_NE(p.kv, nullptr);
  const GenerationRequest r = Request(prompt, 8, 0.0f);
  auto reference_engine = MakeEngine(*model_);
  const std::vector<SampledToken> reference = Decode(*reference_engine, r, p, p.kv);

  auto engine = MakeEngine(*model_);
  RunAll(*engine, {Request(Prompt(40, 75, 1), 2, 0.0f)});  // holds 2 of the 4 blocks
  const std::vector<SampledToken> got = Decode(*engine, r, p, WithoutLeading(*p.kv, 4));
  ExpectSameTokens(got, reference, "fallback");
  EXPECT_EQ(engine->stats().delta_fallbacks, 1);
  EXPECT_EQ(engine->stats().blocks_used, 0);
}

TEST_F(DeltaImportTest, ASnapshotMustLeaveTheLastBlock) {
  const std::vector<int32_t> prompt = Prompt(64, 64, 1);  // exactly 4 blocks
  const Prefilled p = Prefill(prompt);
  ASSERT_NE(p.kv, nullptr);
  auto engine = MakeEngine(*model_);
  absl::StatusOr<int64_t> id =
      engine->AddWithKv(Request(prompt, 4, 0.0f), p.first, WithoutLeading(*p.kv, 4));
  EXPECT_EQ(id.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(id.status().message(), ::testing::HasSubstr("kv.first_block"));
}

TEST_F(DeltaImportTest, APulledPrefixIsCopiedWhereTheCacheEnds) {
  const std::vector<int32_t> prompt = Prompt(90, 90, 3);  // 5 full blocks + 10
  const GenerationRequest r = Request(prompt, 6, 0.0f);
  auto reference_engine = MakeEngine(*model_);
  const std::vector<SeqRun> reference = RunAll(*reference_engine, {r});
  // The holder's KV for the first 4 blocks (64 tokens), as a pull brings it.
  const Prefilled holder = Prefill(std::vector<int32_t>(prompt.begin(), prompt.begin() + 64));
  ASSERT_NE(holder.kv, nullptr);
  for (const int cached_blocks : {0, 2, 4}) {
    auto engine = MakeEngine(*model_);
    if (cached_blocks > 0) {
      RunAll(*engine, {Request(std::vector<int32_t>(prompt.begin(),
                                                    prompt.begin() + cached_blocks * 16 + 1),
                               1, 0.0f)});
    }
    GenerationRequest pulled = r;
    pulled.prefix_kv = holder.kv;
    const SeqRun got = RunAll(*engine, {pulled})[0];
    ExpectSameTokens(got.tokens, reference[0].tokens,
                     "cache holding " + std::to_string(cached_blocks) + " blocks");
    EXPECT_EQ(got.cached, 64);  // none of the prefix was computed here
    const EngineStats s = engine->stats();
    EXPECT_EQ(s.prefix_pulled_tokens, 64 - cached_blocks * 16) << cached_blocks;
    EXPECT_EQ(s.blocks_used, 0);
  }
  // A prefix must leave some of the prompt to compute and be whole blocks.
  auto engine = MakeEngine(*model_);
  GenerationRequest whole = Request(std::vector<int32_t>(prompt.begin(), prompt.begin() + 64), 2,
                                    0.0f);
  whole.prefix_kv = holder.kv;
  absl::StatusOr<int64_t> id = engine->Add(whole);
  EXPECT_EQ(id.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(id.status().message(), ::testing::HasSubstr("prefix_kv"));
}

TEST_F(PrefixCacheTest, TheEnginesBlockEventsAreTheChainTheGatewayComputes) {
  // The gateway hashes a prompt with PrefixBlockHashes to look it up in the
  // index; the engine reports what it stores. They must be the same chain.
  const std::vector<int32_t> prompt = Prompt(83, 83, 4);  // 5 full blocks + 3
  auto engine = MakeEngine(*model_);
  ASSERT_TRUE(engine->Add(Request(prompt, 1, 0.0f)).ok());
  std::vector<BlockHash> stored;
  while (engine->HasWork()) {
    absl::StatusOr<StepOutput> step = engine->Step();
    ASSERT_TRUE(step.ok()) << step.status();
    for (const BlockEvent& e : step->blocks) {
      if (e.kind == BlockEvent::Kind::kStored) stored.push_back(e.hash);
    }
  }
  EXPECT_EQ(stored, PrefixBlockHashes(prompt, kBlockSize, model_->fingerprint()));
}

TEST_F(DeltaImportTest, AResumedStreamContinuesWhereItStood) {
  // A stream's first 5 tokens were produced before its worker failed: the
  // prefill side computes prompt + those 5 and samples the 6th; the decode
  // side takes that KV with them and goes on. Sampled, seeded: the same
  // tokens as one uninterrupted run.
  const std::vector<int32_t> prompt = Prompt(37, 37, 5);
  const GenerationRequest full = Request(prompt, 12, 0.8f);
  auto reference_engine = MakeEngine(*model_);
  const std::vector<SampledToken> reference = RunAll(*reference_engine, {full})[0].tokens;
  ASSERT_EQ(reference.size(), 12u);
  std::vector<int32_t> produced;
  for (int i = 0; i < 5; ++i) produced.push_back(reference[i].id);

  auto prefill = MakeEngine(*model_);
  GenerationRequest resume = full;
  resume.generated = produced;
  resume.max_tokens = 6;
  resume.export_kv = true;
  ASSERT_TRUE(prefill->Add(resume).ok());
  SampledToken sixth;
  std::shared_ptr<const KvSnapshot> kv;
  while (prefill->HasWork()) {
    absl::StatusOr<StepOutput> step = prefill->Step();
    ASSERT_TRUE(step.ok()) << step.status();
    for (TokenEvent& t : step->tokens) {
      sixth = t.token;
      kv = t.kv;
    }
  }
  ASSERT_NE(kv, nullptr);
  EXPECT_EQ(kv->n_tokens, 37 + 5);
  ExpectSameTokens({sixth}, {reference[5]}, "the token after the resumed ones");

  auto decode = MakeEngine(*model_);
  GenerationRequest rest = full;
  rest.generated = produced;
  const std::vector<SampledToken> got = Decode(*decode, rest, {.first = sixth, .kv = kv}, kv);
  ExpectSameTokens(got, std::vector<SampledToken>(reference.begin() + 6, reference.end()),
                   "after the migration");
}

}  // namespace
}  // namespace tandem::engine
