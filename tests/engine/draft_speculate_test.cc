// Draft-model speculation in the engine: stories260K as the model and the
// same model quantized to Q4_0 as its draft (right often, not always).
// The output (ids and logprobs) equals decoding one token per step, greedy
// and sampled, alone and in a batch, across a rolling window's rolls and
// with a request choosing prompt lookup instead; the draft's KV is computed
// with the prompt by a prefill engine and shipped with the hand-off, so the
// decode engine computes none of the prompt's; the cache's blocks (hashes
// and both models' KV) are those of a run that does not speculate; a draft
// put off while the batch is busy is computed where it is needed (a later
// proposal, two at once on shared blocks, a prefix export) and its blocks
// reach the tiers only then; a
// draft of another vocabulary or KV width, and a request for a draft the
// engine lacks, are refused by name.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "engine/cpu/kernels.h"
#include "engine/engine.h"
#include "engine/kv/block_hash.h"
#include "engine/kv/kv_tier.h"
#include "engine/model/model.h"
#include "engine/model/model_quantizer.h"
#include "tests/engine/spec_outcome.h"
#include "tests/engine/test_backends.h"
#include "tests/engine/test_models.h"

namespace tandem::engine {
namespace {

constexpr const char* kPrompts[] = {
    "Once upon a time, there was a little girl named Lily.",
    "Tom had a red ball. He liked to",
    "The sun was hot and the dog was thirsty, so",
    "One day, a big bird flew over the house and saw",
};

using Outcome = testing::SpecOutcome;

// An engine on `model` with `options`, and `draft` (if any) beside it.
std::unique_ptr<Engine> CreateEngine(const Model& model, const Model* draft,
                                     const EngineOptions& options) {
  DraftModel d;
  if (draft != nullptr) d = {.model = draft, .backend = testing::MakeTestBackend(2)};
  auto eng = Engine::Create(model, testing::MakeTestBackend(2), options, std::move(d));
  EXPECT_TRUE(eng.ok()) << eng.status();
  return eng.ok() ? std::move(*eng) : nullptr;
}

class DraftSpeculateTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto m = Model::Load(testing::StoriesPath());
    ASSERT_TRUE(m.ok()) << m.status();
    model_ = m->release();
    const std::string path = ::testing::TempDir() + "/tandem_stories_q4_0_draft.gguf";
    auto q = QuantizeModel(testing::StoriesPath(), path, QuantMix::kQ4_0);
    ASSERT_TRUE(q.ok()) << q.status();
    auto d = Model::Load(path);
    ASSERT_TRUE(d.ok()) << d.status();
    draft_ = d->release();
  }
  static void TearDownTestSuite() {
    delete draft_;
    delete model_;
  }

  static GenerationRequest Request(const std::string& prompt, int32_t max_tokens,
                                   float temperature = 0.0f) {
    GenerationRequest r;
    r.prompt = model_->tokenizer().Encode(prompt, {.add_special = true, .parse_special = true});
    r.max_tokens = max_tokens;
    r.top_logprobs = 3;
    r.sampling.temperature = temperature;
    r.sampling.seed = 11;
    return r;
  }

  // An engine on the model; with the draft beside it when `with_draft`,
  // speculating with it by default when `speculate`.
  static std::unique_ptr<Engine> Make(bool with_draft, bool speculate, EngineOptions options = {}) {
    options.speculation.draft = speculate;
    options.speculation.max_batch = 0;
    // Propose whatever it costs: what is proposed must not hang on timings.
    options.speculation.min_gain = 0;
    return CreateEngine(*model_, with_draft ? draft_ : nullptr, options);
  }

  static Outcome Drain(Engine& eng, const std::vector<int64_t>& ids) {
    return testing::DrainOutcome(eng, ids);
  }

  static Outcome Run(Engine& eng, std::vector<GenerationRequest> requests) {
    std::vector<int64_t> ids;
    for (GenerationRequest& r : requests) {
      auto id = eng.Add(std::move(r));
      EXPECT_TRUE(id.ok()) << id.status();
      ids.push_back(id.ok() ? *id : -1);
    }
    return Drain(eng, ids);
  }

