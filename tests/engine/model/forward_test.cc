// The forward pass over paged KV: prefill equals token-by-token decode, a
// mixed batch equals each sequence alone, a chunk that computes only its KV
// stores what one with logits does, and block size, chunking, weight type
// and architecture variants agree.
#include "engine/model/forward.h"

#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "engine/kv/kv_cache.h"
#include "engine/model/rope.h"
#include "tests/engine/test_backends.h"
#include "tests/engine/test_models.h"

namespace tandem::engine {
namespace {

using testing::LoadSynthetic;
using testing::TinyOptions;

// A forward pass with its own KV cache, holding one block table per sequence.
class Harness {
 public:
  Harness(const Model& model, int32_t block_size, GgmlType kv_type = GgmlType::kF32)
      : backend_(testing::MakeTestBackend(2)),
        kv_(*CreateKvCache(*backend_, model.config(),
                           {.block_size = block_size, .budget_bytes = 64 << 20, .dtype = kv_type})),
        rope_(model.config(), model.weights().rope_freq_factors, 512),
        forward_(*ForwardPass::Create(model, *backend_, *kv_, rope_,
                                      {.max_tokens = 128, .max_seqs = 4, .max_logit_rows = 128})),
        n_vocab_(model.config().n_vocab) {}

  // Runs tokens of several sequences in one batch; returns their logits rows
  // (every token's row), but for the parts `kv_only` marks, which compute
  // their KV alone.
  std::vector<std::vector<float>> Run(
      const std::vector<std::pair<int, std::vector<int32_t>>>& parts,
      const std::vector<bool>& kv_only = {}) {
    std::vector<BatchChunk> chunks;
    std::vector<std::vector<int32_t>> positions;
    positions.reserve(parts.size());  // the chunks' spans point into it
    for (const auto& [seq, tokens] : parts) {
      const int32_t start = pos_[seq];
      const int32_t end = start + static_cast<int32_t>(tokens.size());
      if (!lists_.contains(seq)) lists_.emplace(seq, *kv_->pool().Allocate(0));
      BlockList& list = lists_.at(seq);
      const int32_t need = (end + kv_->block_size() - 1) / kv_->block_size();
      if (static_cast<int32_t>(list.size()) < need) {
        EXPECT_TRUE(kv_->pool().Extend(list, need - static_cast<int32_t>(list.size())));
      }
      positions.emplace_back();
      for (int32_t p = start; p < end; ++p) positions.back().push_back(p);
      const bool only_kv = chunks.size() < kv_only.size() && kv_only[chunks.size()];
      chunks.push_back({.tokens = tokens, .positions = positions.back(), .kv_start = start,
                        .blocks = list.ids(), .all_logits = !only_kv, .reduce = {},
                        .kv_only = only_kv});
      pos_[seq] = end;
    }
    absl::StatusOr<ForwardResult> r = forward_->Run(chunks);
    EXPECT_TRUE(r.ok()) << r.status();
    std::vector<std::vector<float>> rows;
    for (size_t c = 0; c < chunks.size(); ++c) {
      if (chunks[c].kv_only) {
        EXPECT_EQ(r->first_row[c], -1);
        continue;
      }
      for (size_t t = 0; t < chunks[c].tokens.size(); ++t) {
        rows.emplace_back(n_vocab_);
        forward_->DownloadRow(r->first_row[c] + static_cast<int32_t>(t), rows.back());
      }
    }
    return rows;
  }

 private:
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<KvCache> kv_;
  RopeTable rope_;
  std::unique_ptr<ForwardPass> forward_;
  int32_t n_vocab_;
  absl::flat_hash_map<int, BlockList> lists_;
  absl::flat_hash_map<int, int32_t> pos_;
};

std::vector<int32_t> Tokens(int n, uint64_t seed, int32_t n_vocab) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> t(n);
  for (int32_t& id : t) id = static_cast<int32_t>(rng() % n_vocab);
  return t;
}

void ExpectNear(const std::vector<float>& a, const std::vector<float>& b, float tol) {
  ASSERT_EQ(a.size(), b.size());
  float worst = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::fabs(a[i] - b[i]));
  EXPECT_LE(worst, tol);
}

TEST(ForwardTest, PrefillEqualsTokenByTokenDecode) {
  auto model = LoadSynthetic(TinyOptions());
  const auto prompt = Tokens(40, 1, model->config().n_vocab);
  Harness whole(*model, 16);
  const auto prefill = whole.Run({{0, prompt}});
  Harness steps(*model, 16);
  for (size_t i = 0; i < prompt.size(); ++i) {
    const auto row = steps.Run({{0, {prompt[i]}}});
    ExpectNear(row[0], prefill[i], 1e-4f);
  }
}

