// What a speculation test compares between runs with and without it: each
// request's tokens, end and proposals, the blocks the cache reported
// stored and removed, and the engine's counters; and the comparison itself (ids equal,
// logprobs within the batch-invariance tolerance). Test code.
#ifndef TANDEM_TESTS_ENGINE_SPEC_OUTCOME_H_
#define TANDEM_TESTS_ENGINE_SPEC_OUTCOME_H_

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "engine/engine.h"

namespace tandem::engine::testing {

struct SpecOutcome {
  std::vector<std::vector<SampledToken>> tokens;  // per request, in order
  std::vector<FinishReason> finish;
  std::vector<std::vector<int32_t>> proposed;  // per request, per token event
  absl::flat_hash_set<uint64_t> stored;        // block hashes reported stored
  absl::flat_hash_set<BlockHash> removed;      // and reported removed (evicted)
  EngineStats stats;
};

// Steps `engine` until it has no work, recording the sequences `ids` (in
// that order).
inline SpecOutcome DrainOutcome(StepEngine& engine, const std::vector<int64_t>& ids) {
  SpecOutcome o;
  o.tokens.resize(ids.size());
  o.proposed.resize(ids.size());
  o.finish.resize(ids.size(), FinishReason::kNone);
  while (engine.HasWork()) {
    absl::StatusOr<StepOutput> step = engine.Step();
    EXPECT_TRUE(step.ok()) << step.status();
    if (!step.ok()) break;
    for (TokenEvent& e : step->tokens) {
      const size_t i = std::find(ids.begin(), ids.end(), e.seq_id) - ids.begin();
      o.tokens[i].push_back(e.token);
      o.proposed[i].push_back(e.spec_proposed);
      if (e.finish != FinishReason::kNone) o.finish[i] = e.finish;
    }
    for (const BlockEvent& b : step->blocks) {
      if (b.kind == BlockEvent::Kind::kStored) o.stored.insert(b.hash.low ^ (b.hash.high * 31));
      if (b.kind == BlockEvent::Kind::kRemoved) o.removed.insert(b.hash);
    }
  }
  o.stats = engine.stats();
  return o;
}

inline void ExpectSameOutcome(const SpecOutcome& got, const SpecOutcome& want) {
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

}  // namespace tandem::engine::testing

#endif  // TANDEM_TESTS_ENGINE_SPEC_OUTCOME_H_
