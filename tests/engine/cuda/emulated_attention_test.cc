// Paged attention's kernels (engine/cuda/attention.cu, attention_f16.cu),
// their own source run on the CPU under the CUDA emulation (emulation/),
// against the f32 CPU reference. The tensor-core tile kernels alone: the
// rows they own (runs of kMinTileRun or more inside a tile), and only
// those, written; split f16 within the f32 kernel's 1e-4, plain f16 within
// f16's rounding. The whole launch (tiles, rows split over long contexts and
// their combine): every row. In every build: no GPU or nvcc needed. What the
// emulation cannot show (the tensor cores' own arithmetic, timing) the GPU
// tests do (cuda_kernels_test.cc).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "engine/cuda/attention_plan.h"
#include "tests/engine/cuda/attention_batch.h"
#include "tests/engine/cuda/emulation/emulated_kernels.h"

namespace tandem::engine::cuda {
namespace {

constexpr int64_t kA100SharedBytes = 166912;
constexpr int64_t kH100SharedBytes = 232448;
constexpr int64_t kL4SharedBytes = 101376;  // compute capability 8.6 and 8.9

// Whether the tile kernels own each row: the runs of RunKey (a sequence's
// rows, a pad row alone) of kMinTileRun or more inside its 32-row tile.
std::vector<bool> TileRows(const std::vector<int32_t>& offset, const std::vector<int32_t>& len) {
  const int32_t n = static_cast<int32_t>(offset.size());
  std::vector<bool> owned(n, false);
  for (int32_t t0 = 0; t0 < n; t0 += kTileRows) {
    const int rows = std::min(kTileRows, n - t0);
    int32_t keys[kTileRows];
    for (int i = 0; i < rows; ++i) keys[i] = RunKey(offset[t0 + i], len[t0 + i], t0 + i);
    for (int i = 0; i < rows; ++i) {
      const Run run = RunAt(keys, rows, i);
      owned[t0 + i] = run.end - run.begin >= kMinTileRun;
    }
  }
  return owned;
}

class EmulatedAttentionTest : public ::testing::Test {
 protected:
  // The emulated kernels' arguments for `b`, out unset.
  static emulation::AttentionArgs Args(const AttentionShape& c, const AttentionBatch& b) {
    emulation::AttentionArgs a;
    a.q = b.q.data();
    a.n_rows = b.rows;
    a.n_head = c.n_head;
    a.n_head_kv = c.n_head_kv;
    a.head_dim = c.head_dim;
    a.kv_base = b.pool.data();
    a.block_bytes = b.block_bytes;
    a.k_offset = 0;
    a.v_offset = b.v_offset;
    a.block_size = c.block_size;
    a.kv_f16 = c.dtype == GgmlType::kF16;
    a.kv_len = b.kv_len.data();
    a.table_offset = b.offset.data();
    a.block_table = b.table.data();
    return a;
  }

  // The tensor-core tile kernels alone on `c`, in both precisions, on a
  // device of `shared_bytes` a block; `split_fits`: whether split f16 is
  // expected to fit it (else nothing runs).
  void CheckTiles(const AttentionShape& c, int64_t shared_bytes = kA100SharedBytes,
                  bool split_fits = true) {
    const AttentionBatch b = MakeAttentionBatch(c, rng_);
    const std::vector<bool> owned = TileRows(b.offset, b.kv_len);
    ASSERT_GT(std::count(owned.begin(), owned.end(), true), 0) << "no tile rows to check";
    for (const emulation::Tiles tiles : {emulation::Tiles::kSplitF16, emulation::Tiles::kF16}) {
      const bool split = tiles == emulation::Tiles::kSplitF16;
      SCOPED_TRACE(split ? "split f16" : "f16");
      std::vector<float> got(b.q.size(), std::nanf(""));
      emulation::AttentionArgs a = Args(c, b);
      a.out = got.data();
      a.tiles = tiles;
      a.shared_bytes_per_block = shared_bytes;
      const emulation::TileRun run = emulation::RunTensorCoreTiles(a);
      ASSERT_EQ(run.fit, split ? split_fits : true);
      if (!run.fit) continue;
      ASSERT_EQ(run.error, 0);
      const float tol = split ? 1e-4f : 5e-3f;
      for (int32_t r = 0; r < b.rows; ++r) {
        for (int64_t i = r * b.width; i < (r + 1) * b.width; ++i) {
          if (!owned[r]) {
            ASSERT_TRUE(std::isnan(got[i])) << "row " << r << " is the row kernel's";
            continue;
          }
          ASSERT_NEAR(got[i], b.want[i], tol * std::max(1.0f, std::abs(b.want[i])))
              << "row " << r << ", element " << i - r * b.width;
        }
      }
    }
  }