  // `request` prefilled on `prefill` for a hand-off (export_kv, one token):
  // the first token and the exported KV.
  static std::pair<SampledToken, std::shared_ptr<const KvSnapshot>> HandOff(
      Engine& prefill, GenerationRequest request) {
    request.export_kv = true;
    request.max_tokens = 1;
    EXPECT_TRUE(prefill.Add(std::move(request)).ok());
    std::pair<SampledToken, std::shared_ptr<const KvSnapshot>> out;
    while (prefill.HasWork()) {
      auto step = prefill.Step();
      EXPECT_TRUE(step.ok()) << step.status();
      if (!step.ok()) break;
      for (TokenEvent& e : step->tokens) out = {e.token, e.kv};
    }
    return out;
  }

  static void ExpectSame(const Outcome& got, const Outcome& want) {
    testing::ExpectSameOutcome(got, want);
  }

  static std::vector<GenerationRequest> All(int32_t max_tokens, float temperature = 0.0f) {
    std::vector<GenerationRequest> rs;
    for (const char* p : kPrompts) rs.push_back(Request(p, max_tokens, temperature));
    return rs;
  }

  static Model* model_;
  static Model* draft_;
};
Model* DraftSpeculateTest::model_ = nullptr;
Model* DraftSpeculateTest::draft_ = nullptr;

TEST_F(DraftSpeculateTest, GreedyOutputIsUnchangedAndTheDraftIsRightOftenNotAlways) {
  const Outcome plain = Run(*Make(false, false), All(80));
  for (bool batched : {false, true}) {
    Outcome spec;
    if (batched) {
      spec = Run(*Make(true, true), All(80));
    } else {
      // One request at a time, each in a fresh engine.
      spec.tokens.resize(std::size(kPrompts));
      spec.finish.resize(std::size(kPrompts));
      for (size_t i = 0; i < std::size(kPrompts); ++i) {
        const Outcome one = Run(*Make(true, true), {Request(kPrompts[i], 80)});
        spec.tokens[i] = one.tokens[0];
        spec.finish[i] = one.finish[0];
        spec.stats.spec_draft_proposed += one.stats.spec_draft_proposed;
        spec.stats.spec_draft_accepted += one.stats.spec_draft_accepted;
      }
    }
    ExpectSame(spec, plain);
    EXPECT_GT(spec.stats.spec_draft_proposed, 0);
    EXPECT_GT(spec.stats.spec_draft_accepted, spec.stats.spec_draft_proposed / 4) << batched;
    EXPECT_LT(spec.stats.spec_draft_accepted, spec.stats.spec_draft_proposed) << batched;
    std::cout << (batched ? "batched" : "alone") << ": proposed " << spec.stats.spec_draft_proposed
              << ", kept " << spec.stats.spec_draft_accepted << "\n";
  }
}

TEST_F(DraftSpeculateTest, SampledOutputIsUnchangedDrawForDraw) {
  const Outcome plain = Run(*Make(false, false), All(64, 0.9f));
  const Outcome spec = Run(*Make(true, true), All(64, 0.9f));
  ExpectSame(spec, plain);
  EXPECT_GT(spec.stats.spec_draft_accepted, 0);
}

TEST_F(DraftSpeculateTest, ARequestChoosesItsMethod) {
  // Prompt lookup on an engine whose default is the draft, and the draft on
  // one whose default is off.
  std::vector<GenerationRequest> lookup = All(48);
  for (GenerationRequest& r : lookup) r.sampling.speculation = Speculation::kPromptLookup;
  std::vector<GenerationRequest> draft = All(48);
  for (GenerationRequest& r : draft) r.sampling.speculation = Speculation::kDraft;
  const Outcome plain = Run(*Make(false, false), All(48));
  const Outcome a = Run(*Make(true, true), lookup);
  const Outcome b = Run(*Make(true, false), draft);
  ExpectSame(a, plain);
  ExpectSame(b, plain);
  EXPECT_EQ(a.stats.spec_draft_proposed, 0);
  EXPECT_GT(b.stats.spec_draft_proposed, 0);
  // A request for a draft an engine does not have is refused by name.
  GenerationRequest r = Request(kPrompts[0], 8);
  r.sampling.speculation = Speculation::kDraft;
  auto refused = Make(false, false)->Add(r);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("speculation"), std::string::npos);
}