TEST(ForwardTest, BatchEqualsEachSequenceAlone) {
  auto model = LoadSynthetic(TinyOptions());
  const int32_t v = model->config().n_vocab;
  const auto a = Tokens(37, 2, v), b = Tokens(5, 3, v), c = Tokens(18, 4, v);
  // Alone.
  std::vector<std::vector<std::vector<float>>> alone;
  for (const auto& p : {a, b, c}) {
    Harness h(*model, 16);
    alone.push_back(h.Run({{0, p}}));
  }
  // Together, with a prefill chunk of `a`, decode tokens of `b` and chunks of `c`
  // in the same batches.
  Harness h(*model, 16);
  auto s1 = h.Run({{0, {a.begin(), a.begin() + 20}}, {1, {b[0]}}, {2, {c.begin(), c.begin() + 9}}});
  auto s2 = h.Run({{1, {b[1]}}, {0, {a.begin() + 20, a.end()}}, {2, {c.begin() + 9, c.end()}}});
  auto s3 = h.Run({{1, {b.begin() + 2, b.end()}}});
  for (int i = 0; i < 20; ++i) ExpectNear(s1[i], alone[0][i], 1e-4f);
  ExpectNear(s1[20], alone[1][0], 1e-4f);
  for (int i = 0; i < 9; ++i) ExpectNear(s1[21 + i], alone[2][i], 1e-4f);
  ExpectNear(s2[0], alone[1][1], 1e-4f);
  for (int i = 0; i < 17; ++i) ExpectNear(s2[1 + i], alone[0][20 + i], 1e-4f);
  for (int i = 0; i < 9; ++i) ExpectNear(s2[18 + i], alone[2][9 + i], 1e-4f);
  for (int i = 0; i < 3; ++i) ExpectNear(s3[i], alone[1][2 + i], 1e-4f);
}

// A chunk that computes its KV alone (a draft catching up) stores what a
// chunk with logits does: in a pass of such chunks only (whose last layer
// computes keys and values and stops), and beside a chunk with logits.
TEST(ForwardTest, AKvOnlyChunkStoresTheKvAChunkWithLogitsDoes) {
  auto model = LoadSynthetic(TinyOptions());
  const int32_t v = model->config().n_vocab;
  const auto a = Tokens(37, 5, v), b = Tokens(21, 6, v);
  Harness reference(*model, 16);
  reference.Run({{0, {a.begin(), a.begin() + 30}}});
  const auto a_next = reference.Run({{0, {a.begin() + 30, a.end()}}});
  Harness ref_b(*model, 16);
  const auto b_rows = ref_b.Run({{1, b}});

  Harness kv_alone(*model, 16);
  EXPECT_TRUE(kv_alone.Run({{0, {a.begin(), a.begin() + 30}}}, {true}).empty());
  const auto after_alone = kv_alone.Run({{0, {a.begin() + 30, a.end()}}});
  Harness mixed(*model, 16);
  const auto b_mixed = mixed.Run({{0, {a.begin(), a.begin() + 30}}, {1, b}}, {true, false});
  const auto after_mixed = mixed.Run({{0, {a.begin() + 30, a.end()}}});
  ASSERT_EQ(b_mixed.size(), b.size());
  for (size_t i = 0; i < b.size(); ++i) ExpectNear(b_mixed[i], b_rows[i], 1e-4f);
  for (size_t i = 0; i < a_next.size(); ++i) {
    ExpectNear(after_alone[i], a_next[i], 1e-4f);
    ExpectNear(after_mixed[i], a_next[i], 1e-4f);
  }
}

TEST(ForwardTest, BlockSizeDoesNotChangeLogits) {
  auto model = LoadSynthetic(TinyOptions());
  const auto prompt = Tokens(70, 5, model->config().n_vocab);
  Harness ref(*model, 16);
  const auto expected = ref.Run({{0, prompt}});
  for (int32_t bs : {1, 3, 7, 32, 100}) {
    Harness h(*model, bs);
    const auto got = h.Run({{0, prompt}});
    for (size_t i = 0; i < prompt.size(); ++i) ExpectNear(got[i], expected[i], 1e-4f);
  }
}

