// What the vectorized paged-attention kernels (attention_avx512.cc,
// attention_avx2.cc) share around their intrinsics: one (sequence, KV head)
// task's scratch layout, a query row's running softmax state, and the
// 16-key tiles they walk over the sequence's blocks. Internal to engine/cpu;
// header-only; no vector code (each kernel compiles its own).
#ifndef TANDEM_ENGINE_CPU_ATTENTION_TILE_H_
#define TANDEM_ENGINE_CPU_ATTENTION_TILE_H_

#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

#include "engine/model/backend.h"

namespace tandem::engine::cpu {

inline constexpr int kAttentionTile = 16;  // keys per tile

// The keys and values of one tile of one KV head, in place in the pool.
struct TileView {
  const uint8_t* k;   // first key row of the tile (this KV head's slice)
  const uint8_t* v;
  int64_t row_bytes;  // stride between slots
  int32_t n;          // keys in the tile
};

// The tile of `n` keys from position `start` of `seq`, KV head `g`.
inline TileView TileAt(const AttentionArgs& a, const AttentionSequence& seq, int32_t g,
                       int32_t start, int32_t n) {
  const int32_t bs = a.kv.block_size;
  const int64_t elem = GgmlBlockBytes(a.kv.dtype);
  const int64_t row_bytes = static_cast<int64_t>(a.kv.kv_dim) * elem;
  const uint8_t* block_base =
      a.kv.base.backend_address() + seq.blocks[start / bs] * a.kv.block_bytes;
  const int64_t off = (start % bs) * row_bytes + static_cast<int64_t>(g) * a.head_dim * elem;
  return {.k = block_base + a.kv.k_offset + off,
          .v = block_base + a.kv.v_offset + off,
          .row_bytes = row_bytes,
          .n = n};
}

// Keys in the tile that starts at `start`: up to the block's end, the tile
// size and the context.
inline int32_t TileKeys(int32_t block_size, int32_t start, int32_t n_ctx) {
  return std::min({block_size - start % block_size, kAttentionTile, n_ctx - start});
}

struct RowState {
  float max;
  float sum;
};

// A task's scratch: kt [head_dim][16] (a transposed key tile, 64-byte
// aligned) | acc [rows][head_dim] (zeroed) | state [rows] (reset).
struct GroupScratch {
  float* kt;
  float* acc;
  RowState* state;
};

inline GroupScratch PrepareGroupScratch(std::vector<float>& scratch, int32_t head_dim,
                                        int32_t rows) {
  scratch.resize(static_cast<size_t>(head_dim) * kAttentionTile +
                 static_cast<size_t>(rows) * (head_dim + 2) + 16);
  GroupScratch s;
  s.kt = reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(scratch.data()) + 63) &
                                  ~uintptr_t{63});
  s.acc = s.kt + head_dim * kAttentionTile;
  s.state = reinterpret_cast<RowState*>(s.acc + static_cast<size_t>(rows) * head_dim);
  std::fill(s.acc, s.acc + static_cast<size_t>(rows) * head_dim, 0.0f);
  for (int32_t i = 0; i < rows; ++i) s.state[i] = {-std::numeric_limits<float>::infinity(), 0.0f};
  return s;
}

}  // namespace tandem::engine::cpu

#endif  // TANDEM_ENGINE_CPU_ATTENTION_TILE_H_