  // LaunchPagedAttention on `b` with `tiles` and `scratch` as its split
  // scratch: every row (NaN where it wrote nothing).
  std::vector<float> Launch(const AttentionShape& c, const AttentionBatch& b,
                            emulation::Tiles tiles, int64_t shared_bytes,
                            std::vector<float>& scratch) {
    std::vector<float> got(b.q.size(), std::nanf(""));
    scratch.assign(emulation::PagedAttentionScratchBytes() / sizeof(float), 0.0f);
    emulation::AttentionArgs a = Args(c, b);
    a.out = got.data();
    a.split_scratch = scratch.data();
    a.tiles = tiles;
    a.shared_bytes_per_block = shared_bytes;
    EXPECT_EQ(emulation::RunPagedAttention(a), 0);
    return got;
  }

  // Launch on `c`: every row.
  void CheckLaunch(const AttentionShape& c, emulation::Tiles tiles, int64_t shared_bytes,
                   float tol) {
    const AttentionBatch b = MakeAttentionBatch(c, rng_);
    std::vector<float> scratch;
    const std::vector<float> got = Launch(c, b, tiles, shared_bytes, scratch);
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_NEAR(got[i], b.want[i], tol * std::max(1.0f, std::abs(b.want[i])))
          << "row " << i / b.width << ", element " << i % b.width;
    }
    // The splits' counts, at the scratch's end, are left at 0 for the next
    // launch, as they were found.
    const auto* counts = reinterpret_cast<const uint32_t*>(scratch.data() + scratch.size()) -
                         kSplitTargetBlocks;
    for (int64_t i = 0; i < kSplitTargetBlocks; ++i) ASSERT_EQ(counts[i], 0u) << "count " << i;
  }

