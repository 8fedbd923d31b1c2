// Causal attention over the paged KV cache, for a batch that mixes prefill
// chunks and single decode tokens. CPU reference and production kernel; the
// forward pass calls it once per layer after the batch's keys and values are
// stored. Engine-thread only (parallel inside over sequences and KV heads).
#ifndef TANDEM_ENGINE_CPU_ATTENTION_H_
#define TANDEM_ENGINE_CPU_ATTENTION_H_

#include <cstdint>
#include <span>

#include "engine/model/backend.h"
#include "engine/cpu/kernels.h"

namespace tandem::engine::cpu {

// CPU-only knobs of the kernel.
struct CpuAttentionOptions {
  int threads = 1;
  // The highest instruction set the kernel may use (the backend's kernel
  // table): the AVX-512 or AVX2 kernel where the CPU and head_dim allow,
  // else portable code. Tests lower it to check each kernel.
  Isa isa = Isa::kAvx512;
};

// Softmax(q k^T / sqrt(head_dim)) v with online (streaming) softmax over the
// sequence's blocks, so no [rows, context] score matrix is materialized.
void PagedAttention(const AttentionArgs& args, const CpuAttentionOptions& options);

// Straightforward version for tests: materializes the scores.
void PagedAttentionReference(const AttentionArgs& args);

}  // namespace tandem::engine::cpu

#endif  // TANDEM_ENGINE_CPU_ATTENTION_H_
