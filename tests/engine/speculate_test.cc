// Prompt-lookup speculation in the engine, on the real stories260K model:
// the output (ids and logprobs) equals decoding one token per step, greedy
// and sampled, with penalties and a response format, alone and in a batch;
// proposals are made and kept on repetitive text; the KV blocks the cache
// ends up with are those of a run without speculation.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "absl/container/flat_hash_set.h"
#include "engine/engine.h"
#include "engine/model/model.h"
#include "tests/engine/test_backends.h"
#include "tests/engine/test_models.h"

namespace tandem::engine {
namespace {

constexpr char kRepetitive[] =
    "Lily went to the park. She saw a big red ball. She wanted to play with the ball. "
    "Lily went to the park. She saw a big red ball. She wanted to play with the ball. "
    "Lily went to the park. She saw a big red ball.";

struct Outcome {
  std::vector<std::vector<SampledToken>> tokens;  // per request, in order
  std::vector<FinishReason> finish;
  absl::flat_hash_set<uint64_t> stored;  // block hashes reported stored
  EngineStats stats;
};

class SpeculateTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto m = Model::Load(testing::StoriesPath());
    ASSERT_TRUE(m.ok()) << m.status();
    model_ = m->release();
  }
  static void TearDownTestSuite() { delete model_; }

  static GenerationRequest Request(const std::string& prompt, int32_t max_tokens) {
    GenerationRequest r;
    r.prompt = model_->tokenizer().Encode(prompt, {.add_special = true, .parse_special = true});
    r.max_tokens = max_tokens;
    r.top_logprobs = 3;
    return r;
  }

  static Outcome Run(std::vector<GenerationRequest> requests, bool speculate, int32_t k = 4,
                     int32_t max_batch = 0) {
    EngineOptions options;
    options.speculation.prompt_lookup = speculate;
    options.speculation.k = k;
    options.speculation.max_batch = max_batch;
    auto eng = Engine::Create(*model_, testing::MakeTestBackend(2), options);
    EXPECT_TRUE(eng.ok()) << eng.status();
    Outcome o;
    std::vector<int64_t> ids;
    for (GenerationRequest& r : requests) {
      auto id = (*eng)->Add(std::move(r));
      EXPECT_TRUE(id.ok()) << id.status();
      ids.push_back(*id);
    }
    o.tokens.resize(ids.size());
    o.finish.resize(ids.size(), FinishReason::kNone);
    while ((*eng)->HasWork()) {
      auto step = (*eng)->Step();
      EXPECT_TRUE(step.ok()) << step.status();
      for (TokenEvent& e : step->tokens) {
        const size_t i = std::find(ids.begin(), ids.end(), e.seq_id) - ids.begin();
        o.tokens[i].push_back(e.token);
        if (e.finish != FinishReason::kNone) o.finish[i] = e.finish;
      }
      for (const BlockEvent& b : step->blocks) {
        if (b.kind == BlockEvent::Kind::kStored) o.stored.insert(b.hash.low ^ (b.hash.high * 31));
      }
    }
    o.stats = (*eng)->stats();
    return o;
  }

  static void ExpectSame(const Outcome& got, const Outcome& want) {
    ASSERT_EQ(got.tokens.size(), want.tokens.size());
    for (size_t i = 0; i < want.tokens.size(); ++i) {
      ASSERT_EQ(got.tokens[i].size(), want.tokens[i].size()) << "request " << i;
      for (size_t t = 0; t < want.tokens[i].size(); ++t) {
        ASSERT_EQ(got.tokens[i][t].id, want.tokens[i][t].id) << "request " << i << " token " << t;
        EXPECT_NEAR(got.tokens[i][t].logprob, want.tokens[i][t].logprob, 1e-4);
        ASSERT_EQ(got.tokens[i][t].top.size(), want.tokens[i][t].top.size());
      }
      EXPECT_EQ(got.finish[i], want.finish[i]);
    }
  }

  static Model* model_;
};
Model* SpeculateTest::model_ = nullptr;

