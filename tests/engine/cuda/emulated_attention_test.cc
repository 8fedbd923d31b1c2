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
#include <numeric>
#include <random>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "engine/cpu/attention.h"
#include "engine/cuda/attention_plan.h"
#include "engine/gguf/tensor_type.h"
#include "engine/model/backend.h"
#include "tests/engine/cuda/emulation/emulated_kernels.h"

namespace tandem::engine::cuda {
namespace {

constexpr int64_t kA100SharedBytes = 166912;
constexpr int64_t kH100SharedBytes = 232448;
constexpr int64_t kL4SharedBytes = 101376;  // compute capability 8.6 and 8.9

struct Case {
  GgmlType dtype = GgmlType::kF32;
  int32_t n_head = 2;
  int32_t n_head_kv = 1;
  int32_t head_dim = 64;
  int32_t block_size = 16;
  std::vector<std::pair<int32_t, int32_t>> seqs;  // (kv_start, rows)
  int32_t pad_rows = 0;
};

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

// A batch's inputs, the CPU's output and the arguments that point at them.
struct Batch {
  std::vector<uint8_t> pool;
  std::vector<int32_t> table, kv_len, offset;
  std::vector<float> q, want;
  emulation::AttentionArgs args;
  int32_t rows = 0;
  int64_t width = 0;  // floats a row
};

class EmulatedAttentionTest : public ::testing::Test {
 protected:
  void Build(const Case& c, Batch& b) {
    const int32_t kv_dim = c.n_head_kv * c.head_dim;
    const int64_t elem = c.dtype == GgmlType::kF16 ? 2 : 4;
    const int64_t half_block = int64_t{c.block_size} * kv_dim * elem;
    int32_t n_blocks = 0, rows = c.pad_rows;
    for (const auto& [kv_start, n] : c.seqs) {
      n_blocks += (kv_start + n + c.block_size - 1) / c.block_size;
      rows += n;
    }
    std::vector<BlockId> ids(n_blocks);
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), rng_);
    std::vector<uint8_t>& pool = b.pool;
    pool.assign(n_blocks * 2 * half_block, 0);
    std::uniform_real_distribution<float> kv_value(-1.5f, 1.5f);
    for (size_t i = 0; i < pool.size() / elem; ++i) {
      const float v = kv_value(rng_);
      if (c.dtype == GgmlType::kF16) {
        reinterpret_cast<uint16_t*>(pool.data())[i] = Fp32ToFp16(v);
      } else {
        reinterpret_cast<float*>(pool.data())[i] = v;
      }
    }
    std::vector<AttentionSequence> seqs;
    std::vector<int32_t>&table = b.table, &kv_len = b.kv_len, &offset = b.offset;
    int32_t row = 0;
    for (const auto& [kv_start, n] : c.seqs) {
      const int32_t at = static_cast<int32_t>(table.size());
      const int32_t blocks = (kv_start + n + c.block_size - 1) / c.block_size;
      table.insert(table.end(), ids.begin() + at, ids.begin() + at + blocks);
      for (int32_t i = 0; i < n; ++i) {
        kv_len.push_back(kv_start + i + 1);
        offset.push_back(at);
      }
      seqs.push_back({.first_row = row, .n_rows = n, .kv_start = kv_start, .blocks = {}});
      row += n;
    }
    for (AttentionSequence& s : seqs) {
      s.blocks = std::span<const BlockId>(table).subspan(offset[s.first_row]);
    }
    kv_len.resize(rows, 0);
    offset.resize(rows, 0);
    std::uniform_real_distribution<float> q_value(-2.0f, 2.0f);
    std::vector<float>& q = b.q;
    q.resize(int64_t{rows} * c.n_head * c.head_dim);
    for (float& v : q) v = q_value(rng_);
    std::vector<float>& want = b.want;
    want.assign(q.size(), 0.0f);
    cpu::PagedAttentionReference({.q = q.data(),
                                  .out = want.data(),
                                  .n_head = c.n_head,
                                  .n_head_kv = c.n_head_kv,
                                  .head_dim = c.head_dim,
                                  .kv = {.dtype = c.dtype,
                                         .base = DevicePtr<uint8_t>(pool.data()),
                                         .block_bytes = 2 * half_block,
                                         .k_offset = 0,
                                         .v_offset = half_block,
                                         .block_size = c.block_size,
                                         .kv_dim = kv_dim},
                                  .seqs = seqs});
    b.rows = rows;
    b.width = int64_t{c.n_head} * c.head_dim;
    emulation::AttentionArgs& a = b.args;
    a.q = q.data();
    a.n_rows = rows;
    a.n_head = c.n_head;
    a.n_head_kv = c.n_head_kv;
    a.head_dim = c.head_dim;
    a.kv_base = pool.data();
    a.block_bytes = 2 * half_block;
    a.k_offset = 0;
    a.v_offset = half_block;
    a.block_size = c.block_size;
    a.kv_f16 = c.dtype == GgmlType::kF16;
    a.kv_len = kv_len.data();
    a.table_offset = offset.data();
    a.block_table = table.data();
  }

