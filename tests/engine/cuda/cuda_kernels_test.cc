// The GPU's elementwise, attention and logits kernels against the CPU
// reference on random inputs (the matrix products' are in
// cuda_products_test.cc). Built when nvcc is found; each test skips on a
// machine without a usable CUDA device, printing the driver's reason, and
// fails instead when TANDEM_REQUIRE_CUDA=1 (cuda_test_util.h).
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <cstdint>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "engine/model/backend.h"
#include "engine/cpu/attention.h"
#include "engine/cpu/reference_kernels.h"
#include "engine/cuda/attention_f16.h"
#include "engine/cuda/attention_plan.h"
#include "engine/cuda/backend_kernels.h"
#include "engine/cuda/device.h"
#include "engine/cuda/driver.h"
#include "engine/cuda/kernels.h"
#include "engine/cuda/matmul.h"
#include "engine/cuda/quant_kernels.h"
#include "engine/cuda/rope_store_kv.h"
#include "engine/cuda/weight_types.h"
#include "engine/kv/kv_cache.h"
#include "engine/gguf/model_config.h"
#include "engine/model/rope.h"
#include "engine/gguf/tensor_type.h"
#include "tests/engine/cuda/attention_batch.h"
#include "tests/engine/cuda/cuda_test_util.h"