// A draft whose proposals cannot pay (no k reaches the asked gain): after
// its first proposals have timed the draft, a sequence rests and proposes
// one token now and then to see whether it pays again.
TEST_F(DraftSpeculateTest, ADraftThatDoesNotPayRests) {
  std::vector<GenerationRequest> rs = All(160);
  for (GenerationRequest& r : rs) r.ignore_eos = true;
  const Outcome always = Run(*Make(true, true), rs);
  // A gain above the 1 + k tokens a step can yield.
  EngineOptions o;
  o.speculation.draft = true;
  o.speculation.max_batch = 0;
  o.speculation.min_gain = 8;
  std::unique_ptr<Engine> eng = CreateEngine(*model_, draft_, o);
  ASSERT_NE(eng, nullptr);
  const Outcome rests = Run(*eng, rs);
  ExpectSame(rests, always);
  // 4 sequences x 160 tokens: the first drafting steps, then a probe of
  // one proposal per sequence every 33 steps (and a step without proposals
  // every 64 to time the model's).
  EXPECT_GT(rests.stats.spec_draft_proposed, 0);
  EXPECT_LT(rests.stats.spec_draft_proposed, 4 * (4 * 4 + 160 / 33 + 1));
  EXPECT_GT(always.stats.spec_draft_proposed, 4 * 100);
}

TEST_F(DraftSpeculateTest, ARollingWindowMatchesAcrossItsRolls) {
  EngineOptions options;
  options.kv.block_size = 8;
  std::vector<GenerationRequest> rs;
  for (const char* p : kPrompts) {
    GenerationRequest r = Request(p, 120);
    r.ignore_eos = true;
    r.roll_window = 64;
    r.roll_keep = 4;
    rs.push_back(std::move(r));
  }
  const Outcome plain = Run(*Make(false, false, options), rs);
  const Outcome spec = Run(*Make(true, true, options), rs);
  ExpectSame(spec, plain);
  EXPECT_GT(spec.stats.spec_draft_accepted, 0);
}

TEST_F(DraftSpeculateTest, PreemptedSequencesRecomputeBothModels) {
  // A pool too small for the batch: sequences are preempted and recomputed.
  EngineOptions options;
  options.kv.block_size = 8;
  options.kv.budget_bytes = 0;
  const int64_t block_bytes = Engine::LayoutFor(*model_, draft_, options.kv).n_layer * int64_t{2} *
                              8 * model_->config().kv_dim() * 4;
  options.kv.budget_bytes = block_bytes * 24;
  std::vector<GenerationRequest> rs = All(72);
  for (GenerationRequest& r : rs) r.ignore_eos = true;
  const Outcome plain = Run(*Make(true, false, options), rs);
  const Outcome spec = Run(*Make(true, true, options), rs);
  const Outcome alone = Run(*Make(false, false), rs);
  {
    SCOPED_TRACE("without speculation, preempted or not");
    ExpectSame(plain, alone);
  }
  ExpectSame(spec, plain);
  EXPECT_GT(spec.stats.preemptions, 0);
  EXPECT_GT(spec.stats.spec_draft_accepted, 0);
}

TEST_F(DraftSpeculateTest, TheDraftsKvComesWithTheHandOffAndIsNotRecomputed) {
  const GenerationRequest base = Request(kPrompts[0], 40);
  const auto n_prompt = static_cast<int64_t>(base.prompt.size());
  // Prefill: the prompt through both models, exported with the first token.
  std::unique_ptr<Engine> prefill = Make(true, false);
  const auto [first, kv] = HandOff(*prefill, base);
  ASSERT_NE(kv, nullptr);
  EXPECT_EQ(prefill->stats().draft_computed_tokens, n_prompt);
  EXPECT_EQ(kv->n_layer, model_->config().n_layer + draft_->config().n_layer);
  EXPECT_EQ(kv->model_fingerprint, prefill->kv_layout().fingerprint);
  EXPECT_NE(kv->model_fingerprint, model_->fingerprint());

  // Decode: speculates from its first step on the shipped draft KV; the
  // draft computes only the tokens generated here.
  std::unique_ptr<Engine> decode = Make(true, true);
  auto id = decode->AddWithKv(base, first, kv);
  ASSERT_TRUE(id.ok()) << id.status();
  Outcome got = Drain(*decode, {*id});
  got.tokens[0].insert(got.tokens[0].begin(), first);
  const Outcome plain = Run(*Make(false, false), {base});
  ExpectSame(got, plain);
  EXPECT_GT(got.stats.spec_draft_accepted, 0);
  // The same request computed whole by a decoding engine takes the same
  // steps and proposals, and its draft computes the prompt besides.
  std::unique_ptr<Engine> local = Make(true, true);
  const Outcome whole = Run(*local, {base});
  ExpectSame(whole, plain);
  EXPECT_EQ(whole.stats.spec_draft_proposed, got.stats.spec_draft_proposed);
  EXPECT_EQ(whole.stats.draft_computed_tokens - got.stats.draft_computed_tokens, n_prompt);

  // An engine without the draft (or with another pair) refuses those blocks.
  auto refused = Make(false, false)->AddWithKv(base, first, kv);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.status().message().find("model_fingerprint"), std::string::npos);
}

