// AttentionArgs (emulated_kernels.h) as the emulated kernels' own
// PagedAttentionArgs, for the translation units that compile them: include
// after the emulation's CUDA headers, before the kernel's source.
#ifndef TANDEM_TESTS_ENGINE_CUDA_EMULATION_EMULATED_ATTENTION_ARGS_H_
#define TANDEM_TESTS_ENGINE_CUDA_EMULATION_EMULATED_ATTENTION_ARGS_H_

#define tandem tandem_emulated
#include "engine/cuda/kernels.h"
#undef tandem
#include "tests/engine/cuda/emulation/emulated_kernels.h"

namespace tandem::engine::cuda::emulation {

// Also sets the emulated device's shared memory a block.
inline tandem_emulated::engine::cuda::PagedAttentionArgs Emulated(const AttentionArgs& t) {
  namespace emulated = tandem_emulated::engine::cuda;
  cuda_emulation::TheDevice().shared_optin_bytes = static_cast<size_t>(t.shared_bytes_per_block);
  cuda_emulation::TheDevice().opted_in.clear();
  emulated::PagedAttentionArgs a;
  a.q = t.q;
  a.out = t.out;
  a.n_rows = t.n_rows;
  a.n_head = t.n_head;
  a.n_head_kv = t.n_head_kv;
  a.head_dim = t.head_dim;
  a.kv_base = t.kv_base;
  a.block_bytes = t.block_bytes;
  a.k_offset = t.k_offset;
  a.v_offset = t.v_offset;
  a.block_size = t.block_size;
  a.kv_f16 = t.kv_f16;
  a.kv_len = t.kv_len;
  a.table_offset = t.table_offset;
  a.block_table = t.block_table;
  a.split_scratch = t.split_scratch;
  a.tiles = t.tiles == Tiles::kF32        ? emulated::TileMath::kF32
            : t.tiles == Tiles::kSplitF16 ? emulated::TileMath::kSplitF16
                                          : emulated::TileMath::kF16;
  a.shared_bytes_per_block = t.shared_bytes_per_block;
  return a;
}

}  // namespace tandem::engine::cuda::emulation

#endif  // TANDEM_TESTS_ENGINE_CUDA_EMULATION_EMULATED_ATTENTION_ARGS_H_