TEST_F(SpeculateTest, GreedyOutputIsUnchangedAndProposalsAreKept) {
  const Outcome plain = Run({Request(kRepetitive, 96)}, false);
  const Outcome spec = Run({Request(kRepetitive, 96)}, true);
  ExpectSame(spec, plain);
  EXPECT_GT(spec.stats.spec_proposed, 0);
  EXPECT_GT(spec.stats.spec_accepted, 0);
  EXPECT_LE(spec.stats.spec_accepted, spec.stats.spec_proposed);
  EXPECT_EQ(plain.stats.spec_proposed, 0);
  // The blocks cached are those of the plain run: rejected proposals' KV
  // was never hashed.
  EXPECT_EQ(spec.stored, plain.stored);
  std::cout << "proposed " << spec.stats.spec_proposed << ", kept " << spec.stats.spec_accepted
            << "\n";
}

TEST_F(SpeculateTest, SampledOutputIsUnchangedDrawForDraw) {
  for (uint64_t seed : {1u, 2u, 3u}) {
    GenerationRequest r = Request(kRepetitive, 80);
    r.sampling.temperature = 0.7f;
    r.sampling.top_p = 0.9f;
    r.sampling.seed = seed;
    ExpectSame(Run({r}, true), Run({r}, false));
  }
}

TEST_F(SpeculateTest, PenaltiesFormatsAndBatchesAreUnchanged) {
  std::vector<GenerationRequest> batch;
  GenerationRequest a = Request(kRepetitive, 64);
  a.sampling.repetition_penalty = 1.3f;
  a.sampling.frequency_penalty = 0.4f;
  batch.push_back(a);
  GenerationRequest b = Request(kRepetitive, 64);
  b.sampling.constraint = {.kind = OutputConstraint::Kind::kRegex,
                           .source = "([A-Z][a-z]+ ){1,6}(went|saw) [a-z ]{1,40}\\."};
  batch.push_back(b);
  GenerationRequest c = Request("Once upon a time", 48);
  c.sampling.temperature = 1.0f;
  c.sampling.seed = 9;
  batch.push_back(c);
  GenerationRequest d = Request(kRepetitive, 50);
  d.sampling.speculation = Speculation::kOff;  // a request may say no
  batch.push_back(d);
  GenerationRequest e = Request(kRepetitive, 7);  // max_tokens cuts proposals
  batch.push_back(e);
  ExpectSame(Run(batch, true), Run(batch, false));
}

TEST_F(SpeculateTest, AContinuedSequenceMatchesAndARequestMayAskForIt) {
  const Outcome plain = Run({Request(kRepetitive, 60)}, false);
  GenerationRequest r = Request(kRepetitive, 60);
  for (int i = 0; i < 10; ++i) r.generated.push_back(plain.tokens[0][i].id);
  r.sampling.speculation = Speculation::kPromptLookup;  // the engine default is off
  const Outcome rest = Run({r}, false);
  ASSERT_EQ(rest.tokens[0].size(), plain.tokens[0].size() - 10);
  for (size_t t = 0; t < rest.tokens[0].size(); ++t) {
    EXPECT_EQ(rest.tokens[0][t].id, plain.tokens[0][t + 10].id) << t;
  }
  EXPECT_GT(rest.stats.spec_proposed, 0);
}

// Past max_batch running sequences nothing is proposed (the output is the
// same either way); at or below it proposals are made.
TEST_F(SpeculateTest, ABusyStepProposesNothing) {
  std::vector<GenerationRequest> batch;
  for (int i = 0; i < 3; ++i) batch.push_back(Request(kRepetitive, 40));
  const Outcome plain = Run(batch, false);
  const Outcome busy = Run(batch, true, 4, /*max_batch=*/2);
  EXPECT_EQ(busy.stats.spec_proposed, 0);
  ExpectSame(busy, plain);
  const Outcome room = Run(batch, true, 4, /*max_batch=*/3);
  EXPECT_GT(room.stats.spec_proposed, 0);
  ExpectSame(room, plain);
}

TEST_F(SpeculateTest, LargeKStaysWithinTheRowBudget) {
  std::vector<GenerationRequest> batch;
  for (int i = 0; i < 6; ++i) batch.push_back(Request(kRepetitive, 40 + i));
  ExpectSame(Run(batch, true, 16), Run(batch, false));
}

}  // namespace
}  // namespace tandem::engine
