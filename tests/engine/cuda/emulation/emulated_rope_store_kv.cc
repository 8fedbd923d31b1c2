// engine/cuda/rope_store_kv.cu compiled for the host (emulated_kernels.h), as
// emulated_gemv16.cc compiles the 16-bit GEMVs.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "tests/engine/cuda/emulation/emulated_kernels.h"

#define tandem tandem_emulated
#include "engine/cuda/rope_store_kv.cu"
#undef tandem

namespace tandem::engine::cuda::emulation {

int RunRopeStoreKv(float* q, int32_t n_head, float* k, const float* v, int32_t n_head_kv,
                   int32_t head_dim, const int32_t* positions, int32_t n_rot, bool neox,
                   const float* cos_table, const float* sin_table, const KvPool& kv,
                   const int64_t* slots, int64_t n_tokens) {
  namespace real = tandem_emulated::engine::cuda;
  const real::RopeArgs rope{.positions = positions,
                            .n_rot = n_rot,
                            .style = neox ? real::RopeStyle::kNeox : real::RopeStyle::kNormal,
                            .cos_table = cos_table,
                            .sin_table = sin_table};
  const real::KvRows rows{.base = kv.base,
                          .block_bytes = kv.block_bytes,
                          .k_offset = kv.k_offset,
                          .v_offset = kv.v_offset,
                          .block_size = kv.block_size,
                          .kv_dim = kv.kv_dim,
                          .f16 = kv.f16};
  return real::LaunchRopeStoreKv(q, n_head, k, v, n_head_kv, head_dim, rope, rows, slots, n_tokens,
                                 nullptr);
}

}  // namespace tandem::engine::cuda::emulation
