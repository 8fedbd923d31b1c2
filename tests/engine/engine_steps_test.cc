// What an engine step reports besides tokens, and what the engine was made
// ready for: block events (full blocks hashed with the shared block hash and
// published as stored; removed when the pool reuses their memory), streams
// resumed from tokens already generated, and the slot -> position map.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "engine/kv/block_hash.h"
#include "engine/engine.h"
#include "engine/gguf/model_fingerprint.h"
#include "tests/engine/test_backends.h"
#include "tests/engine/test_models.h"

namespace tandem::engine {
namespace {

using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using testing::LoadSynthetic;
using testing::TinyOptions;

std::unique_ptr<Engine> MakeEngine(const Model& model, EngineOptions o = {}) {
  auto e = Engine::Create(model, testing::MakeTestBackend(1), o);
  EXPECT_TRUE(e.ok()) << e.status();
  return std::move(*e);
}

std::vector<int32_t> Prompt(int n, int32_t salt) {
  std::vector<int32_t> p = {1};
  for (int i = 1; i < n; ++i) p.push_back(3 + (i * 7 + salt * 13) % 290);
  return p;
}

GenerationRequest Request(std::vector<int32_t> prompt, int32_t max_tokens, float temperature) {
  GenerationRequest r;
  r.prompt = std::move(prompt);
  r.max_tokens = max_tokens;
  r.ignore_eos = true;
  r.sampling.temperature = temperature;
  r.sampling.seed = 11;
  r.top_logprobs = 2;
  return r;
}

struct Outcome {
  std::vector<SampledToken> tokens;
  std::vector<BlockEvent> blocks;
};
Outcome RunToEnd(Engine& e) {
  Outcome r;
  while (e.HasWork()) {
    auto step = e.Step();
    EXPECT_TRUE(step.ok()) << step.status();
    for (TokenEvent& t : step->tokens) {
      if (t.finish != FinishReason::kCancelled) r.tokens.push_back(t.token);
    }
    for (BlockEvent& b : step->blocks) r.blocks.push_back(b);
  }
  return r;
}

TEST(EngineStepsTest, FullBlocksAreReportedStoredWithTheSharedChainedHash) {
  auto model = LoadSynthetic(TinyOptions());
  EngineOptions o;
  o.kv.block_size = 16;
  auto e = MakeEngine(*model, o);
  const std::vector<int32_t> prompt = Prompt(40, 3);
  ASSERT_TRUE(e->Add(Request(prompt, 30, 0.0f)).ok());
  const Outcome run = RunToEnd(*e);
  ASSERT_EQ(run.tokens.size(), 30u);

  // 40 prompt + 29 computed generated tokens fill 4 blocks (64 slots).
  std::vector<int32_t> seq = prompt;
  for (size_t i = 0; i + 1 < run.tokens.size(); ++i) seq.push_back(run.tokens[i].id);
  const std::vector<BlockHash> want = PrefixBlockHashes(seq, 16, model->fingerprint());
  ASSERT_EQ(want.size(), 4u);
  std::vector<BlockHash> stored;
  BlockHash parent = kRootParentHash;
  for (const BlockEvent& b : run.blocks) {
    ASSERT_EQ(b.kind, BlockEvent::Kind::kStored);
    EXPECT_EQ(b.parent_hash, parent);
    parent = b.hash;
    stored.push_back(b.hash);
  }
  EXPECT_THAT(stored, ElementsAreArray(want));
  // Finished: nothing in use, the full blocks stay cached for reuse.
  EXPECT_EQ(e->stats().blocks_used, 0);
  EXPECT_EQ(e->stats().blocks_cached, 4);
}

TEST(EngineStepsTest, EvictedBlocksAreReportedRemoved) {
  auto model = LoadSynthetic(TinyOptions());
  EngineOptions o;
  o.kv.block_size = 16;
  // Room for 8 blocks: the second sequence must evict the first one's.
  o.kv.budget_bytes = int64_t{8} * 2 * model->config().n_layer * 16 * model->config().kv_dim() * 4;
  auto e = MakeEngine(*model, o);
  ASSERT_TRUE(e->Add(Request(Prompt(64, 1), 1, 0.0f)).ok());
  const Outcome first = RunToEnd(*e);
  ASSERT_EQ(first.blocks.size(), 4u);
  ASSERT_TRUE(e->Add(Request(Prompt(100, 2), 1, 0.0f)).ok());  // 7 blocks
  const Outcome second = RunToEnd(*e);
  std::vector<BlockHash> removed;
  for (const BlockEvent& b : second.blocks) {
    if (b.kind == BlockEvent::Kind::kRemoved) removed.push_back(b.hash);
  }
  // 7 blocks from 8 when 4 are cached: 4 free blocks first, then 3 cached
  // ones, least recently released first.
  ASSERT_EQ(removed.size(), 3u);
  for (const BlockHash& h : removed) {
    EXPECT_NE(std::find_if(first.blocks.begin(), first.blocks.end(),
                           [h](const BlockEvent& b) { return b.hash == h; }),
              first.blocks.end());
  }
}

TEST(EngineStepsTest, AResumedStreamContinuesExactlyWhereItStopped) {
  auto model = LoadSynthetic(TinyOptions());
  for (float temperature : {0.0f, 0.8f}) {
    auto whole = MakeEngine(*model);
    ASSERT_TRUE(whole->Add(Request(Prompt(23, 5), 20, temperature)).ok());
    const Outcome expected = RunToEnd(*whole);
    ASSERT_EQ(expected.tokens.size(), 20u);

    // Another engine gets the prompt and the first 7 tokens (as a stream
    // moved to another worker would) and generates the remaining 13.
    auto resumed = MakeEngine(*model);
    GenerationRequest r = Request(Prompt(23, 5), 20, temperature);
    for (int i = 0; i < 7; ++i) r.generated.push_back(expected.tokens[i].id);
    ASSERT_TRUE(resumed->Add(r).ok());
    const Outcome rest = RunToEnd(*resumed);
    ASSERT_EQ(rest.tokens.size(), 13u) << "temperature " << temperature;
    for (size_t i = 0; i < rest.tokens.size(); ++i) {
      EXPECT_EQ(rest.tokens[i].id, expected.tokens[7 + i].id) << i;
      EXPECT_NEAR(rest.tokens[i].logprob, expected.tokens[7 + i].logprob, 1e-5) << i;
    }
  }
}

TEST(EngineStepsTest, GeneratedTokensAreValidated) {
  auto model = LoadSynthetic(TinyOptions());
  auto e = MakeEngine(*model);
  GenerationRequest r = Request(Prompt(5, 1), 4, 0.0f);
  r.generated = {3, model->config().n_vocab};
  auto bad = e->Add(r);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("generated[1]"));
  r.generated = {3, 4, 5, 6};  // all of max_tokens already
  bad = e->Add(r);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("generated"));
}

TEST(EngineStepsTest, FingerprintNeedsNoWeights) {
  const std::string path = ::testing::TempDir() + "/fingerprint_test.gguf";
  ASSERT_TRUE(WriteSyntheticModel(TinyOptions(), path).ok());
  auto model = Model::Load(path);
  ASSERT_TRUE(model.ok()) << model.status();
  // What the gateway does: the file's metadata and tensor table only.
  auto file = GgufFile::Open(path, {.require_tensor_data = false});
  ASSERT_TRUE(file.ok()) << file.status();
  auto config = ReadModelConfig(**file);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(ModelFingerprint(*config, **file), (*model)->fingerprint());

  // Another shape is another fingerprint.
  SyntheticModelOptions other = TinyOptions();
  other.n_layer = 3;
  const std::string other_path = ::testing::TempDir() + "/fingerprint_test_other.gguf";
  ASSERT_TRUE(WriteSyntheticModel(other, other_path).ok());
  auto other_model = Model::Load(other_path);
  ASSERT_TRUE(other_model.ok());
  EXPECT_NE((*other_model)->fingerprint(), (*model)->fingerprint());
}

}  // namespace
}  // namespace tandem::engine