TEST_F(DraftSpeculateTest, TheCacheHoldsWhatARunWithoutSpeculationLeaves) {
  // Same engine setup (the draft beside the model), speculating or not: the
  // same blocks are hashed, and their bytes (both models' layers) agree.
  std::vector<GenerationRequest> rs = All(70);
  for (GenerationRequest& r : rs) r.ignore_eos = true;
  std::unique_ptr<Engine> plain_engine = Make(true, false);
  std::unique_ptr<Engine> spec_engine = Make(true, true);
  const Outcome plain = Run(*plain_engine, rs);
  const Outcome spec = Run(*spec_engine, rs);
  ExpectSame(spec, plain);
  EXPECT_EQ(plain.stats.spec_draft_proposed, 0);
  EXPECT_GT(spec.stats.spec_draft_accepted, 0);
  EXPECT_EQ(spec.stored, plain.stored);
  const cpu::KernelTable& kernels = cpu::Kernels(cpu::DetectIsa());
  const bool one_q4_path = kernels.vnni_gemv || kernels.packed_gemv != nullptr;
  for (size_t i = 0; i < rs.size(); ++i) {
    std::vector<int32_t> tokens = rs[i].prompt;
    for (const SampledToken& t : plain.tokens[i]) tokens.push_back(t.id);
    tokens.pop_back();  // the last token was sampled, never computed
    const auto a = plain_engine->ExportCachedPrefix(tokens, 0);
    const auto b = spec_engine->ExportCachedPrefix(tokens, 0);
    ASSERT_NE(a, nullptr);
    ASSERT_NE(b, nullptr);
    ASSERT_EQ(a->blocks.size(), b->blocks.size());
    EXPECT_GE(static_cast<int64_t>(a->blocks.size()) * 16,
              static_cast<int64_t>(tokens.size()) - 16);
    for (size_t blk = 0; blk < a->blocks.size(); ++blk) {
      const size_t n = a->blocks[blk].size() / sizeof(float);
      std::vector<float> x(n), y(n);
      a->blocks[blk].CopyTo(reinterpret_cast<uint8_t*>(x.data()));
      b->blocks[blk].CopyTo(reinterpret_cast<uint8_t*>(y.data()));
      // The model's layers agree to the batch-invariance tolerance, and so
      // does the draft's first layer (its keys and values depend on the
      // token and its position alone: a stale or skipped slot would differ
      // there at once). The draft's Q4_0 products quantize their input rows
      // to 8 bits, where a difference of 1e-6 (a token computed alone, or in
      // a chunk with others) can round a value the other way, so deeper in
      // the draft a few values move by a few percent. Without VNNI tiles or
      // packed products (engine/cpu/kernels.h), a chunk of 64 tokens or more
      // takes this model's short Q4_0 rows through dequantized sgemm, and a
      // smaller one through the 8-bit dot (engine/cpu/matmul.cc:
      // ChoosePath), so there the first layer moves by a few percent too,
      // and deeper layers by up to about 6% (measured): still far from a
      // stale slot's whole difference.
      const size_t per_layer = n / static_cast<size_t>(a->n_layer);
      const size_t model_values = per_layer * static_cast<size_t>(model_->config().n_layer);
      float model_worst = 0;
      float draft_first_worst = 0;
      float draft_worst = 0;
      for (size_t j = 0; j < n; ++j) {
        const float d = std::abs(x[j] - y[j]);
        const float relative = d / std::max(1.0f, std::abs(x[j]));
        if (j < model_values) {
          model_worst = std::max(model_worst, d);
        } else if (j < model_values + per_layer) {
          draft_first_worst = std::max(draft_first_worst, one_q4_path ? d : relative);
        } else {
          draft_worst = std::max(draft_worst, relative);
        }
      }
      EXPECT_LT(model_worst, 1e-4f) << "request " << i << " block " << blk;
      EXPECT_LT(draft_first_worst, one_q4_path ? 1e-4f : 0.05f)
          << "request " << i << " block " << blk;
      EXPECT_LT(draft_worst, one_q4_path ? 0.05f : 0.15f) << "request " << i << " block " << blk;
    }
  }
}

