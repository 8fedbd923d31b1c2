// A paged-attention batch for the tests of the GPU kernels and of their
// emulation (cuda_kernels_test.cc, emulated_attention_test.cc): sequences
// over shuffled blocks of a KV pool, then pad rows, with seeded random
// queries, keys and values, the arguments LaunchPagedAttention takes (host
// memory; the GPU test copies them up) and the f32 CPU reference's output.
// Plain C++: no CUDA header.
#ifndef TANDEM_TESTS_ENGINE_CUDA_ATTENTION_BATCH_H_
#define TANDEM_TESTS_ENGINE_CUDA_ATTENTION_BATCH_H_

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <span>
#include <utility>
#include <vector>

#include "engine/cpu/attention.h"
#include "engine/gguf/tensor_type.h"
#include "engine/model/backend.h"

namespace tandem::engine::cuda {

struct AttentionShape {
  GgmlType dtype = GgmlType::kF32;  // the KV pool's
  int32_t n_head = 4;
  int32_t n_head_kv = 2;
  int32_t head_dim = 64;
  int32_t block_size = 16;
  std::vector<std::pair<int32_t, int32_t>> seqs;  // (kv_start, rows), in order
  int32_t pad_rows = 0;                           // kv_len 0, as graph buckets pad
  float q_scale = 1.0f;                           // queries' range a multiple of [-2, 2]
  float kv_scale = 1.0f;                          // keys' and values', of [-1.5, 1.5]
};

struct AttentionBatch {
  std::vector<uint8_t> pool;  // blocks of [keys | values]
  int64_t block_bytes = 0;
  int64_t v_offset = 0;
  std::vector<int32_t> table, kv_len, offset;  // block_table, kv_len, table_offset
  std::vector<float> q;
  std::vector<float> want;  // the CPU's output; pad rows 0
  int32_t rows = 0;
  int64_t width = 0;  // floats a row: n_head * head_dim
};

// Keys and values uniform in [-1.5, 1.5] kv_scale, queries in [-2, 2] q_scale.
inline AttentionBatch MakeAttentionBatch(const AttentionShape& c, std::mt19937& rng) {
  AttentionBatch b;
  const int32_t kv_dim = c.n_head_kv * c.head_dim;
  const int64_t elem = c.dtype == GgmlType::kF16 ? 2 : 4;
  b.v_offset = int64_t{c.block_size} * kv_dim * elem;
  b.block_bytes = 2 * b.v_offset;
  int32_t n_blocks = 0;
  b.rows = c.pad_rows;
  for (const auto& [kv_start, n] : c.seqs) {
    n_blocks += (kv_start + n + c.block_size - 1) / c.block_size;
    b.rows += n;
  }
  // Blocks in a shuffled order, so a table is not the identity.
  std::vector<BlockId> ids(n_blocks);
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  b.pool.assign(n_blocks * b.block_bytes, 0);
  std::uniform_real_distribution<float> kv_value(-1.5f * c.kv_scale, 1.5f * c.kv_scale);
  for (size_t i = 0; i < b.pool.size() / elem; ++i) {
    const float v = kv_value(rng);
    if (c.dtype == GgmlType::kF16) {
      reinterpret_cast<uint16_t*>(b.pool.data())[i] = Fp32ToFp16(v);
    } else {
      reinterpret_cast<float*>(b.pool.data())[i] = v;
    }
  }
  std::vector<AttentionSequence> seqs;
  int32_t row = 0;
  for (const auto& [kv_start, n] : c.seqs) {
    const int32_t at = static_cast<int32_t>(b.table.size());
    const int32_t blocks = (kv_start + n + c.block_size - 1) / c.block_size;
    b.table.insert(b.table.end(), ids.begin() + at, ids.begin() + at + blocks);
    for (int32_t i = 0; i < n; ++i) {
      b.kv_len.push_back(kv_start + i + 1);
      b.offset.push_back(at);
    }
    seqs.push_back({.first_row = row, .n_rows = n, .kv_start = kv_start, .blocks = {}});
    row += n;
  }
  for (AttentionSequence& s : seqs) {
    s.blocks = std::span<const BlockId>(b.table).subspan(b.offset[s.first_row]);
  }
  b.kv_len.resize(b.rows, 0);
  b.offset.resize(b.rows, 0);
  b.width = int64_t{c.n_head} * c.head_dim;
  std::uniform_real_distribution<float> q_value(-2.0f * c.q_scale, 2.0f * c.q_scale);
  b.q.resize(b.rows * b.width);
  for (float& v : b.q) v = q_value(rng);
  b.want.assign(b.q.size(), 0.0f);
  cpu::PagedAttentionReference({.q = b.q.data(),
                                .out = b.want.data(),
                                .n_head = c.n_head,
                                .n_head_kv = c.n_head_kv,
                                .head_dim = c.head_dim,
                                .kv = {.dtype = c.dtype,
                                       .base = DevicePtr<uint8_t>(b.pool.data()),
                                       .block_bytes = b.block_bytes,
                                       .k_offset = 0,
                                       .v_offset = b.v_offset,
                                       .block_size = c.block_size,
                                       .kv_dim = kv_dim},
                                .seqs = seqs});
  return b;
}

}  // namespace tandem::engine::cuda

#endif  // TANDEM_TESTS_ENGINE_CUDA_ATTENTION_BATCH_H_
