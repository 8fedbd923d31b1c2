// Prompt-lookup speculation in the engine, on the real stories260K model:
// the output (ids and logprobs) equals decoding one token per step, greedy
// and sampled, with penalties and a response format, alone and in a batch,
// and across a rolling window's rolls;
// sampled tokens pass a chi-square test against plain decoding's on other
// seeds;
// proposals are made and kept on repetitive text; the KV blocks the cache
// ends up with are those of a run without speculation.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine/model/model.h"
#include "tests/engine/spec_outcome.h"
#include "tests/engine/test_backends.h"
#include "tests/engine/test_models.h"

namespace tandem::engine {
namespace {

constexpr char kRepetitive[] =
    "Lily went to the park. She saw a big red ball. She wanted to play with the ball. "
    "Lily went to the park. She saw a big red ball. She wanted to play with the ball. "
    "Lily went to the park. She saw a big red ball.";

using Outcome = testing::SpecOutcome;

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
                     int32_t max_batch = 0, int64_t kv_blocks = 0) {
    EngineOptions options;
    if (kv_blocks > 0) {
      // A pool of that many 8-token blocks.
      options.kv.block_size = 8;
      options.kv.budget_bytes = kv_blocks * 2 * model_->config().n_layer * 8 *
                                model_->config().kv_dim() * int64_t{sizeof(float)};
    }
    options.speculation.prompt_lookup = speculate;
    options.speculation.k = k;
    options.speculation.max_batch = max_batch;
    auto eng = Engine::Create(*model_, testing::MakeTestBackend(2), options);
    EXPECT_TRUE(eng.ok()) << eng.status();
    std::vector<int64_t> ids;
    for (GenerationRequest& r : requests) {
      auto id = (*eng)->Add(std::move(r));
      EXPECT_TRUE(id.ok()) << id.status();
      ids.push_back(*id);
    }
    return testing::DrainOutcome(**eng, ids);
  }