// Records which blocks the tiers were handed, and holds none.
class RecordingTiers final : public KvTierStore {
 public:
  void OnStored(const BlockHash& hash, const BlockHash&, int32_t,
                std::span<const uint8_t>) override {
    stored.insert(hash);
  }
  void OnEvicted(const BlockHash& hash, std::span<const uint8_t>) override { evicted.insert(hash); }
  std::optional<TierBlock> Lookup(const BlockHash&) override { return std::nullopt; }
  void Promoted(const BlockHash&, KvTier) override {}

  absl::flat_hash_set<BlockHash> stored;
  absl::flat_hash_set<BlockHash> evicted;
};

// The draft is the model itself here, so its proposals are kept nearly
// always when its KV is right, and stale KV sends them astray. Proposals
// only while one sequence runs: four together propose nothing.
std::unique_ptr<Engine> MakeSelfDrafting(const Model& model, int32_t max_batch,
                                         EngineOptions options = {}) {
  options.speculation.draft = true;
  options.speculation.max_batch = max_batch;
  options.speculation.min_gain = 0;
  return CreateEngine(model, &model, options);
}

// Four conversations whose prompts fill a block or more.
std::vector<GenerationRequest> LongPrompts(const Model& model, int32_t max_tokens,
                                           const std::string& opening = "") {
  std::vector<GenerationRequest> rs;
  for (const char* p : kPrompts) {
    GenerationRequest r;
    r.prompt = model.tokenizer().Encode(opening + p + " " + p,
                                        {.add_special = true, .parse_special = true});
    r.max_tokens = max_tokens;
    r.top_logprobs = 3;
    r.ignore_eos = true;
    rs.push_back(std::move(r));
  }
  return rs;
}

// While more sequences run than proposals are made for, the draft computes
// nothing, prompts included: the blocks they fill are shared without the
// draft's KV, and not handed to the tiers. A sequence that proposes later
// computes the draft's KV for them first, so its proposals are the draft's
// real picks, and the tiers get those blocks then.
TEST_F(DraftSpeculateTest, ADraftPutOffInABusyBatchIsComputedWhenItIsNeeded) {
  RecordingTiers tiers;
  EngineOptions options;
  options.tiers = &tiers;
  std::unique_ptr<Engine> eng = MakeSelfDrafting(*model_, 1, options);
  const std::vector<GenerationRequest> rs = LongPrompts(*model_, 48);
  const Outcome busy = Run(*eng, rs);
  ExpectSame(busy, Run(*Make(false, false), rs));
  EXPECT_EQ(busy.stats.spec_draft_proposed, 0);
  EXPECT_EQ(busy.stats.draft_computed_tokens, 0);
  EXPECT_GE(busy.stored.size(), 12u);
  EXPECT_TRUE(tiers.stored.empty());

  // The next turn of the first conversation, alone: it proposes from its
  // first step, on the cached blocks.
  GenerationRequest next = rs[0];
  for (const SampledToken& t : busy.tokens[0]) next.prompt.push_back(t.id);
  next.max_tokens = 32;
  const Outcome turn = Run(*eng, {next});
  ExpectSame(turn, Run(*Make(false, false), {next}));
  const int64_t proposed = turn.stats.spec_draft_proposed;
  const int64_t kept = turn.stats.spec_draft_accepted;
  EXPECT_GT(proposed, 16);
  EXPECT_GE(kept * 10, proposed * 9) << kept << " of " << proposed;
  // It computed the draft's KV for the blocks the first turn left.
  const auto n = static_cast<int64_t>(next.prompt.size());
  EXPECT_GE(turn.stats.draft_computed_tokens, (n - 1) / 16 * 16);
  for (const BlockHash& h :
       PrefixBlockHashes(std::span<const int32_t>(next.prompt).subspan(0, n - 1), 16,
                         eng->kv_layout().fingerprint, 0)) {
    EXPECT_TRUE(tiers.stored.contains(h));
  }
}