namespace tandem::engine::cuda {
namespace {

// In place, for a dim of loose floats (the scalar kernel), of float4s
// fewer than one per thread, and of more than a block keeps in registers.
TEST_F(CudaKernelsTest, RmsNormMatchesTheReference) {
  for (const int64_t dim : {int64_t{333}, int64_t{2048}, int64_t{100}, int64_t{20000}}) {
    SCOPED_TRACE(dim);
    const int64_t tokens = 5;
    const std::vector<float> x = Random(tokens * dim, 3.0f), w = Random(dim);
    std::vector<float> want(x.size());
    cpu::RmsNormReference(x.data(), w.data(), tokens, dim, 1e-5f, want.data());
    DeviceBuffer dx = Up(x), dw = Up(w);
    ASSERT_EQ(LaunchRmsNorm(dx.as<float>(), dw.as<float>(), tokens, dim, 1e-5f, dx.as<float>(),
                            stream_->stream()),
              cudaSuccess);
    ExpectNear(Down<float>(dx, x.size()), want, 1e-5f);
  }
}

// The tensor cores' input normed and rounded in one launch: bit for bit
// LaunchRmsNorm then LaunchToF16 (LaunchToBf16), and the CPU's rounding;
// the same dims, and one 16-bit value past an aligned start (a store a
// value; the same kernel, so the same sums and scale).
TEST_F(CudaKernelsTest, RmsNorm16EqualsRmsNormThenTheConversion) {
  for (const bool bf16 : {false, true}) {
    for (const int64_t dim : {int64_t{333}, int64_t{2048}, int64_t{100}, int64_t{20000}}) {
      for (const int64_t offset : {0, 1}) {
        SCOPED_TRACE(testing::Message()
                     << (bf16 ? "bf16" : "f16") << " dim " << dim << " offset " << offset);
        const int64_t tokens = 5;
        const std::vector<float> x = Random(tokens * dim, 3.0f), w = Random(dim);
        DeviceBuffer dx = Up(x), dw = Up(w);
        absl::StatusOr<DeviceBuffer> normed = DeviceBuffer::Allocate(x.size() * 4);
        absl::StatusOr<DeviceBuffer> converted = DeviceBuffer::Allocate(x.size() * 2);
        absl::StatusOr<DeviceBuffer> fused = DeviceBuffer::Allocate((x.size() + 1) * 2);
        ASSERT_TRUE(normed.ok() && converted.ok() && fused.ok());
        ASSERT_EQ(LaunchRmsNorm(dx.as<float>(), dw.as<float>(), tokens, dim, 1e-5f,
                                normed->as<float>(), stream_->stream()),
                  cudaSuccess);
        const int64_t n = tokens * dim;
        ASSERT_EQ(bf16 ? LaunchToBf16(normed->as<float>(), n, converted->data(), stream_->stream())
                       : LaunchToF16(normed->as<float>(), n, converted->data(), stream_->stream()),
                  cudaSuccess);
        uint16_t* out = fused->as<uint16_t>() + offset;
        ASSERT_EQ(LaunchRmsNorm16(dx.as<float>(), dw.as<float>(), tokens, dim, 1e-5f, bf16, out,
                                  stream_->stream()),
                  cudaSuccess);
        const std::vector<float> host_normed = Down<float>(*normed, x.size());
        const std::vector<uint16_t> want = Down<uint16_t>(*converted, x.size());
        const std::vector<uint16_t> got = Down<uint16_t>(*fused, x.size() + 1);
        for (size_t i = 0; i < want.size(); ++i) {
          ASSERT_EQ(got[i + offset], want[i]) << "at " << i;
          ASSERT_EQ(want[i], bf16 ? Fp32ToBf16(host_normed[i]) : Fp32ToFp16(host_normed[i]))
              << "at " << i;
        }
      }
    }
  }
}

TEST_F(CudaKernelsTest, SwiGluAndAddMatchTheReference) {
  const int64_t n = 10007;
  const std::vector<float> gate = Random(n, 6.0f), up = Random(n, 2.0f);
  std::vector<float> want(n);
  cpu::SwiGluReference(gate.data(), up.data(), n, want.data());
  DeviceBuffer dg = Up(gate), du = Up(up);
  ASSERT_EQ(LaunchSwiGlu(dg.as<float>(), du.as<float>(), n, dg.as<float>(), stream_->stream()),
            cudaSuccess);
  ExpectNear(Down<float>(dg, n), want, 1e-6f);

  std::vector<float> sum = gate;
  cpu::AddReference(sum.data(), up.data(), n);
  DeviceBuffer dx = Up(gate);
  ASSERT_EQ(LaunchAdd(dx.as<float>(), du.as<float>(), n, stream_->stream()), cudaSuccess);
  ExpectNear(Down<float>(dx, n), sum, 0.0f);
}

// An upload queued behind kernels on the engine's non-blocking stream lands
// after them, not before (a synchronous cudaMemcpy runs on the legacy
// stream, which does not wait for this one, and would overtake them).
TEST_F(CudaKernelsTest, CopiesAreOrderedWithTheKernelsOnTheStream) {
  const int64_t n = int64_t{1} << 22;
  const std::vector<float> ones(n, 1.0f), twos(n, 2.0f);
  DeviceBuffer dx = Up(ones), dy = Up(ones);
  for (int i = 0; i < 50; ++i) {
    ASSERT_EQ(LaunchAdd(dx.as<float>(), dy.as<float>(), n, stream_->stream()), cudaSuccess);
  }
  ASSERT_TRUE(dx.Upload(*stream_, twos.data(), n * sizeof(float)).ok());
  ASSERT_EQ(LaunchAdd(dx.as<float>(), dy.as<float>(), n, stream_->stream()), cudaSuccess);
  ExpectNear(Down<float>(dx, n), std::vector<float>(n, 3.0f), 0.0f);
}

TEST_F(CudaKernelsTest, RopeMatchesTheTablesBothStyles) {
  for (const RopeType type : {RopeType::kNormal, RopeType::kNeox}) {
    ModelConfig c;
    c.n_rot = 48;  // fewer than head_dim: the rest is left alone
    c.head_dim = 64;
    c.rope_type = type;
    c.rope_freq_base = 500000.0f;
    const RopeTable rope(c, {}, 300);
    const int32_t tokens = 4, heads = 3;
    const std::vector<int32_t> positions = {0, 7, 151, 299};
    const std::vector<float> x = Random(tokens * heads * c.head_dim, 2.0f);
    std::vector<float> want = x;
    for (int32_t t = 0; t < tokens; ++t) {
      rope.Apply(want.data() + t * heads * c.head_dim, heads, c.head_dim, positions[t]);
    }
    DeviceBuffer dx = Up(x), dp = Up(positions);
    DeviceBuffer dcos = Up(rope.cos_table().data(), rope.cos_table().size_bytes());
    DeviceBuffer dsin = Up(rope.sin_table().data(), rope.sin_table().size_bytes());
    ASSERT_EQ(LaunchRope(dx.as<float>(), dp.as<int32_t>(), tokens, heads, c.head_dim, c.n_rot,
                         type == RopeType::kNormal ? RopeStyle::kNormal : RopeStyle::kNeox,
                         dcos.as<float>(), dsin.as<float>(), stream_->stream()),
              cudaSuccess);
    ExpectNear(Down<float>(dx, x.size()), want, 1e-6f);
  }
}

// The fused RoPE and KV store (engine/cuda/rope_store_kv.h) equals the three
// launches it replaces, bit for bit: q and k rotated (both styles, a partial
// rotation), k and v in their slots of an f32 and an f16 pool, a pad row
// storing nothing; and without q.
TEST_F(CudaKernelsTest, RopeStoreKvEqualsRopeTwiceAndStoreKv) {
  const int32_t head_dim = 64, heads = 4, kv_heads = 2, kv_dim = kv_heads * head_dim;
  const int32_t block_size = 4, blocks = 3;
  const std::vector<int32_t> positions = {0, 5, 63, 17, 9};
  const std::vector<int64_t> slots = {0, 5, -1, 11, 6};
  const auto tokens = static_cast<int64_t>(positions.size());
  for (const RopeType type : {RopeType::kNormal, RopeType::kNeox}) {
    for (const bool f16 : {false, true}) {
      for (const bool with_q : {true, false}) {
        SCOPED_TRACE(testing::Message() << static_cast<int>(type) << f16 << with_q);
        ModelConfig c;
        c.n_rot = 48;
        c.head_dim = head_dim;
        c.rope_type = type;
        const RopeTable rope(c, {}, 64);
        DeviceBuffer dcos = Up(rope.cos_table().data(), rope.cos_table().size_bytes());
        DeviceBuffer dsin = Up(rope.sin_table().data(), rope.sin_table().size_bytes());
        DeviceBuffer dpos = Up(positions), dslots = Up(slots);
        const std::vector<float> q = Random(tokens * heads * head_dim, 2.0f);
        const std::vector<float> k = Random(tokens * kv_dim, 2.0f);
        const std::vector<float> v = Random(tokens * kv_dim, 2.0f);
        const int64_t elem = f16 ? 2 : 4;
        const std::vector<uint8_t> pool(size_t{blocks} * 2 * block_size * kv_dim * elem, 0xab);
        DeviceBuffer fq = Up(q), fk = Up(k), fv = Up(v), fpool = Up(pool);
        DeviceBuffer sq = Up(q), sk = Up(k), sv = Up(v), spool = Up(pool);
        const auto rows = [&](DeviceBuffer& b) {
          return KvRows{.base = b.as<uint8_t>(),
                        .block_bytes = 2 * block_size * kv_dim * elem,
                        .k_offset = 0,
                        .v_offset = block_size * kv_dim * elem,
                        .block_size = block_size,
                        .kv_dim = kv_dim,
                        .f16 = f16};
        };
        const RopeStyle style = type == RopeType::kNeox ? RopeStyle::kNeox : RopeStyle::kNormal;
        const RopeArgs args{.positions = dpos.as<int32_t>(),
                            .n_rot = c.n_rot,
                            .style = style,
                            .cos_table = dcos.as<float>(),
                            .sin_table = dsin.as<float>()};
        ASSERT_EQ(LaunchRopeStoreKv(with_q ? fq.as<float>() : nullptr, heads, fk.as<float>(),
                                    fv.as<float>(), kv_heads, head_dim, args, rows(fpool),
                                    dslots.as<int64_t>(), tokens, stream_->stream()),
                  cudaSuccess);
        if (with_q) {
          ASSERT_EQ(LaunchRope(sq.as<float>(), dpos.as<int32_t>(), tokens, heads, head_dim, c.n_rot,
                               style, dcos.as<float>(), dsin.as<float>(), stream_->stream()),
                    cudaSuccess);
        }
        ASSERT_EQ(LaunchRope(sk.as<float>(), dpos.as<int32_t>(), tokens, kv_heads, head_dim,
                             c.n_rot, style, dcos.as<float>(), dsin.as<float>(), stream_->stream()),
                  cudaSuccess);
        ASSERT_EQ(LaunchStoreKv(rows(spool), sk.as<float>(), sv.as<float>(), dslots.as<int64_t>(),
                                tokens, stream_->stream()),
                  cudaSuccess);
        EXPECT_EQ(Down<float>(fq, q.size()), Down<float>(sq, q.size()));
        EXPECT_EQ(Down<float>(fk, k.size()), Down<float>(sk, k.size()));
        EXPECT_EQ(Down<uint8_t>(fpool, pool.size()), Down<uint8_t>(spool, pool.size()));
      }
    }
  }
}

// The logits reduction (engine/cuda/backend_kernels.h): log-sum-exp, top-k
// with ties to the lower id, and the target's logit, against a brute force.
// Vocabularies of one slice, several and the most slices (longer ones), ties
// inside a warp's part and across slices, k from 0 to kReducedTop and past
// a tiny vocabulary, a row of -inf and a skipped row.
TEST_F(CudaKernelsTest, TopKLogprobsMatchABruteForce) {
  for (const int64_t vocab : {int64_t{7}, int64_t{3000}, int64_t{32000}, int64_t{262144}}) {
    SCOPED_TRACE(vocab);
    const std::vector<int32_t> ks = {kReducedTop, 1, 0, 5, kReducedTop, -1, 3};
    const auto rows = static_cast<int64_t>(ks.size());
    std::vector<float> logits = Random(rows * vocab, 8.0f);
    float* tied = logits.data();  // row 0, whose k is kReducedTop
    // Ties on both sides of each eighth: the slice edges of 8 and 32 slices,
    // the warps' part edges of one slice. Then a tie above them all.
    for (int64_t e = 1; e < 8 && vocab >= 16; ++e) {
      tied[e * vocab / 8 - 1] = tied[e * vocab / 8] = 49.0f;
    }
    tied[vocab / 2] = tied[vocab - 1] = tied[0] = 50.0f;  // the lower id first
    std::fill(logits.begin() + 4 * vocab, logits.begin() + 5 * vocab, -INFINITY);  // row 4
    DeviceBuffer dl = Up(logits);
    DeviceBuffer top_k = Up(ks);
    std::vector<int32_t> targets(rows, -1);
    targets[0] = 3;
    targets[2] = static_cast<int32_t>(vocab - 1);
    DeviceBuffer target = Up(targets);
    absl::StatusOr<DeviceBuffer> out = DeviceBuffer::Allocate(rows * sizeof(ReducedRow));
    absl::StatusOr<DeviceBuffer> scratch = DeviceBuffer::Allocate(ReduceLogitsScratchBytes(rows));
    ASSERT_TRUE(out.ok() && scratch.ok());
    ASSERT_EQ(cudaMemset(out->as<uint8_t>(), 0x7f, rows * sizeof(ReducedRow)), cudaSuccess);
    ASSERT_EQ(
        LaunchReduceLogits(dl.as<float>(), rows, vocab, top_k.as<int32_t>(), target.as<int32_t>(),
                           scratch->as<uint8_t>(), out->as<ReducedRow>(), stream_->stream()),
        cudaSuccess);
    const std::vector<ReducedRow> got = Down<ReducedRow>(*out, rows);
    for (int64_t r = 0; r < rows; ++r) {
      SCOPED_TRACE(r);
      if (ks[r] < 0) {
        EXPECT_EQ(got[r].n_top, 0x7f7f7f7f) << "a skipped row is left alone";
        continue;
      }
      const float* row = logits.data() + r * vocab;
      const int32_t want_n = static_cast<int32_t>(std::min<int64_t>(ks[r], vocab));
      ASSERT_EQ(got[r].n_top, want_n);
      const float m = *std::max_element(row, row + vocab);
      if (m == -INFINITY) {
        EXPECT_EQ(got[r].max, 0.0f);
        EXPECT_EQ(got[r].log_sum, INFINITY);
        for (int32_t j = 0; j < want_n; ++j) EXPECT_EQ(got[r].top_ids[j], j);
        continue;
      }
      double sum = 0;
      for (int64_t i = 0; i < vocab; ++i) sum += std::exp(static_cast<double>(row[i]) - m);
      const double want_lse = m + std::log(sum);
      EXPECT_EQ(got[r].max, m);
      EXPECT_NEAR(got[r].max + got[r].log_sum, want_lse, 1e-4);
      std::vector<int32_t> order(vocab);
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(),
                       [row](int32_t a, int32_t b) { return row[a] > row[b]; });
      for (int32_t j = 0; j < want_n; ++j) {
        EXPECT_EQ(got[r].top_ids[j], order[j]) << "rank " << j;
        EXPECT_NEAR(got[r].top_logprobs[j], row[order[j]] - want_lse, 1e-4);
      }
      if (targets[r] >= 0) {
        EXPECT_EQ(got[r].target_logit, row[targets[r]]);
      }
    }
    EXPECT_EQ(got[0].top_ids[0], 0);
    EXPECT_EQ(got[0].top_ids[1], vocab / 2);
  }
}

// A prefill chunk and a decode row of two sequences over shuffled blocks,
// with grouped-query heads and a head_dim that is no multiple of 32, for
// f32 and f16 KV.
TEST_F(CudaKernelsTest, PagedAttentionMatchesTheReference) {
  for (const GgmlType dtype : {GgmlType::kF32, GgmlType::kF16}) {
    const int32_t n_head = 4, n_head_kv = 2, head_dim = 40, block_size = 4, n_blocks = 8;
    const int32_t kv_dim = n_head_kv * head_dim;
    const int64_t elem = dtype == GgmlType::kF16 ? 2 : 4;
    const int64_t half_block = int64_t{block_size} * kv_dim * elem;
    std::vector<uint8_t> pool(n_blocks * 2 * half_block);
    const std::vector<float> kv = Random(pool.size() / elem, 1.5f);
    for (size_t i = 0; i < kv.size(); ++i) {
      if (dtype == GgmlType::kF16) {
        reinterpret_cast<uint16_t*>(pool.data())[i] = Fp32ToFp16(kv[i]);
      } else {
        reinterpret_cast<float*>(pool.data())[i] = kv[i];
      }
    }
    const std::vector<BlockId> table_a = {5, 2, 7}, table_b = {0, 3, 1, 6};
    const std::vector<AttentionSequence> seqs = {
        {.first_row = 0, .n_rows = 5, .kv_start = 3, .blocks = table_a},
        {.first_row = 5, .n_rows = 1, .kv_start = 13, .blocks = table_b}};
    const int32_t rows = 6;
    const std::vector<float> q = Random(rows * n_head * head_dim, 2.0f);
    std::vector<float> want(q.size());
    cpu::PagedAttentionReference({.q = q.data(),
                                  .out = want.data(),
                                  .n_head = n_head,
                                  .n_head_kv = n_head_kv,
                                  .head_dim = head_dim,
                                  .kv = {.dtype = dtype,
                                         .base = DevicePtr<uint8_t>(pool.data()),
                                         .block_bytes = 2 * half_block,
                                         .k_offset = 0,
                                         .v_offset = half_block,
                                         .block_size = block_size,
                                         .kv_dim = kv_dim},
                                  .seqs = seqs});
    std::vector<int32_t> table, kv_len, offset;
    for (const AttentionSequence& s : seqs) {
      const int32_t at = static_cast<int32_t>(table.size());
      table.insert(table.end(), s.blocks.begin(), s.blocks.end());
      for (int32_t i = 0; i < s.n_rows; ++i) {
        kv_len.push_back(s.kv_start + i + 1);
        offset.push_back(at);
      }
    }
    DeviceBuffer dq = Up(q), dpool = Up(pool), dtable = Up(table), dlen = Up(kv_len),
                 doff = Up(offset);
    absl::StatusOr<DeviceBuffer> dout = DeviceBuffer::Allocate(q.size() * 4);
    ASSERT_TRUE(dout.ok());
    PagedAttentionArgs a;
    a.q = dq.as<float>();
    a.out = dout->as<float>();
    a.n_rows = rows;
    a.n_head = n_head;
    a.n_head_kv = n_head_kv;
    a.head_dim = head_dim;
    a.kv_base = dpool.as<uint8_t>();
    a.block_bytes = 2 * half_block;
    a.k_offset = 0;
    a.v_offset = half_block;
    a.block_size = block_size;
    a.kv_f16 = dtype == GgmlType::kF16;
    a.kv_len = dlen.as<int32_t>();
    a.table_offset = doff.as<int32_t>();
    a.block_table = dtable.as<int32_t>();
    ASSERT_EQ(LaunchPagedAttention(a, stream_->stream()), cudaSuccess);
    ExpectNear(Down<float>(*dout, q.size()), want, 1e-4f);
  }
}

// A batch for LaunchPagedAttention: sequences (kv_start, n_rows) in order,
// then pad_rows rows with kv_len 0 (as the backend pads graph buckets).
struct AttentionCase {
  GgmlType dtype = GgmlType::kF32;
  int32_t n_head = 4;
  int32_t n_head_kv = 2;
  int32_t head_dim = 64;
  int32_t block_size = 16;
  std::vector<std::pair<int32_t, int32_t>> seqs;
  int32_t pad_rows = 0;
  bool split = true;  // pass split_scratch
  TileMath tiles = TileMath::kF32;
  float tol = 1e-4f;
};

class PagedAttentionTest : public CudaKernelsTest {
 protected:
  void Check(const AttentionCase& c) {
    const AttentionBatch b = MakeAttentionBatch({.dtype = c.dtype,
                                                 .n_head = c.n_head,
                                                 .n_head_kv = c.n_head_kv,
                                                 .head_dim = c.head_dim,
                                                 .block_size = c.block_size,
                                                 .seqs = c.seqs,
                                                 .pad_rows = c.pad_rows},
                                                rng_);
    DeviceBuffer dq = Up(b.q), dpool = Up(b.pool), dtable = Up(b.table), dlen = Up(b.kv_len),
                 doff = Up(b.offset);
    // NaN where the kernel fails to write.
    const std::vector<float> poison(b.q.size(), std::nanf(""));
    DeviceBuffer dout = Up(poison);
    absl::StatusOr<DeviceBuffer> scratch =
        DeviceBuffer::Allocate(static_cast<size_t>(PagedAttentionScratchBytes()));
    ASSERT_TRUE(scratch.ok());
    ASSERT_EQ(cudaMemsetAsync(scratch->data(), 0, scratch->bytes(), stream_->stream()),
              cudaSuccess);
    PagedAttentionArgs a;
    a.q = dq.as<float>();
    a.out = dout.as<float>();
    a.n_rows = b.rows;
    a.n_head = c.n_head;
    a.n_head_kv = c.n_head_kv;
    a.head_dim = c.head_dim;
    a.kv_base = dpool.as<uint8_t>();
    a.block_bytes = b.block_bytes;
    a.k_offset = 0;
    a.v_offset = b.v_offset;
    a.block_size = c.block_size;
    a.kv_f16 = c.dtype == GgmlType::kF16;
    a.kv_len = dlen.as<int32_t>();
    a.table_offset = doff.as<int32_t>();
    a.block_table = dtable.as<int32_t>();
    a.split_scratch = c.split ? scratch->as<float>() : nullptr;
    a.tiles = c.tiles;
    const absl::StatusOr<DeviceInfo> info = GetDeviceInfo(0);
    ASSERT_TRUE(info.ok()) << info.status();
    a.shared_bytes_per_block = info->shared_bytes_per_block;
    // Every tensor-core layout fits an H100's 227 KiB a block, and those of
    // head_dim 64 fit any GPU the build targets (99 KiB and more): make sure
    // the tensor-core kernel is what ran there.
    if (c.tiles != TileMath::kF32 && (c.head_dim <= 64 || info->shared_bytes_per_block >= 232448)) {
      ASSERT_TRUE(TensorCoreTilesFit(a)) << info->shared_bytes_per_block << " bytes a block";
    }
    ASSERT_EQ(LaunchPagedAttention(a, stream_->stream()), cudaSuccess);
    ExpectNear(Down<float>(dout, b.q.size()), b.want, c.tol);
  }
};

TEST_F(PagedAttentionTest, LongPrefillChunk) {
  for (const GgmlType dtype : {GgmlType::kF32, GgmlType::kF16}) {
    SCOPED_TRACE(static_cast<int>(dtype));
    Check({.dtype = dtype, .n_head = 8, .n_head_kv = 2, .head_dim = 64, .seqs = {{50, 200}}});
  }
}

TEST_F(PagedAttentionTest, MixedSequencesAndPadRows) {
  // Runs that start and end inside tiles, decode rows between them, a run
  // of 3 (row kernel) and pad rows; head_dim 80 pads to the 128 tile.
  for (const GgmlType dtype : {GgmlType::kF32, GgmlType::kF16}) {
    SCOPED_TRACE(static_cast<int>(dtype));
    Check({.dtype = dtype,
           .n_head = 8,
           .n_head_kv = 8,
           .head_dim = 80,
           .block_size = 8,
           .seqs = {{10, 1}, {7, 37}, {100, 1}, {0, 3}, {20, 70}, {5, 1}, {0, 9}},
           .pad_rows = 6});
  }
}

TEST_F(PagedAttentionTest, Gqa32To8HeadDim128) {
  Check({.dtype = GgmlType::kF16,
         .n_head = 32,
         .n_head_kv = 8,
         .head_dim = 128,
         .seqs = {{0, 40}, {300, 1}, {33, 24}},
         .pad_rows = 3});
}

TEST_F(PagedAttentionTest, HeadDim256) {
  for (const GgmlType dtype : {GgmlType::kF32, GgmlType::kF16}) {
    SCOPED_TRACE(static_cast<int>(dtype));
    Check({.dtype = dtype,
           .n_head = 2,
           .n_head_kv = 1,
           .head_dim = 256,
           .seqs = {{5, 40}, {200, 1}, {0, 2}}});
  }
}

TEST_F(PagedAttentionTest, LongDecodeSplits) {
  // 8 rows x 32 heads: 4 splits; 8 rows again: 4. Pad rows (kv_len 0)
  // write zeros through the combine.
  for (const GgmlType dtype : {GgmlType::kF32, GgmlType::kF16}) {
    SCOPED_TRACE(static_cast<int>(dtype));
    Check({.dtype = dtype,
           .n_head = 32,
           .n_head_kv = 8,
           .head_dim = 64,
           .seqs = {{2999, 1}, {1500, 1}, {40, 1}, {0, 1}},
           .pad_rows = 4});
    // One decode row at offset 0 and a graph bucket's pad rows (offset 0
    // too): still a single row, split 32 ways.
    Check({.dtype = dtype,
           .n_head = 32,
           .n_head_kv = 8,
           .head_dim = 128,
           .seqs = {{2999, 1}},
           .pad_rows = 7});
    // A single row: 32 splits of 94 slots.
    Check({.dtype = dtype, .n_head = 32, .n_head_kv = 8, .head_dim = 64, .seqs = {{2999, 1}}});
    Check({.dtype = dtype,
           .n_head = 32,
           .n_head_kv = 8,
           .head_dim = 128,
           .seqs = {{2999, 1}, {100, 1}},
           .split = false});
  }
}

// The tensor-core tile kernels on the shapes above, for f32 and f16 KV.
// Split into f16 halves, they are held to the f32 kernel's 1e-4 (head_dim
// 256 split with f32 KV is the f32 kernel's where the device's shared memory
// is too small for it, TensorCoreTilesFit). Rounded to f16, to 5e-3
// (relative above 1): these inputs give scores of about unit spread, where
// f16's 2^-11 rounding of q, k, v and p moves an output by about 1e-3.
TEST_F(PagedAttentionTest, TensorCoreTilesMatchTheReference) {
  for (const auto& [tiles, tol] :
       {std::pair{TileMath::kSplitF16, 1e-4f}, std::pair{TileMath::kF16, 5e-3f}}) {
    for (const GgmlType dtype : {GgmlType::kF32, GgmlType::kF16}) {
      SCOPED_TRACE(static_cast<int>(dtype));
      SCOPED_TRACE(static_cast<int>(tiles));
      Check({.dtype = dtype,
             .n_head = 8,
             .n_head_kv = 2,
             .head_dim = 64,
             .seqs = {{50, 200}},
             .tiles = tiles,
             .tol = tol});
      // Runs starting and ending inside tiles, decode rows, a run of 3 (row
      // kernel), pad rows; head_dim 80 pads to the 128 tile.
      Check({.dtype = dtype,
             .n_head = 8,
             .n_head_kv = 8,
             .head_dim = 80,
             .block_size = 8,
             .seqs = {{10, 1}, {7, 37}, {100, 1}, {0, 3}, {20, 70}, {5, 1}, {0, 9}},
             .pad_rows = 6,
             .tiles = tiles,
             .tol = tol});
      Check({.dtype = dtype,
             .n_head = 32,
             .n_head_kv = 8,
             .head_dim = 128,
             .seqs = {{0, 40}, {300, 1}, {33, 24}, {1000, 65}},
             .pad_rows = 3,
             .tiles = tiles,
             .tol = tol});
      Check({.dtype = dtype,
             .n_head = 2,
             .n_head_kv = 1,
             .head_dim = 256,
             .seqs = {{5, 40}, {200, 1}, {0, 2}, {70, 33}},
             .tiles = tiles,
             .tol = tol});
      // head_dim 36: KV heads 72 bytes apart in f16, so the 16-byte loads
      // give way to single ones, and the last chunk of a row is partial.
      Check({.dtype = dtype,
             .n_head = 4,
             .n_head_kv = 2,
             .head_dim = 36,
             .block_size = 4,
             .seqs = {{3, 5}, {13, 1}, {0, 129}},
             .tiles = tiles,
             .tol = tol});
    }
  }
}

// The row plan, on the host: runs, split counts and chunks.
TEST(AttentionPlanTest, RunsSplitsAndChunks) {
  EXPECT_EQ(RunAround(0b0111'1000u, 4).begin, 3);
  EXPECT_EQ(RunAround(0b0111'1000u, 4).end, 7);
  EXPECT_EQ(RunAround(0xffffffffu, 31).begin, 0);
  EXPECT_EQ(RunAround(0xffffffffu, 0).end, 32);
  EXPECT_EQ(RunAround(0x1u, 0).end, 1);
  const int32_t keys[6] = {4, 4, -3, 9, 9, 9};
  EXPECT_EQ(RunAt(keys, 6, 1).begin, 0);
  EXPECT_EQ(RunAt(keys, 6, 1).end, 2);
  EXPECT_EQ(RunAt(keys, 6, 2).end, 3);
  EXPECT_EQ(RunAt(keys, 6, 3).end, 6);
  EXPECT_EQ(RunAt(keys, 5, 3).end, 5);  // the tile's rows end the run
  EXPECT_EQ(RunKey(7, 3, 12), 7);
  EXPECT_EQ(RunKey(0, 0, 12), -13);  // a pad row: alone
  EXPECT_EQ(SplitCount(kSplitTargetBlocks), 1);
  EXPECT_EQ(SplitCount(1), kMaxSplits);
  EXPECT_EQ(SplitCount(256), 4);
  for (int64_t blocks = 1; blocks < 2 * kSplitTargetBlocks; ++blocks) {
    const int32_t splits = SplitCount(blocks);
    ASSERT_GE(splits, 1);
    ASSERT_LE(blocks * (splits > 1 ? splits : 0), MaxSplitPartials());
  }
  for (const int32_t splits : {1, 2, 4, 7, 32}) {
    for (const int32_t n : {0, 1, 63, 64, 65, 200, 2999, 3000, 100000}) {
      // Splits [z c, (z + 1) c) clipped to n tile [0, n) in at most `splits`.
      const int32_t c = SplitChunk(n, splits);
      int32_t covered = 0;
      for (int32_t z = 0; z < splits; ++z) {
        const int32_t begin = std::min(n, z * c), end = std::min(n, begin + c);
        ASSERT_EQ(begin, std::min(n, covered));
        covered = std::max(covered, end);
      }
      ASSERT_EQ(covered, n) << splits << " " << n;
      // The used splits are exactly those holding a slot (one for n = 0).
      const int32_t used = UsedSplits(n, splits);
      ASSERT_GE(used, 1);
      ASSERT_LE(used, splits);
      if (n > 0) {
        ASSERT_LT((used - 1) * c, n) << splits << " " << n;
        ASSERT_GE(used * c, n) << splits << " " << n;
      }
    }
  }
  EXPECT_EQ(UsedSplits(64, 32), 1);
  EXPECT_EQ(UsedSplits(129, 32), 3);
  EXPECT_LE(PagedAttentionScratchBytes(), int64_t{4} << 20);
}

}  // namespace
}  // namespace tandem::engine::cuda
