// The real stories260K model (../shared/models): greedy decoding reproduces
// the text llama.cpp and llama2.c produce, and logprobs are consistent.
#include <cmath>
#include <string>

#include <gtest/gtest.h>

#include "engine/engine.h"
#include "engine/model/model.h"
#include "tests/engine/test_backends.h"
#include "tests/engine/test_models.h"

namespace tandem::engine {
namespace {

struct Completion {
  std::vector<TokenEvent> events;
  std::string text;
};

Completion Generate(const Model& model, const std::string& prompt, GenerationRequest r,
                    EngineOptions options = {}) {
  auto eng = Engine::Create(model, testing::MakeTestBackend(2), options);
  EXPECT_TRUE(eng.ok()) << eng.status();
  r.prompt = model.tokenizer().Encode(prompt, {.add_special = true, .parse_special = true});
  EXPECT_TRUE((*eng)->Add(r).ok());
  Completion c;
  Utf8StreamDecoder dec;
  while ((*eng)->HasWork()) {
    auto events = testing::Tokens((*eng)->Step());
    EXPECT_TRUE(events.ok()) << events.status();
    for (TokenEvent& e : *events) {
      c.text += dec.Push(model.tokenizer().TokenBytes(e.token.id));
      c.events.push_back(std::move(e));
    }
  }
  c.text += dec.Flush();
  return c;
}

class StoriesTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto m = Model::Load(testing::StoriesPath());
    ASSERT_TRUE(m.ok()) << m.status();
    model_ = m->release();
  }
  static void TearDownTestSuite() { delete model_; }
  static Model* model_;
};
Model* StoriesTest::model_ = nullptr;

constexpr char kExpected[] =
    "Once upon a time, there was a little girl named Lily. She loved to play outside in the "
    "park. One day, she saw a big, red ball. She wanted to play with it, but it was too "
    "high.\nLily's mom said";

TEST_F(StoriesTest, GreedyOnceUponATimeMatchesReference) {
  GenerationRequest r;
  r.max_tokens = 64;
  const Completion c = Generate(*model_, "Once upon a time", r);
  ASSERT_EQ(c.events.size(), 64u);
  EXPECT_EQ(c.events.back().finish, FinishReason::kLength);
  EXPECT_EQ("Once upon a time" + c.text, kExpected);
}

TEST_F(StoriesTest, GreedyIsStableAcrossKvTypesAndBlockSizes) {
  GenerationRequest r;
  r.max_tokens = 64;
  for (GgmlType kv : {GgmlType::kF32, GgmlType::kF16}) {
    for (int32_t bs : {1, 16, 64}) {
      EngineOptions o;
      o.kv.dtype = kv;
      o.kv.block_size = bs;
      o.max_batch_tokens = 3;  // chunked prefill
      const Completion c = Generate(*model_, "Once upon a time", r, o);
      EXPECT_EQ("Once upon a time" + c.text, kExpected)
          << "kv " << GgmlTypeName(kv) << " block_size " << bs;
    }
  }
}

TEST_F(StoriesTest, TopLogprobsAreConsistentWithTheChosenToken) {
  GenerationRequest r;
  r.max_tokens = 16;
  r.top_logprobs = 20;
  const Completion c = Generate(*model_, "Once upon a time", r);
  for (const TokenEvent& e : c.events) {
    ASSERT_EQ(e.token.top.size(), 20u);
    // Greedy: the chosen token is the most likely one.
    EXPECT_EQ(e.token.top[0].id, e.token.id);
    EXPECT_FLOAT_EQ(e.token.top[0].logprob, e.token.logprob);
    double mass = 0;
    for (size_t i = 0; i < e.token.top.size(); ++i) {
      EXPECT_LE(e.token.top[i].logprob, 0.0f);
      if (i > 0) {
        EXPECT_LE(e.token.top[i].logprob, e.token.top[i - 1].logprob);
      }
      mass += std::exp(e.token.top[i].logprob);
    }
    EXPECT_LE(mass, 1.0 + 1e-5);
  }
}

}  // namespace
}  // namespace tandem::engine
