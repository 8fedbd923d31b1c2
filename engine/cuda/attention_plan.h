// How LaunchPagedAttention (attention.cu) shares rows between its tile and
// row kernels and cuts long rows into splits: plain arithmetic that host and
// device both run, kept apart so a host test checks it without a GPU.
// Header-only, stateless.
#ifndef TANDEM_ENGINE_CUDA_ATTENTION_PLAN_H_
#define TANDEM_ENGINE_CUDA_ATTENTION_PLAN_H_

#include <cstdint>

#if defined(__CUDACC__)
#define TANDEM_HOST_DEVICE __host__ __device__
#else
#define TANDEM_HOST_DEVICE
#endif

namespace tandem::engine::cuda {

// The tile kernel's block takes kTileRows consecutive rows (one lane each
// when the row kernel checks a tile with a ballot, hence 32).
inline constexpr int kTileRows = 32;
// A run of at least this many rows sharing a table offset goes to the tile
// kernel; shorter runs (decode tokens, a chunk's first rows at a tile's end)
// to the row kernel, where one row costs one row, not a tile's worth.
inline constexpr int kMinTileRun = 4;

// Row kernel blocks wanted on the GPU at once (an H100's 132 SMs hold 16
// such 128-thread blocks each): below it, rows are split. A constant rather
// than the device's SM count so results do not depend on the GPU.
inline constexpr int64_t kSplitTargetBlocks = 1024;
inline constexpr int32_t kMaxSplits = 32;
// A split shorter than this would spend more on its partial than it saves.
inline constexpr int32_t kMinSplitSlots = 64;

// What rows of one run share: their table offset, unless the row attends to
// nothing (a pad row, kv_len 0), which gets a key of its own so it never
// joins a run (a decode row at offset 0 followed by a graph bucket's pad rows
// stays a single row, free to split).
TANDEM_HOST_DEVICE constexpr int32_t RunKey(int32_t table_offset, int32_t kv_len, int32_t row) {
  return kv_len > 0 ? table_offset : -1 - row;
}

// [begin, end) of the maximal run of set bits of `same` that holds bit `at`
// (which is set).
struct Run {
  int begin;
  int end;
};
TANDEM_HOST_DEVICE constexpr Run RunAround(uint32_t same, int at) {
  Run run{at, at + 1};
  while (run.begin > 0 && ((same >> (run.begin - 1)) & 1u) != 0) --run.begin;
  while (run.end < 32 && ((same >> run.end) & 1u) != 0) ++run.end;
  return run;
}

// The run of rows sharing row `at`'s RunKey among a tile's first `n` (<= 32)
// rows, whose RunKeys are `keys` (the tile kernels' shared memory).
TANDEM_HOST_DEVICE constexpr Run RunAt(const int32_t* keys, int n, int at) {
  uint32_t same = 0;
  for (int i = 0; i < n; ++i) same |= static_cast<uint32_t>(keys[i] == keys[at]) << i;
  return RunAround(same, at);
}

// Splits per row for rows * heads = `blocks` row-kernel blocks: one when
// they fill the GPU, else enough to reach kSplitTargetBlocks (capped). Fixed
// by the launch's n_rows and n_head, so a captured graph stays valid for
// any kv_len.
TANDEM_HOST_DEVICE constexpr int32_t SplitCount(int64_t blocks) {
  if (blocks <= 0 || blocks >= kSplitTargetBlocks) return 1;
  const int64_t want = (kSplitTargetBlocks + blocks - 1) / blocks;
  return static_cast<int32_t>(want < kMaxSplits ? want : kMaxSplits);
}

// Slots per split of a row with kv_len `n`: split z takes [z c, (z + 1) c)
// clipped to n, so short rows use fewer splits and the rest are empty.
TANDEM_HOST_DEVICE constexpr int32_t SplitChunk(int32_t n, int32_t splits) {
  if (splits <= 1) return n;
  const int32_t even = (n + splits - 1) / splits;
  return even > kMinSplitSlots ? even : kMinSplitSlots;
}

// How many of a row's `splits` hold slots: ceil(n / SplitChunk), at least 1
// (a row of no slots runs as one split that writes zeros). One used split
// writes the output itself; more leave partials for the combine.
TANDEM_HOST_DEVICE constexpr int32_t UsedSplits(int32_t n, int32_t splits) {
  if (splits <= 1 || n <= 0) return 1;
  const int32_t chunk = SplitChunk(n, splits);
  return (n + chunk - 1) / chunk;
}

// The most (row, head, split) partials any launch writes: blocks * splits
// over every blocks < kSplitTargetBlocks (at least blocks never split).
constexpr int64_t MaxSplitPartials() {
  int64_t most = 0;
  for (int64_t blocks = 1; blocks < kSplitTargetBlocks; ++blocks) {
    const int64_t n = blocks * SplitCount(blocks);
    if (n > most) most = n;
  }
  return most;
}

}  // namespace tandem::engine::cuda

#endif  // TANDEM_ENGINE_CUDA_ATTENTION_PLAN_H_