TEST(ForwardTest, F16KvStaysCloseToF32) {
  auto model = LoadSynthetic(TinyOptions());
  const auto prompt = Tokens(30, 6, model->config().n_vocab);
  Harness f32(*model, 16, GgmlType::kF32);
  Harness f16(*model, 16, GgmlType::kF16);
  const auto a = f32.Run({{0, prompt}});
  const auto b = f16.Run({{0, prompt}});
  for (size_t i = 0; i < prompt.size(); ++i) ExpectNear(a[i], b[i], 2e-2f);
}

TEST(ForwardTest, WeightTypesAgreeWithF32) {
  SyntheticModelOptions o = TinyOptions();
  auto f32 = LoadSynthetic(o);
  const auto prompt = Tokens(20, 7, o.n_vocab);
  Harness ref(*f32, 16);
  const auto expected = ref.Run({{0, prompt}});
  for (GgmlType t : {GgmlType::kF16, GgmlType::kBF16, GgmlType::kQ8_0}) {
    o.type = t;
    auto m = LoadSynthetic(o);
    Harness h(*m, 16);
    const auto got = h.Run({{0, prompt}});
    // Q8_0 also quantizes activations (as llama.cpp does), so it drifts most.
    const float tol = t == GgmlType::kF16 ? 0.02f : t == GgmlType::kBF16 ? 0.15f : 0.3f;
    for (size_t i = 0; i < prompt.size(); ++i) ExpectNear(got[i], expected[i], tol);
  }
}

TEST(ForwardTest, Qwen2AndTiedOutputRunAndStayConsistent) {
  SyntheticModelOptions o = TinyOptions();
  o.arch = "qwen2";
  o.tied_output = true;
  auto model = LoadSynthetic(o);
  ASSERT_TRUE(model->config().qkv_bias);
  EXPECT_EQ(model->config().rope_type, RopeType::kNeox);
  const auto prompt = Tokens(25, 8, o.n_vocab);
  Harness whole(*model, 16);
  const auto prefill = whole.Run({{0, prompt}});
  Harness steps(*model, 4);
  for (size_t i = 0; i < prompt.size(); ++i) {
    ExpectNear(steps.Run({{0, {prompt[i]}}})[0], prefill[i], 1e-4f);
  }
}

TEST(ForwardTest, RejectsBadChunks) {
  auto model = LoadSynthetic(TinyOptions());
  auto backend = testing::MakeTestBackend(1);
  auto kv = *CreateKvCache(*backend, model->config(), {.block_size = 16, .budget_bytes = 1 << 20});
  RopeTable rope(model->config(), {}, 32);
  auto forward = ForwardPass::Create(*model, *backend, *kv, rope, {});
  ASSERT_TRUE(forward.ok()) << forward.status();
  ForwardPass& fwd = **forward;
  BlockList list = *kv->pool().Allocate(1);
  const auto chunk = [&list](const std::vector<int32_t>& tokens,
                            const std::vector<int32_t>& positions, int32_t kv_start) {
    return std::vector<BatchChunk>{{.tokens = tokens, .positions = positions,
                                    .kv_start = kv_start, .blocks = list.ids(),
                                    .all_logits = false, .reduce = {}}};
  };
  const std::vector<int32_t> bad_id = {model->config().n_vocab};
  const std::vector<int32_t> pos0 = {0};
  EXPECT_EQ(fwd.Run(chunk(bad_id, pos0, 0)).status().code(), absl::StatusCode::kInvalidArgument);
  const std::vector<int32_t> ok = {1, 2};
  const std::vector<int32_t> pos15 = {15, 16};
  EXPECT_EQ(fwd.Run(chunk(ok, pos15, 15)).status().code(),
            absl::StatusCode::kInvalidArgument);  // 2 blocks
  const std::vector<int32_t> pos31 = {31, 32};
  EXPECT_EQ(fwd.Run(chunk(ok, pos31, 0)).status().code(),
            absl::StatusCode::kInvalidArgument);  // max_context
  EXPECT_EQ(fwd.Run(chunk(ok, pos0, 0)).status().code(),
            absl::StatusCode::kInvalidArgument);  // 1 position
  const std::vector<int32_t> pos01 = {0, 1};
  std::vector<BatchChunk> kv_only = chunk(ok, pos01, 0);
  kv_only[0].kv_only = true;
  kv_only[0].all_logits = true;
  const absl::Status logits = fwd.Run(kv_only).status();
  EXPECT_EQ(logits.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(logits.message().find("kv_only"), std::string::npos) << logits;
}

}  // namespace
}  // namespace tandem::engine
