// The copying synthetic model (SyntheticModelOptions::copying), the fixture
// of the speculation benchmarks: greedy decoding continues any token
// sequence the context holds, in every weight type the benchmarks use; a
// narrower, shallower copy with the same seed proposes what it picks, so
// draft speculation keeps nearly every proposal, as prompt lookup does, and
// both leave the output as it is without speculation; shapes it cannot be
// built in are refused by name.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine/model/model.h"
#include "engine/model/synthetic_model.h"
#include "tests/engine/spec_outcome.h"
#include "tests/engine/test_backends.h"
#include "tests/engine/test_models.h"

namespace tandem::engine {
namespace {

// The target: 4 layers (two of them noise), heads of 64, GQA 16/4.
SyntheticModelOptions TargetOptions(GgmlType type = GgmlType::kF32) {
  SyntheticModelOptions o;
  o.copying = true;
  o.n_vocab = 2000;
  o.n_embd = 1024;
  o.n_layer = 4;
  o.n_head = 16;
  o.n_head_kv = 4;
  o.n_ff = 64;
  o.context_length = 1024;
  o.type = type;
  o.seed = 5;
  return o;
}

// The draft: half the width and depth, the same KV width (4 heads of 64).
SyntheticModelOptions DraftOptions() {
  SyntheticModelOptions o = TargetOptions();
  o.n_embd = 512;
  o.n_layer = 2;
  o.n_head = 8;
  return o;
}

// `n` seeded random ids of ordinary pieces (no control or byte tokens).
std::vector<int32_t> RandomText(int32_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> id(259, 259 + 700);
  std::vector<int32_t> text(n);
  for (int32_t& t : text) t = id(rng);
  return text;
}

GenerationRequest Request(std::vector<int32_t> prompt, int32_t max_tokens) {
  GenerationRequest r;
  r.prompt = std::move(prompt);
  r.max_tokens = max_tokens;
  r.top_logprobs = 2;
  r.ignore_eos = true;
  return r;
}

// A passage, then its first `lead` tokens again: the model should go on
// with the rest of the passage.
std::vector<int32_t> EditPrompt(const std::vector<int32_t>& passage, int32_t lead) {
  std::vector<int32_t> prompt = {1};  // BOS
  prompt.insert(prompt.end(), passage.begin(), passage.end());
  prompt.insert(prompt.end(), passage.begin(), passage.begin() + lead);
  return prompt;
}

// Requests to go on with a 120-token passage (6 tokens of it begun), one
// per seed in [first, last], 96 tokens each.
std::vector<GenerationRequest> ContinueRequests(uint32_t first, uint32_t last) {
  std::vector<GenerationRequest> rs;
  for (uint32_t seed = first; seed <= last; ++seed) {
    rs.push_back(Request(EditPrompt(RandomText(120, seed), 6), 96));
  }
  return rs;
}

// No speculation; a copy that turns it on proposes whatever the batch (the
// default stops proposals past 8 sequences).
EngineOptions Plain() {
  EngineOptions o;
  o.speculation.max_batch = 0;
  return o;
}

testing::SpecOutcome Generate(const Model& model, EngineOptions options,
                         std::vector<GenerationRequest> requests, const Model* draft = nullptr) {
  DraftModel d;
  if (draft != nullptr) d = {.model = draft, .backend = testing::MakeTestBackend(2)};
  auto engine = Engine::Create(model, testing::MakeTestBackend(2), options, std::move(d));
  EXPECT_TRUE(engine.ok()) << engine.status();
  if (!engine.ok()) return {};
  std::vector<int64_t> ids;
  for (GenerationRequest& r : requests) {
    auto id = (*engine)->Add(std::move(r));
    EXPECT_TRUE(id.ok()) << id.status();
    ids.push_back(id.ok() ? *id : -1);
  }
  return testing::DrainOutcome(**engine, ids);
}

TEST(CopyingModelTest, GreedyDecodingContinuesAPassageTheContextHolds) {
  for (GgmlType type : {GgmlType::kF32, GgmlType::kQ8_0, GgmlType::kQ4_0}) {
    SCOPED_TRACE(GgmlTypeName(type));
    std::unique_ptr<Model> model = testing::LoadSynthetic(TargetOptions(type));
    ASSERT_NE(model, nullptr);
    std::vector<std::vector<int32_t>> passages;
    std::vector<GenerationRequest> requests;
    for (uint32_t seed = 1; seed <= 4; ++seed) {
      passages.push_back(RandomText(96, seed));
      requests.push_back(Request(EditPrompt(passages.back(), 8), 64));
    }
    const testing::SpecOutcome out = Generate(*model, {}, std::move(requests));
    ASSERT_EQ(out.tokens.size(), passages.size());
    for (size_t i = 0; i < passages.size(); ++i) {
      ASSERT_EQ(out.tokens[i].size(), 64u);
      for (size_t t = 0; t < 64; ++t) {
        ASSERT_EQ(out.tokens[i][t].id, passages[i][8 + t]) << "passage " << i << " token " << t;
        // Decisively: the runner-up is far behind.
        ASSERT_EQ(out.tokens[i][t].top.size(), 2u);
        EXPECT_GT(out.tokens[i][t].top[0].logprob - out.tokens[i][t].top[1].logprob, 5.0f);
      }
    }
  }
}

TEST(CopyingModelTest, ANarrowerShallowerCopyIsADraftThatAgrees) {
  std::unique_ptr<Model> model = testing::LoadSynthetic(TargetOptions());
  std::unique_ptr<Model> draft = testing::LoadSynthetic(DraftOptions());
  ASSERT_NE(model, nullptr);
  ASSERT_NE(draft, nullptr);
  const testing::SpecOutcome want = Generate(*model, Plain(), ContinueRequests(11, 13));
  EngineOptions spec = Plain();
  spec.speculation.draft = true;
  spec.speculation.min_gain = 0;  // propose whatever it costs: no timings
  const testing::SpecOutcome got = Generate(*model, spec, ContinueRequests(11, 13), draft.get());
  testing::ExpectSameOutcome(got, want);
  EXPECT_GT(got.stats.spec_draft_proposed, 3 * 96 / 5);
  EXPECT_GE(got.stats.spec_draft_accepted, got.stats.spec_draft_proposed * 9 / 10)
      << got.stats.spec_draft_accepted << " of " << got.stats.spec_draft_proposed;
}

TEST(CopyingModelTest, PromptLookupKeepsNearlyEveryProposal) {
  std::unique_ptr<Model> model = testing::LoadSynthetic(TargetOptions(GgmlType::kQ8_0));
  ASSERT_NE(model, nullptr);
  const testing::SpecOutcome want = Generate(*model, Plain(), ContinueRequests(21, 22));
  EngineOptions spec = Plain();
  spec.speculation.prompt_lookup = true;
  const testing::SpecOutcome got = Generate(*model, spec, ContinueRequests(21, 22));
  testing::ExpectSameOutcome(got, want);
  EXPECT_GT(got.stats.spec_proposed, 2 * 96 / 5);
  EXPECT_GE(got.stats.spec_accepted, got.stats.spec_proposed * 9 / 10)
      << got.stats.spec_accepted << " of " << got.stats.spec_proposed;
}

TEST(CopyingModelTest, ShapesItCannotBeBuiltInAreRefusedByName) {
  const std::string path = ::testing::TempDir() + "/tandem_copying_refused.gguf";
  auto refused = [&](SyntheticModelOptions o) {
    const absl::Status s = WriteSyntheticModel(o, path);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_NE(s.message().find("copying"), std::string::npos) << s;
  };
  SyntheticModelOptions o = TargetOptions();
  o.arch = "qwen2";
  refused(o);
  o = TargetOptions();
  o.tied_output = true;
  refused(o);
  o = TargetOptions();
  o.n_layer = 1;
  refused(o);
  o = TargetOptions();
  o.n_head = 32;  // heads of 32
  o.n_head_kv = 8;
  refused(o);
  o = TargetOptions();
  o.n_embd = 256;
  o.n_head = 4;
  refused(o);
  o = TargetOptions();
  o.n_embd = 576;  // three heads of 192
  o.n_head = 3;
  o.n_head_kv = 3;
  refused(o);
}

}  // namespace
}  // namespace tandem::engine
