// engine/cuda/attention_f16.cu compiled for the host (emulated_attention.h).
// include/ comes first on this file's include path, so the kernel's CUDA
// headers and engine/cuda/launch.cuh are the emulation's; the project's
// namespace is renamed around the kernel's source so that its symbols do not
// meet the real ones (a build with CUDA links both into the test).
#include "tests/engine/cuda/emulation/emulated_kernels.h"

#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <mma.h>

#include <cstdint>

#define tandem tandem_emulated
#include "engine/cuda/attention_f16.cu"
#undef tandem

namespace tandem::engine::cuda::emulation {

TileRun RunTensorCoreTiles(const TileArgs& t, size_t shared_optin_bytes) {
  namespace emulated = tandem_emulated::engine::cuda;
  cuda_emulation::TheDevice().shared_optin_bytes = shared_optin_bytes;
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
  a.tiles = t.split ? emulated::TileMath::kSplitF16 : emulated::TileMath::kF16;
  if (!emulated::TensorCoreTilesFit(a)) return {};
  return {.fit = true, .error = emulated::LaunchTensorCoreAttentionTiles(a, nullptr)};
}

}  // namespace tandem::engine::cuda::emulation
