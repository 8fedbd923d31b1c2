// Causal attention over the paged KV cache, for a batch that mixes prefill
// chunks and single decode tokens. CPU reference and production kernel; the
// forward pass calls it once per layer after the batch's keys and values are
// stored. Engine-thread only (parallel inside over sequences and KV heads).
#ifndef TANDEM_ENGINE_CPU_ATTENTION_H_
#define TANDEM_ENGINE_CPU_ATTENTION_H_

#include <cstdint>
#include <span>

#include "engine/block_pool.h"
#include "engine/kv_cache.h"

namespace tandem::engine::cpu {

// One sequence's rows of the batch: query rows [first_row, first_row + n_rows)
// sit at positions [start_pos, start_pos + n_rows) and attend to positions
// [0, their own]. `blocks` is the sequence's block table, covering at least
// start_pos + n_rows positions.
struct AttentionSequence {
  int32_t first_row = 0;
  int32_t n_rows = 0;
  int32_t start_pos = 0;
  std::span<const BlockId> blocks;
};

struct AttentionArgs {
  const float* q = nullptr;  // [n_tokens, n_head * head_dim], RoPE applied
  float* out = nullptr;      // [n_tokens, n_head * head_dim]
  int32_t n_head = 0;
  int32_t n_head_kv = 0;
  int32_t head_dim = 0;
  PagedKvView kv;
  std::span<const AttentionSequence> seqs;
  int threads = 1;
  // Use the AVX-512 kernel where the CPU and head_dim allow (tests turn it
  // off to check the portable kernel).
  bool use_avx512 = true;
};

// Softmax(q k^T / sqrt(head_dim)) v with online (streaming) softmax over the
// sequence's blocks, so no [rows, context] score matrix is materialized.
void PagedAttention(const AttentionArgs& args);

// Straightforward version for tests: materializes the scores.
void PagedAttentionReference(const AttentionArgs& args);

}  // namespace tandem::engine::cpu

#endif  // TANDEM_ENGINE_CPU_ATTENTION_H_