// Two sequences that find the same cached blocks without the draft's KV (a
// request that did not speculate left them) catch up on them in the same
// step, one draft pass after the other: both propose the draft's real picks.
TEST_F(DraftSpeculateTest, SequencesSharingBlocksThatLackTheDraftsKvCatchUpTogether) {
  std::unique_ptr<Engine> eng = MakeSelfDrafting(*model_, 0);
  GenerationRequest first = LongPrompts(*model_, 8)[1];
  first.sampling.speculation = Speculation::kOff;
  const Outcome plain_first = Run(*eng, {first});
  ASSERT_EQ(plain_first.stats.draft_computed_tokens, 0);
  GenerationRequest next = first;
  next.sampling.speculation = Speculation::kDefault;
  next.max_tokens = 32;
  const Outcome both = Run(*eng, {next, next});
  const Outcome want = Run(*Make(false, false), {next, next});
  ExpectSame(both, want);
  const int64_t proposed = both.stats.spec_draft_proposed;
  const int64_t kept = both.stats.spec_draft_accepted;
  EXPECT_GT(proposed, 32);
  EXPECT_GE(kept * 10, proposed * 9) << kept << " of " << proposed;
  // Each computed the cached blocks' draft KV (the second in a later pass).
  const auto cached = static_cast<int64_t>(next.prompt.size() - 1) / 16 * 16;
  EXPECT_GE(both.stats.draft_computed_tokens, 2 * cached);
}

// A block evicted while it lacks the draft's KV is not demoted: the tiers
// hold only blocks with both models' KV.
TEST_F(DraftSpeculateTest, ABlockWithoutTheDraftsKvIsNotDemoted) {
  RecordingTiers tiers;
  EngineOptions options;
  options.tiers = &tiers;
  const int64_t block_bytes = Engine::LayoutFor(*model_, model_, options.kv).n_layer *
                              int64_t{2} * 16 * model_->config().kv_dim() * 4;
  options.kv.budget_bytes = 30 * block_bytes;  // the second batch evicts the first's
  std::unique_ptr<Engine> eng = MakeSelfDrafting(*model_, 1, options);
  // One conversation alone proposes, so its blocks hold the draft's KV;
  // four together do not, so theirs lack it; four more evict them all.
  const Outcome alone = Run(*eng, {LongPrompts(*model_, 64, "Before. ")[0]});
  ASSERT_GT(alone.stats.spec_draft_proposed, 0);
  const Outcome busy = Run(*eng, LongPrompts(*model_, 64));
  ASSERT_EQ(busy.stats.spec_draft_proposed, alone.stats.spec_draft_proposed);
  const Outcome second = Run(*eng, LongPrompts(*model_, 64, "Later that day. "));
  int evicted_filled = 0, evicted_lacking = 0;
  for (const BlockHash& h : second.removed) {
    if (tiers.stored.contains(h)) {
      ++evicted_filled;
      EXPECT_TRUE(tiers.evicted.contains(h));
    } else {
      ++evicted_lacking;
      EXPECT_FALSE(tiers.evicted.contains(h));
    }
  }
  EXPECT_GT(evicted_filled, 0);
  EXPECT_GT(evicted_lacking, 0);
}

// A prefix pulled from a worker whose draft put its KV off carries the
// draft's KV: the exporting engine computes it then, and the puller
// speculates on it without computing any of the prefix.
TEST_F(DraftSpeculateTest, APulledPrefixHoldsTheDraftsKvItsHolderPutOff) {
  std::unique_ptr<Engine> holder = MakeSelfDrafting(*model_, 1);
  const std::vector<GenerationRequest> rs = LongPrompts(*model_, 48);
  const Outcome busy = Run(*holder, rs);
  ASSERT_EQ(busy.stats.spec_draft_proposed, 0);

  std::vector<int32_t> held = rs[0].prompt;
  for (const SampledToken& t : busy.tokens[0]) held.push_back(t.id);
  held.pop_back();  // sampled, never computed
  const std::shared_ptr<const KvSnapshot> kv = holder->ExportCachedPrefix(held, 0);
  ASSERT_NE(kv, nullptr);
  const int32_t exported = kv->n_tokens;
  EXPECT_EQ(exported, static_cast<int32_t>(held.size()) / 16 * 16);
  // The draft's KV for all of it, computed for the export.
  EXPECT_EQ(holder->stats().draft_computed_tokens - busy.stats.draft_computed_tokens, exported);

  GenerationRequest next = rs[0];
  next.prompt = held;
  for (int32_t t : model_->tokenizer().Encode(" and then", {})) next.prompt.push_back(t);
  next.max_tokens = 32;
  GenerationRequest pulled = next;
  pulled.prefix_kv = kv;
  const Outcome got = Run(*MakeSelfDrafting(*model_, 0), {pulled});
  const Outcome whole = Run(*MakeSelfDrafting(*model_, 0), {next});
  ExpectSame(got, Run(*Make(false, false), {next}));
  ExpectSame(whole, got);
  EXPECT_EQ(got.stats.prefix_pulled_tokens, exported);
  EXPECT_EQ(got.stats.spec_draft_proposed, whole.stats.spec_draft_proposed);
  EXPECT_GE(got.stats.spec_draft_accepted * 10, got.stats.spec_draft_proposed * 9);
  EXPECT_EQ(whole.stats.draft_computed_tokens - got.stats.draft_computed_tokens, exported);
}

