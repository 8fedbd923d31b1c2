// The streaming paged-attention kernel against the materializing reference:
// block sizes, GQA ratios, KV types, and batches that mix prefill chunks with
// single decode rows.
#include "engine/cpu/attention.h"

#include <cmath>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "engine/cpu/cpu_backend.h"
#include "engine/kv/kv_cache.h"

namespace tandem::engine::cpu {
namespace {

struct Case {
  int32_t block_size;
  int32_t n_head;
  int32_t n_head_kv;
  int32_t head_dim;
  GgmlType kv_type;
};

class AttentionTest : public ::testing::TestWithParam<Case> {};

TEST_P(AttentionTest, MatchesReference) {
  const Case c = GetParam();
  ModelConfig config;
  config.n_layer = 1;
  config.n_head = c.n_head;
  config.n_head_kv = c.n_head_kv;
  config.head_dim = c.head_dim;
  auto backend = MakeCpuBackend({.threads = 1});
  auto kv = *CreateKvCache(*backend, config, {.block_size = c.block_size, .budget_bytes = 32 << 20,
                                      .dtype = c.kv_type});
  std::mt19937 rng(11);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  // Three sequences: context lengths and rows in this batch.
  struct Seq {
    int32_t start, rows;
  };
  const std::vector<Seq> shapes = {{0, 37}, {70, 1}, {20, 9}};
  std::vector<BlockList> lists;
  std::vector<AttentionSequence> seqs;
  int32_t row = 0;
  const int32_t kv_dim = c.n_head_kv * c.head_dim;
  // Every sequence's keys and values, stored by the backend's StoreKv.
  StepMetadata store;
  std::vector<float> k, v;
  for (const Seq& s : shapes) {
    const int32_t n_ctx = s.start + s.rows;
    lists.push_back(*kv->pool().Allocate((n_ctx + c.block_size - 1) / c.block_size));
    for (int32_t p = 0; p < n_ctx; ++p) {
      for (int32_t i = 0; i < kv_dim; ++i) k.push_back(dist(rng));
      for (int32_t i = 0; i < kv_dim; ++i) v.push_back(dist(rng));
      store.tokens.push_back(0);
      store.slot_mapping.push_back(int64_t{lists.back()[p / c.block_size]} * c.block_size +
                                   p % c.block_size);
    }
    seqs.push_back({.first_row = row, .n_rows = s.rows, .kv_start = s.start,
                    .blocks = lists.back().ids()});
    row += s.rows;
  }
  backend->BeginStep(store);
  backend->StoreKv(kv->LayerView(0), HostPtr<const float>(k.data()),
                   HostPtr<const float>(v.data()));
  const int32_t q_dim = c.n_head * c.head_dim;
  std::vector<float> q(static_cast<size_t>(row) * q_dim);
  for (float& x : q) x = dist(rng) * 2.0f;
  std::vector<float> got(q.size()), want(q.size());
  AttentionArgs args{.q = q.data(), .out = got.data(), .n_head = c.n_head,
                     .n_head_kv = c.n_head_kv, .head_dim = c.head_dim,
                     .kv = kv->LayerView(0), .seqs = seqs};
  args.out = want.data();
  PagedAttentionReference(args);
  // Every kernel: AVX-512 and AVX2 where this CPU has them (else each falls
  // back to the next), and the portable one.
  for (Isa isa : {Isa::kAvx512, Isa::kAvx2, Isa::kPortable}) {
    std::fill(got.begin(), got.end(), 0.0f);
    args.out = got.data();
    PagedAttention(args, {.threads = 2, .isa = isa});
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_NEAR(got[i], want[i], 2e-5f) << i << " " << IsaName(isa);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, AttentionTest,
    ::testing::Values(Case{16, 8, 4, 64, GgmlType::kF32}, Case{16, 8, 8, 64, GgmlType::kF32},
                      Case{1, 4, 1, 32, GgmlType::kF32}, Case{7, 6, 2, 8, GgmlType::kF16},
                      Case{100, 8, 4, 64, GgmlType::kF16}, Case{32, 2, 2, 128, GgmlType::kF32},
                      Case{16, 14, 2, 64, GgmlType::kF32}));

}  // namespace
}  // namespace tandem::engine::cpu
