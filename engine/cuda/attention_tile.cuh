// What the paged-attention tile kernels share (attention.cu's f32 one and
// attention_f16.cu's tensor-core ones): reading a tile's rows and their
// runs, and where a run's key slots are. Device code; nvcc only.
#ifndef TANDEM_ENGINE_CUDA_ATTENTION_TILE_CUH_
#define TANDEM_ENGINE_CUDA_ATTENTION_TILE_CUH_

#include <cstdint>

#include "engine/cuda/attention_plan.h"
#include "engine/cuda/kernels.h"

namespace tandem::engine::cuda {

// Rows [t0, t0 + tile_rows)'s kv_len, table_offset and RunKey into shared
// arrays of kTileRows (length 0 past tile_rows), by the block's first
// kTileRows threads; then, after a barrier, whether any run of them is
// long enough for the tile kernel. Every thread walks the same runs, so an
// exit on the answer is uniform over the block, and so are loops over the
// runs (a __syncthreads inside them is safe).
__device__ inline bool ReadTileRows(const PagedAttentionArgs& a, int32_t t0, int tile_rows,
                                    int32_t* len_s, int32_t* offset_s, int32_t* key_s) {
  const int tid = static_cast<int>(threadIdx.x);
  if (tid < kTileRows) {
    len_s[tid] = tid < tile_rows ? a.kv_len[t0 + tid] : 0;
    offset_s[tid] = tid < tile_rows ? a.table_offset[t0 + tid] : 0;
    key_s[tid] = RunKey(offset_s[tid], len_s[tid], t0 + tid);
  }
  __syncthreads();
  bool any = false;
  for (int at = 0; at < tile_rows;) {
    const Run run = RunAt(key_s, tile_rows, at);
    any |= run.end - run.begin >= kMinTileRun;
    at = run.end;
  }
  return any;
}

// The most slots any row of `run` sees.
__device__ inline int32_t RunLength(const int32_t* len_s, Run run) {
  int32_t n = 0;
  for (int r = run.begin; r < run.end; ++r) n = n > len_s[r] ? n : len_s[r];
  return n;
}

// Slot s's key row for KV head g, as a byte offset from kv_base (values at
// the same offset from v_offset), for a run whose blocks are `blocks`; -1
// at and past run_len.
__device__ inline int64_t KeyRowAt(const PagedAttentionArgs& a, const int32_t* blocks, int32_t s,
                                   int32_t run_len, int32_t g) {
  if (s >= run_len) return -1;
  const int64_t elem = a.kv_f16 ? 2 : 4;
  return static_cast<int64_t>(blocks[s / a.block_size]) * a.block_bytes +
         (s % a.block_size) * (int64_t{a.n_head_kv} * a.head_dim * elem) + g * a.head_dim * elem;
}

}  // namespace tandem::engine::cuda

#endif  // TANDEM_ENGINE_CUDA_ATTENTION_TILE_CUH_