// A hand-off exported without the draft's KV (its decode side was not to
// propose: export_without_draft) says so, and a decoder that proposes after
// all computes the draft's KV first, from where the snapshot's ends (or its
// own cached blocks', on a delta transfer), so its proposals are the
// draft's real picks.
TEST_F(DraftSpeculateTest, AHandOffWithoutTheDraftsKvHasItsDecoderComputeIt) {
  const GenerationRequest base = LongPrompts(*model_, 32)[2];
  const auto n_prompt = static_cast<int32_t>(base.prompt.size());
  std::unique_ptr<Engine> prefill = MakeSelfDrafting(*model_, 0);
  GenerationRequest without_draft = base;
  without_draft.export_without_draft = true;
  const auto [first, kv] = HandOff(*prefill, without_draft);
  ASSERT_NE(kv, nullptr);
  EXPECT_EQ(prefill->stats().draft_computed_tokens, 0);
  EXPECT_EQ(kv->draft_tokens, std::optional<int32_t>(0));

  const Outcome plain = Run(*Make(false, false), {base});
  std::unique_ptr<Engine> decode = MakeSelfDrafting(*model_, 0);
  auto id = decode->AddWithKv(base, first, kv);
  ASSERT_TRUE(id.ok()) << id.status();
  Outcome got = Drain(*decode, {*id});
  got.tokens[0].insert(got.tokens[0].begin(), first);
  ExpectSame(got, plain);
  EXPECT_GT(got.stats.spec_draft_proposed, 16);
  EXPECT_GE(got.stats.spec_draft_accepted * 10, got.stats.spec_draft_proposed * 9)
      << got.stats.spec_draft_accepted << " of " << got.stats.spec_draft_proposed;
  EXPECT_GE(got.stats.draft_computed_tokens, n_prompt);

  // The same prompt handed off with the draft's KV: the prefill engine
  // computes it now (its cached blocks lacked it), the snapshot says
  // nothing, and the decoder computes exactly the prompt's fewer tokens.
  const auto [first2, full] = HandOff(*prefill, base);
  ASSERT_NE(full, nullptr);
  EXPECT_EQ(prefill->stats().draft_computed_tokens, n_prompt);
  EXPECT_EQ(full->draft_tokens, std::nullopt);
  std::unique_ptr<Engine> decode2 = MakeSelfDrafting(*model_, 0);
  id = decode2->AddWithKv(base, first2, full);
  ASSERT_TRUE(id.ok()) << id.status();
  const Outcome shipped = Drain(*decode2, {*id});
  EXPECT_EQ(shipped.stats.spec_draft_proposed, got.stats.spec_draft_proposed);
  EXPECT_EQ(got.stats.draft_computed_tokens - shipped.stats.draft_computed_tokens, n_prompt);

  // A delta transfer to a decoder whose cache holds the leading blocks with
  // the draft's KV (it ran the prompt itself): the draft computes from the
  // first fetched block on.
  const int32_t held = (n_prompt - 1) / 16;
  ASSERT_GT(held, 0);
  auto delta = std::make_shared<KvSnapshot>(*kv);
  delta->first_block = held;
  delta->blocks.erase(delta->blocks.begin(), delta->blocks.begin() + held);
  const int64_t before = decode2->stats().draft_computed_tokens;
  id = decode2->AddWithKv(base, first, delta);
  ASSERT_TRUE(id.ok()) << id.status();
  Outcome again = Drain(*decode2, {*id});
  again.tokens[0].insert(again.tokens[0].begin(), first);
  ExpectSame(again, plain);
  // The engine's counts are since its start: the first run's included.
  const int64_t proposed = again.stats.spec_draft_proposed - shipped.stats.spec_draft_proposed;
  const int64_t kept = again.stats.spec_draft_accepted - shipped.stats.spec_draft_accepted;
  EXPECT_EQ(proposed, shipped.stats.spec_draft_proposed);
  EXPECT_GE(kept * 10, proposed * 9) << kept << " of " << proposed;
  // The output's draft KV as in the first run, and the fetched blocks'.
  EXPECT_EQ(again.stats.draft_computed_tokens - before,
            shipped.stats.draft_computed_tokens + (n_prompt - held * 16));

  // A snapshot whose draft's KV would reach past its positions is refused.
  auto past = std::make_shared<KvSnapshot>(*kv);
  past->draft_tokens = n_prompt + 1;
  auto refused = decode2->AddWithKv(base, first, past);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("kv.draft_tokens"), std::string::npos);
}

