// SHIFT sessions' KV in the engine (GenerationRequest::private_kv): a turn
// that drops a span of the pinned tokens continues exactly as a reference
// that imports the same KV with the span removed and the keys after it
// re-rotated by a naive double-precision RoPE written from its definition;
// private KV is never reported to the block index nor shared through the
// prefix cache; without a cut the pinned KV is reused as it is.
#include <cmath>

#include <gtest/gtest.h>

#include "engine/engine.h"
#include "engine/gguf/tensor_type.h"
#include "tests/engine/test_backends.h"
#include "tests/engine/test_models.h"

namespace tandem::engine {
namespace {

using testing::LoadSynthetic;
using testing::TinyOptions;

constexpr int32_t kBlock = 16;

std::unique_ptr<Engine> MakeEngine(const Model& model, GgmlType kv_type) {
  EngineOptions o;
  o.kv.block_size = kBlock;
  o.kv.dtype = kv_type;
  auto e = Engine::Create(model, testing::MakeTestBackend(2), o);
  EXPECT_TRUE(e.ok()) << e.status();
  return std::move(*e);
}

std::vector<int32_t> Prompt(int n, int32_t salt) {
  std::vector<int32_t> p = {1};
  for (int i = 1; i < n; ++i) p.push_back(3 + (i * 7 + salt * 13) % 290);
  return p;
}

GenerationRequest Turn(std::vector<int32_t> prompt, int32_t max_tokens) {
  GenerationRequest r;
  r.prompt = std::move(prompt);
  r.max_tokens = max_tokens;
  r.ignore_eos = true;
  r.top_logprobs = 5;
  r.private_kv = true;
  r.pin_key = "session";
  return r;
}

struct Steps {
  std::vector<TokenEvent> tokens;
  int stored_events = 0;
  std::shared_ptr<const KvSnapshot> kv;  // with export_kv
};

Steps RunToEnd(Engine& e) {
  Steps r;
  while (e.HasWork()) {
    absl::StatusOr<StepOutput> out = e.Step();
    EXPECT_TRUE(out.ok()) << out.status();
    if (!out.ok()) break;
    for (const BlockEvent& b : out->blocks) r.stored_events += b.kind == BlockEvent::Kind::kStored;
    for (TokenEvent& t : out->tokens) {
      if (t.kv != nullptr) r.kv = t.kv;
      r.tokens.push_back(std::move(t));
    }
  }
  return r;
}

// Rotates one token's keys ([n_head_kv][head_dim]) by `delta` positions, from
// RoPE's definition: pair i of each head turns by delta * scale *
// base^(-2i / n_rot), in double precision.
void RotateReference(const ModelConfig& c, float* k, int32_t delta) {
  const int32_t half = c.n_rot / 2;
  for (int32_t h = 0; h < c.n_head_kv; ++h) {
    float* v = k + h * c.head_dim;
    for (int32_t i = 0; i < half; ++i) {
      const double theta = static_cast<double>(delta) * c.rope_freq_scale *
                           std::pow(static_cast<double>(c.rope_freq_base), -2.0 * i / c.n_rot);
      const int32_t a = c.rope_type == RopeType::kNormal ? 2 * i : i;
      const int32_t b = c.rope_type == RopeType::kNormal ? 2 * i + 1 : i + half;
      const double x0 = v[a], x1 = v[b];
      v[a] = static_cast<float>(x0 * std::cos(theta) - x1 * std::sin(theta));
      v[b] = static_cast<float>(x0 * std::sin(theta) + x1 * std::cos(theta));
    }
  }
}

// The reference's starting KV: `full`'s slots with [from, from + cut)
// dropped and the keys after it rotated back by `cut`, `blocks` blocks.
std::shared_ptr<KvSnapshot> ShiftedReference(const ModelConfig& c, const KvSnapshot& full,
                                             int32_t from, int32_t cut, int32_t blocks) {
  auto kv = std::make_shared<KvSnapshot>();
  kv->model_fingerprint = full.model_fingerprint;
  kv->block_size = full.block_size;
  kv->n_layer = full.n_layer;
  kv->kv_dim = full.kv_dim;
  kv->dtype = full.dtype;
  kv->n_tokens = blocks * kBlock;
  const int32_t kv_dim = full.kv_dim;
  const int64_t layer_bytes = int64_t{2} * kBlock * kv_dim * 4;  // f32 keys, then values
  std::vector<std::vector<uint8_t>> raw;
  for (const KvBlockBytes& b : full.blocks) {
    raw.emplace_back(b.size());
    b.CopyTo(raw.back().data());
  }
  for (int32_t b = 0; b < blocks; ++b) {
    std::vector<uint8_t> block(raw[0].size());
    for (int32_t slot = 0; slot < kBlock; ++slot) {
      const int32_t dst = b * kBlock + slot;
      const int32_t src = dst < from ? dst : dst + cut;
      for (int32_t layer = 0; layer < full.n_layer; ++layer) {
        const int64_t k_src = layer * layer_bytes + int64_t{src % kBlock} * kv_dim * 4;
        const int64_t k_dst = layer * layer_bytes + int64_t{slot} * kv_dim * 4;
        const int64_t v = layer_bytes / 2;
        std::vector<float> k(kv_dim);
        std::memcpy(k.data(), raw[src / kBlock].data() + k_src, kv_dim * 4);
        if (dst != src) RotateReference(c, k.data(), -cut);
        std::memcpy(block.data() + k_dst, k.data(), kv_dim * 4);
        std::memcpy(block.data() + k_dst + v, raw[src / kBlock].data() + k_src + v, kv_dim * 4);
      }
    }
    kv->blocks.emplace_back(block);
  }
  return kv;
}

class ShiftTest : public ::testing::TestWithParam<std::pair<int32_t, int32_t>> {};

TEST_P(ShiftTest, ShiftedTurnMatchesTheReRotationReference) {
  const auto [from, cut] = GetParam();
  auto model = LoadSynthetic(TinyOptions());
  const ModelConfig& c = model->config();
  const std::vector<int32_t> first = Prompt(3 * kBlock + 5, 4);

  // The session's first turn: its KV pinned, private (never reported).
  auto engine = MakeEngine(*model, GgmlType::kF32);
  ASSERT_TRUE(engine->Add(Turn(first, 1)).ok());
  const Steps turn1 = RunToEnd(*engine);
  EXPECT_EQ(turn1.stored_events, 0);
  EXPECT_EQ(engine->stats().pins, 1);
  EXPECT_EQ(engine->stats().blocks_pinned, 3);  // the full blocks it computed

  // What the pin holds, taken the ordinary way (the same computation).
  auto exporter = MakeEngine(*model, GgmlType::kF32);
  GenerationRequest export_req = Turn(first, 1);
  export_req.private_kv = false;
  export_req.pin_key.clear();
  export_req.export_kv = true;
  ASSERT_TRUE(exporter->Add(export_req).ok());
  const Steps exported = RunToEnd(*exporter);
  ASSERT_NE(exported.kv, nullptr);

  // The next turn: the pinned tokens without the cut, then new ones.
  std::vector<int32_t> next;
  for (int32_t i = 0; i < 3 * kBlock; ++i) {
    if (i < from || i >= from + cut) next.push_back(first[i]);
  }
  const int32_t kept = static_cast<int32_t>(next.size());
  for (int32_t t : Prompt(9, 11)) next.push_back(t);
  GenerationRequest shifted = Turn(next, 6);
  shifted.shift_from = from;
  shifted.shift_count = cut;
  const int64_t id = *engine->Add(shifted);
  EXPECT_EQ(engine->stats().pins, 0);  // the sequence took the pin's KV
  const Steps turn2 = RunToEnd(*engine);
  EXPECT_EQ(turn2.stored_events, 0);

  // The reference: the same KV built from RoPE's definition, imported.
  auto reference = MakeEngine(*model, GgmlType::kF32);
  GenerationRequest ref_req = Turn(next, 6);
  ref_req.pin_key.clear();
  ref_req.prefix_kv = ShiftedReference(c, *exported.kv, from, cut, kept / kBlock);
  ASSERT_TRUE(reference->Add(ref_req).ok());
  const Steps want = RunToEnd(*reference);

  ASSERT_EQ(turn2.tokens.size(), want.tokens.size());
  for (size_t i = 0; i < want.tokens.size(); ++i) {
    EXPECT_EQ(turn2.tokens[i].seq_id, id);
    EXPECT_EQ(turn2.tokens[i].token.id, want.tokens[i].token.id) << "token " << i;
    EXPECT_NEAR(turn2.tokens[i].token.logprob, want.tokens[i].token.logprob, 1e-4);
    ASSERT_EQ(turn2.tokens[i].token.top.size(), want.tokens[i].token.top.size());
    for (size_t k = 0; k < want.tokens[i].token.top.size(); ++k) {
      EXPECT_EQ(turn2.tokens[i].token.top[k].id, want.tokens[i].token.top[k].id);
    }
  }
  // Its KV came from the pin, in whole blocks.
  EXPECT_EQ(turn2.tokens.front().cached_tokens, kept / kBlock * kBlock);
}

// A cut of one whole block, one within blocks, and none (the pinned KV
// reused as it is).
INSTANTIATE_TEST_SUITE_P(Cuts, ShiftTest,
                         ::testing::Values(std::make_pair(16, 16), std::make_pair(20, 7),
                                           std::make_pair(0, 0)));

// With a draft model beside it (the model itself, so that a greedy proposal
// is the model's own pick unless the draft's KV is off), a shifted turn
// re-rotates the draft's keys with the model's: its proposals are kept.
// On CPU backends in either run: a draft's backend computes in the model's
// device memory (the KV pool), and the fake device gives each backend an
// arena of its own, readable only inside that backend's calls.
TEST(ShiftDraftTest, TheDraftsKeysAreShiftedToo) {
  auto model = LoadSynthetic(TinyOptions());
  EngineOptions o;
  o.kv.block_size = kBlock;
  o.speculation.draft = true;
  o.speculation.max_batch = 0;
  o.speculation.min_gain = 0;
  auto engine = Engine::Create(
      *model, testing::MakeTestBackend(testing::TestBackend::kCpu, 2), o,
      {.model = model.get(), .backend = testing::MakeTestBackend(testing::TestBackend::kCpu, 2)});
  ASSERT_TRUE(engine.ok()) << engine.status();
  const std::vector<int32_t> first = Prompt(3 * kBlock + 5, 4);
  ASSERT_TRUE((*engine)->Add(Turn(first, 1)).ok());
  RunToEnd(**engine);
  std::vector<int32_t> next;
  for (int32_t i = 0; i < 3 * kBlock; ++i) {
    if (i < 4 || i >= 4 + 23) next.push_back(first[i]);
  }
  for (int32_t t : Prompt(9, 11)) next.push_back(t);
  GenerationRequest shifted = Turn(next, 40);
  shifted.shift_from = 4;
  shifted.shift_count = 23;
  ASSERT_TRUE((*engine)->Add(shifted).ok());
  const Steps turn = RunToEnd(**engine);
  EXPECT_EQ(turn.tokens.front().cached_tokens, kBlock);  // a kept, shifted block
  const EngineStats stats = (*engine)->stats();
  EXPECT_GT(stats.spec_draft_proposed, 20);
  EXPECT_GE(stats.spec_draft_accepted * 10, stats.spec_draft_proposed * 9)
      << stats.spec_draft_accepted << " of " << stats.spec_draft_proposed;
}

TEST(ShiftPrivacyTest, PrivateKvIsNeitherReportedNorShared) {
  auto model = LoadSynthetic(TinyOptions());
  auto engine = MakeEngine(*model, GgmlType::kF32);
  const std::vector<int32_t> prompt = Prompt(3 * kBlock + 2, 6);
  ASSERT_TRUE(engine->Add(Turn(prompt, 2)).ok());
  EXPECT_EQ(RunToEnd(*engine).stored_events, 0);
  // An ordinary request with the same prompt finds nothing cached.
  GenerationRequest plain = Turn(prompt, 2);
  plain.private_kv = false;
  plain.pin_key.clear();
  ASSERT_TRUE(engine->Add(plain).ok());
  const Steps run = RunToEnd(*engine);
  EXPECT_EQ(run.tokens.front().cached_tokens, 0);
  EXPECT_GT(run.stored_events, 0);
  EXPECT_EQ(engine->stats().pins, 1);
  engine->Unpin("session");
  EXPECT_EQ(engine->stats().pins, 0);
  EXPECT_EQ(engine->stats().blocks_used, 0);
}

// A generation longer than its rolling window: the KV never holds more than
// the window (the kept prefix and the newest tokens), every token comes,
// and its positions keep counting.
TEST(RollTest, AGenerationLongerThanItsWindowRollsTokenWise) {
  auto model = LoadSynthetic(TinyOptions());
  auto engine = MakeEngine(*model, GgmlType::kF32);
  GenerationRequest r;
  r.prompt = Prompt(20, 3);
  r.max_tokens = 200;
  r.ignore_eos = true;
  r.roll_window = 64;
  r.roll_keep = 16;
  ASSERT_TRUE(engine->Add(r).ok());
  int tokens = 0, max_used = 0, stored_after_roll = 0;
  bool rolled = false;
  while (engine->HasWork()) {
    absl::StatusOr<StepOutput> out = engine->Step();
    ASSERT_TRUE(out.ok()) << out.status();
    tokens += static_cast<int>(out->tokens.size());
    max_used = std::max(max_used, engine->stats().blocks_used);
    if (rolled) {
      for (const BlockEvent& b : out->blocks) stored_after_roll += b.kind == BlockEvent::Kind::kStored;
    }
    rolled = rolled || tokens + 20 > 64;
  }
  EXPECT_EQ(tokens, 200);
  EXPECT_LE(max_used, 64 / kBlock + 1);
  EXPECT_EQ(stored_after_roll, 0);  // a rolled window's blocks are its own
  EXPECT_EQ(engine->stats().blocks_used, 0);

  r.roll_window = 40;  // not two blocks after the kept 16
  EXPECT_EQ(engine->Add(r).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tandem::engine