  std::mt19937 rng_{11};
};

TEST_F(EmulatedAttentionTest, APrefillChunkOverSeveralKeyTiles) {
  for (const GgmlType dtype : {GgmlType::kF32, GgmlType::kF16}) {
    SCOPED_TRACE(static_cast<int>(dtype));
    CheckTiles({.dtype = dtype, .n_head = 4, .n_head_kv = 2, .head_dim = 64, .seqs = {{50, 100}}});
  }
}

TEST_F(EmulatedAttentionTest, RunsInsideTilesDecodeRowsAndPadRows) {
  // Runs that start and end inside tiles, decode rows between them, a run
  // of 3 (the row kernel's), pad rows; head_dim 80 pads to the 128 tile,
  // past the 48 KiB a block gets without opting in.
  for (const GgmlType dtype : {GgmlType::kF32, GgmlType::kF16}) {
    SCOPED_TRACE(static_cast<int>(dtype));
    CheckTiles({.dtype = dtype,
                .n_head = 2,
                .n_head_kv = 2,
                .head_dim = 80,
                .block_size = 8,
                .seqs = {{10, 1}, {7, 37}, {100, 1}, {0, 3}, {20, 70}, {5, 1}, {0, 9}},
                .pad_rows = 6});
  }
}

TEST_F(EmulatedAttentionTest, UnalignedHeadsAndAPartialLastChunk) {
  // head_dim 36: KV heads 72 bytes apart in f16 (single loads, not 16-byte
  // ones) and a last chunk of 4 dimensions; grouped-query heads.
  for (const GgmlType dtype : {GgmlType::kF32, GgmlType::kF16}) {
    SCOPED_TRACE(static_cast<int>(dtype));
    CheckTiles({.dtype = dtype,
                .n_head = 4,
                .n_head_kv = 2,
                .head_dim = 36,
                .block_size = 4,
                .seqs = {{3, 5}, {13, 1}, {0, 69}}});
  }
}

TEST_F(EmulatedAttentionTest, HeadDim256FitsWhereTheSharedMemoryAllows) {
  // Split with f32 KV, head_dim 256 takes about 220 KiB: past an A100's
  // 163 (the f32 kernel's then), within an H100's 227.
  const AttentionShape f32{
      .dtype = GgmlType::kF32, .n_head = 2, .n_head_kv = 1, .head_dim = 256, .seqs = {{5, 40}}};
  CheckTiles(f32, kA100SharedBytes, /*split_fits=*/false);
  CheckTiles(f32, kH100SharedBytes);
  CheckTiles(
      {.dtype = GgmlType::kF16, .n_head = 2, .n_head_kv = 1, .head_dim = 256, .seqs = {{70, 33}}},
      kA100SharedBytes);
}

// The whole launch: prefill runs to the tile kernel (f32 or tensor cores),
// decode rows to the row kernel, long ones split over the context and
// combined, a run of 3 and pad rows to the row kernel too.
TEST_F(EmulatedAttentionTest, TheWholeLaunchMatchesTheReference) {
  for (const GgmlType dtype : {GgmlType::kF32, GgmlType::kF16}) {
    SCOPED_TRACE(static_cast<int>(dtype));
    const AttentionShape c{.dtype = dtype,
                           .n_head = 4,
                           .n_head_kv = 2,
                           .head_dim = 64,
                           .block_size = 8,
                           .seqs = {{300, 1}, {7, 37}, {0, 3}, {100, 1}},
                           .pad_rows = 3};
    CheckLaunch(c, emulation::Tiles::kF32, kA100SharedBytes, 1e-4f);
    CheckLaunch(c, emulation::Tiles::kSplitF16, kA100SharedBytes, 1e-4f);
    CheckLaunch(c, emulation::Tiles::kF16, kA100SharedBytes, 5e-3f);
  }
}

// head_dim 256 on a GPU of 99 KiB a block (compute capability 8.6, 8.9):
// the f32 tile kernel fits there, and takes the tiles that split f16 with
// f32 KV cannot.
TEST_F(EmulatedAttentionTest, HeadDim256RunsInNinetyNineKiB) {
  const AttentionShape c{.dtype = GgmlType::kF32,
                         .n_head = 2,
                         .n_head_kv = 1,
                         .head_dim = 256,
                         .seqs = {{5, 40}, {90, 1}}};
  CheckLaunch(c, emulation::Tiles::kF32, kL4SharedBytes, 1e-4f);
  CheckLaunch(c, emulation::Tiles::kSplitF16, kL4SharedBytes, 1e-4f);
}

// Split f16 as accurate as the f32 kernel wherever the values lie: small
// queries, keys and values (whose low halves, unscaled, fall below f16's
// normal range), large ones (scores far apart, so that exp magnifies a
// score's error), with f32 and f16 KV. Each kernel's largest error against
// the reference, relative to the values' scale; split f16's at most 3x the
// f32 kernel's (unscaled low halves parted by 8-25x on small values).
TEST_F(EmulatedAttentionTest, SplitF16IsAsAccurateAsF32AtEveryScale) {
  for (const GgmlType dtype : {GgmlType::kF32, GgmlType::kF16}) {
    for (const auto& [q_scale, kv_scale] :
         {std::pair{0.01f, 0.01f}, std::pair{1.0f, 0.01f}, std::pair{0.01f, 10.0f},
          std::pair{10.0f, 10.0f}, std::pair{30.0f, 1.0f}}) {
      SCOPED_TRACE(std::to_string(static_cast<int>(dtype)) + " q x" + std::to_string(q_scale) +
                   " kv x" + std::to_string(kv_scale));
      const AttentionShape c{.dtype = dtype,
                             .n_head = 2,
                             .n_head_kv = 1,
                             .head_dim = 64,
                             .seqs = {{0, 200}},
                             .q_scale = q_scale,
                             .kv_scale = kv_scale};
      const AttentionBatch b = MakeAttentionBatch(c, rng_);
      double error[2] = {0.0, 0.0};
      for (const emulation::Tiles tiles : {emulation::Tiles::kF32, emulation::Tiles::kSplitF16}) {
        std::vector<float> scratch;
        const std::vector<float> got = Launch(c, b, tiles, kA100SharedBytes, scratch);
        double& e = error[tiles == emulation::Tiles::kSplitF16];
        for (size_t i = 0; i < got.size(); ++i) {
          e = std::max(e, std::abs(static_cast<double>(got[i]) - b.want[i]) /
                              std::max(kv_scale, std::abs(b.want[i])));
        }
      }
      EXPECT_LE(error[1], 3 * error[0]) << "split f16 " << error[1] << ", f32 " << error[0];
    }
  }
}

}  // namespace
}  // namespace tandem::engine::cuda