  // The tensor-core tile kernels alone on `c`, in both precisions, on a
  // device of `shared_bytes` a block; `split_fits`: whether split f16 is
  // expected to fit it (else nothing runs).
  void CheckTiles(const Case& c, int64_t shared_bytes = kA100SharedBytes, bool split_fits = true) {
    Batch b;
    Build(c, b);
    const std::vector<bool> owned = TileRows(b.offset, b.kv_len);
    ASSERT_GT(std::count(owned.begin(), owned.end(), true), 0) << "no tile rows to check";
    for (const emulation::Tiles tiles : {emulation::Tiles::kSplitF16, emulation::Tiles::kF16}) {
      const bool split = tiles == emulation::Tiles::kSplitF16;
      SCOPED_TRACE(split ? "split f16" : "f16");
      std::vector<float> got(b.q.size(), std::nanf(""));
      emulation::AttentionArgs a = b.args;
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

  // LaunchPagedAttention on `c` with `tiles`, split scratch given: every row.
  void CheckLaunch(const Case& c, emulation::Tiles tiles, int64_t shared_bytes, float tol) {
    Batch b;
    Build(c, b);
    std::vector<float> got(b.q.size(), std::nanf(""));
    std::vector<float> scratch(emulation::PagedAttentionScratchBytes() / sizeof(float));
    emulation::AttentionArgs a = b.args;
    a.out = got.data();
    a.split_scratch = scratch.data();
    a.tiles = tiles;
    a.shared_bytes_per_block = shared_bytes;
    ASSERT_EQ(emulation::RunPagedAttention(a), 0);
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_NEAR(got[i], b.want[i], tol * std::max(1.0f, std::abs(b.want[i])))
          << "row " << i / b.width << ", element " << i % b.width;
    }
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
  CheckTiles({.dtype = GgmlType::kF32, .head_dim = 256, .seqs = {{5, 40}}}, kA100SharedBytes,
             /*split_fits=*/false);
  CheckTiles({.dtype = GgmlType::kF32, .head_dim = 256, .seqs = {{5, 40}}}, kH100SharedBytes);
  CheckTiles({.dtype = GgmlType::kF16, .head_dim = 256, .seqs = {{70, 33}}}, kA100SharedBytes);
}

// The whole launch: prefill runs to the tile kernel (f32 or tensor cores),
// decode rows to the row kernel, long ones split over the context and
// combined, a run of 3 and pad rows to the row kernel too.
TEST_F(EmulatedAttentionTest, TheWholeLaunchMatchesTheReference) {
  for (const GgmlType dtype : {GgmlType::kF32, GgmlType::kF16}) {
    SCOPED_TRACE(static_cast<int>(dtype));
    const Case c{.dtype = dtype,
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
  const Case c{.dtype = GgmlType::kF32, .head_dim = 256, .seqs = {{5, 40}, {90, 1}}};
  CheckLaunch(c, emulation::Tiles::kF32, kL4SharedBytes, 1e-4f);
  CheckLaunch(c, emulation::Tiles::kSplitF16, kL4SharedBytes, 1e-4f);
}

}  // namespace
}  // namespace tandem::engine::cuda