  static void ExpectSame(const Outcome& got, const Outcome& want) {
    testing::ExpectSameOutcome(got, want);
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

// A session's rolling window: proposals stop short of each roll (one
// computed after it would attend to the block the roll drops), so the
// output is a plain run's across several rolls, and proposals go on after
// them.
TEST_F(SpeculateTest, ARollingWindowMatchesAcrossItsRolls) {
  GenerationRequest r = Request(kRepetitive, 160);
  const auto prompt = static_cast<int32_t>(r.prompt.size());
  r.roll_keep = 8;
  r.roll_window = prompt + 24;
  const Outcome plain = Run({r}, false);
  const Outcome spec = Run({r}, true);
  ExpectSame(spec, plain);
  ASSERT_EQ(spec.tokens[0].size(), 160u);
  // Proposals after the first roll, which comes once prompt and output
  // pass the window (160 tokens roll it several times).
  int32_t after_roll = 0;
  for (size_t t = static_cast<size_t>(r.roll_window - prompt); t < spec.proposed[0].size(); ++t) {
    after_roll += spec.proposed[0][t];
  }
  EXPECT_GT(after_roll, 0);
  EXPECT_GT(spec.stats.spec_accepted, 0);
  EXPECT_EQ(spec.stats.blocks_used, 0);
}

// A statistical check that does not lean on the draw-for-draw equality
// above: speculative runs and plain runs on disjoint seeds are two samples
// of one distribution at each position (chi-square homogeneity, the
// tokens seen at least 5 times in both together as categories and the rest
// pooled, at a 0.001 level); stories260K's 512-token vocabulary keeps the
// categories few. Deterministic: the seeds are fixed.
TEST_F(SpeculateTest, SampledTokensFollowTheSameDistribution) {
  constexpr int kRuns = 1200, kBatch = 60, kTokens = 8;
  auto sample = [&](bool speculate, uint64_t first_seed, int64_t* accepted) {
    // counts[t][id]: how often token `id` came at position t.
    std::vector<std::map<int32_t, int>> counts(kTokens);
    for (int b = 0; b < kRuns / kBatch; ++b) {
      std::vector<GenerationRequest> batch;
      for (int i = 0; i < kBatch; ++i) {
        GenerationRequest r = Request(kRepetitive, kTokens);
        r.sampling.temperature = 1.0f;
        r.sampling.seed = first_seed + static_cast<uint64_t>(b * kBatch + i);
        batch.push_back(r);
      }
      const Outcome o = Run(batch, speculate);
      *accepted += o.stats.spec_accepted;
      for (const auto& tokens : o.tokens) {
        for (size_t t = 0; t < tokens.size() && t < kTokens; ++t) ++counts[t][tokens[t].id];
      }
    }
    return counts;
  };
  int64_t accepted = 0, plain_accepted = 0;
  const auto spec = sample(true, 1, &accepted);
  const auto plain = sample(false, 1 + kRuns, &plain_accepted);
  // The speculative runs did verify proposals (else this tests nothing).
  EXPECT_GT(accepted, kRuns / 4);
  std::cout << "kept " << accepted << " proposals\n";
  EXPECT_EQ(plain_accepted, 0);
  for (int t = 1; t < kTokens; ++t) {              // token 0 is never speculated
    std::map<int32_t, std::pair<int, int>> table;  // id -> (speculative, plain)
    for (const auto& [id, n] : spec[t]) table[id].first += n;
    for (const auto& [id, n] : plain[t]) table[id].second += n;
    std::vector<std::pair<double, double>> cells;
    std::pair<double, double> rest{0, 0};
    for (const auto& [id, n] : table) {
      if (n.first + n.second >= 10) {
        cells.emplace_back(n.first, n.second);
      } else {
        rest.first += n.first;
        rest.second += n.second;
      }
    }
    if (rest.first + rest.second > 0) cells.push_back(rest);
    if (cells.size() < 2) continue;  // one token: nothing to compare
    double a_total = 0, b_total = 0;
    for (const auto& [a, b] : cells) {
      a_total += a;
      b_total += b;
    }
    double chi2 = 0;
    for (const auto& [a, b] : cells) {
      const double ea = (a + b) * a_total / (a_total + b_total);
      const double eb = (a + b) * b_total / (a_total + b_total);
      chi2 += (a - ea) * (a - ea) / ea + (b - eb) * (b - eb) / eb;
    }
    // The 0.999 quantile of chi-square with k degrees of freedom
    // (Wilson-Hilferty: within a few percent from k = 1).
    const double k = static_cast<double>(cells.size() - 1);
    const double h = 2.0 / (9.0 * k);
    const double critical = k * std::pow(1.0 - h + 3.0902 * std::sqrt(h), 3);
    EXPECT_LT(chi2, critical) << "position " << t << ", " << cells.size() << " categories";
  }
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

// A pool too small for the batch: sequences are preempted, and one may be
// admitted again in the plan that preempted it, its proposals then dropped
// (a recompute from its start takes none).
TEST_F(SpeculateTest, PreemptedSequencesAreUnchanged) {
  std::vector<GenerationRequest> batch;
  for (int i = 0; i < 4; ++i) {
    batch.push_back(Request(kRepetitive, 60 + 4 * i));
    batch.back().ignore_eos = true;
  }
  const Outcome alone = Run(batch, false);
  for (int64_t blocks : {20, 24, 28, 32, 40}) {
    SCOPED_TRACE(blocks);
    const Outcome plain = Run(batch, false, 4, 0, blocks);
    const Outcome spec = Run(batch, true, 4, 0, blocks);
    EXPECT_GT(spec.stats.preemptions, 0);
    EXPECT_GT(spec.stats.spec_accepted, 0);
    ExpectSame(spec, plain);
    ExpectSame(plain, alone);
  }
}

}  // namespace
}  // namespace tandem::engine