// A decoding engine's room for hand-offs it would propose for with its
// draft from their first step: max_batch less its running and waiting
// sequences, while the draft is its default method.
TEST_F(DraftSpeculateTest, AnEnginesRoomForTheDraftsKvIsItsBatchBound) {
  EXPECT_EQ(Make(true, true)->stats().draft_kv_room, -1);  // max_batch 0: any number
  EXPECT_EQ(Make(true, false)->stats().draft_kv_room, 0);
  EXPECT_EQ(Make(false, false)->stats().draft_kv_room, 0);
  std::unique_ptr<Engine> eng = MakeSelfDrafting(*model_, 2);
  EXPECT_EQ(eng->stats().draft_kv_room, 2);
  ASSERT_TRUE(eng->Add(Request(kPrompts[0], 4)).ok());
  EXPECT_EQ(eng->stats().draft_kv_room, 1);
  ASSERT_TRUE(eng->Add(Request(kPrompts[1], 4)).ok());
  ASSERT_TRUE(eng->Add(Request(kPrompts[2], 4)).ok());
  EXPECT_EQ(eng->stats().draft_kv_room, 0);
  while (eng->HasWork()) ASSERT_TRUE(eng->Step().ok());
  EXPECT_EQ(eng->stats().draft_kv_room, 2);
}

TEST_F(DraftSpeculateTest, ADraftOfAnotherVocabularyOrKvWidthIsRefused) {
  SyntheticModelOptions o = testing::TinyOptions();
  std::unique_ptr<Model> tiny = testing::LoadSynthetic(o);
  ASSERT_NE(tiny, nullptr);
  auto other_vocab = Engine::Create(*model_, testing::MakeTestBackend(1), {},
                                    {.model = tiny.get(), .backend = testing::MakeTestBackend(1)});
  ASSERT_FALSE(other_vocab.ok());
  EXPECT_EQ(other_vocab.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(other_vocab.status().message().find("draft_model"), std::string::npos);
  EXPECT_NE(other_vocab.status().message().find("vocabulary"), std::string::npos);

  o.n_head_kv = 1;
  std::unique_ptr<Model> narrow = testing::LoadSynthetic(o);
  ASSERT_NE(narrow, nullptr);
  auto other_width =
      Engine::Create(*tiny, testing::MakeTestBackend(1), {},
                     {.model = narrow.get(), .backend = testing::MakeTestBackend(1)});
  ASSERT_FALSE(other_width.ok());
  EXPECT_NE(other_width.status().message().find("KV width"), std::string::npos)
      << other_width.status();

  // A draft of the same vocabulary and width (fewer layers) is taken.
  o.n_head_kv = 2;
  o.n_layer = 1;
  std::unique_ptr<Model> shallow = testing::LoadSynthetic(o);
  ASSERT_NE(shallow, nullptr);
  auto taken = Engine::Create(*tiny, testing::MakeTestBackend(1), {},
                              {.model = shallow.get(), .backend = testing::MakeTestBackend(1)});
  EXPECT_TRUE(taken.ok()) << taken.status();

  EngineOptions wants_draft;
  wants_draft.speculation.draft = true;
  auto none = Engine::Create(*model_, testing::MakeTestBackend(1), wants_draft);
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("draft_model"), std::string::npos);
}

}  // namespace
}  // namespace tandem::engine
