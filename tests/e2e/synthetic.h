// Shared by the end-to-end tests over a synthetic model: a tiny Llama with a
// 2048-token context written once per test process, seeded prompts, greedy
// requests, and what the in-process engine answers for them.
#ifndef TANDEM_TESTS_E2E_SYNTHETIC_H_
#define TANDEM_TESTS_E2E_SYNTHETIC_H_

#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "engine/engine.h"
#include "engine/model/model.h"
#include "engine/model/synthetic_model.h"
#include "tests/e2e/stack.h"
#include "tests/engine/test_models.h"

namespace tandem::testing {

inline std::string ModelPath() {
  static const std::string path = [] {
    // The tiny test model with a vocabulary and context for long prompts.
    engine::SyntheticModelOptions o = engine::testing::TinyOptions();
    o.n_vocab = 512;
    o.context_length = 2048;
    const std::string p = ::testing::TempDir() + "/tandem_e2e_synthetic.gguf";
    const absl::Status s = engine::WriteSyntheticModel(o, p);
    EXPECT_TRUE(s.ok()) << s;
    return p;
  }();
  return path;
}

// `shared` ids common to every prompt of `group`, then `own` of its own.
inline std::vector<int32_t> Prompt(int shared, int own, int salt, int group = 0) {
  std::vector<int32_t> ids = {1};
  for (int i = 1; i < shared; ++i) ids.push_back(3 + (i * 7 + group * 131) % 500);
  for (int i = 0; i < own; ++i) ids.push_back(3 + (i * 13 + salt * 29) % 500);
  return ids;
}

inline tandem::v1::GenerateRequest Request(const std::vector<int32_t>& ids, int32_t max_tokens) {
  tandem::v1::GenerateRequest r;
  r.mutable_prompt_token_ids()->Assign(ids.begin(), ids.end());
  r.set_max_tokens(max_tokens);
  r.set_ignore_eos(true);
  r.set_top_logprobs(2);
  return r;
}

// The in-process engine's tokens for `ids` (greedy unless `sampling` says
// otherwise).
inline std::vector<engine::SampledToken> Reference(const std::vector<int32_t>& ids,
                                                   int32_t max_tokens,
                                                   const engine::SamplingParams& sampling = {}) {
  auto model = engine::Model::Load(ModelPath());
  EXPECT_TRUE(model.ok());
  auto eng = engine::Engine::Create(**model, engine::MakeCpuBackend({.threads = 1}), {});
  engine::GenerationRequest r;
  r.prompt = ids;
  r.max_tokens = max_tokens;
  r.ignore_eos = true;
  r.top_logprobs = 2;
  r.sampling = sampling;
  EXPECT_TRUE((*eng)->Add(r).ok());
  std::vector<engine::SampledToken> out;
  while ((*eng)->HasWork()) {
    auto events = engine::testing::Tokens((*eng)->Step());
    EXPECT_TRUE(events.ok());
    for (auto& e : *events) out.push_back(e.token);
  }
  return out;
}

inline void ExpectMatches(const Completion& c, const std::vector<engine::SampledToken>& want) {
  ASSERT_TRUE(c.status.ok()) << c.status.error_message();
  ASSERT_EQ(c.tokens.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(c.tokens[i].id(), want[i].id) << i;
    EXPECT_NEAR(c.tokens[i].logprob(), want[i].logprob, 1e-4) << i;
  }
}

inline std::string Series(const std::string& name, const std::string& labels) {
  return name + "{" + labels + "}";
}

}  // namespace tandem::testing

#endif  // TANDEM_TESTS_E2E_SYNTHETIC_H_
