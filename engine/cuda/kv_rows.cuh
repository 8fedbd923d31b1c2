// Where a layer's keys and values live in the block pool, for kernels
// (KvRows, backend_kernels.h), and one element of a row stored or loaded in
// the pool's type. Shared by the KV store, the slot moves and the fused
// RoPE-and-store (rope_store_kv.cu).
#ifndef TANDEM_ENGINE_CUDA_KV_ROWS_CUH_
#define TANDEM_ENGINE_CUDA_KV_ROWS_CUH_

#include <cuda_fp16.h>

#include <cstdint>

#include "engine/cuda/backend_kernels.h"

namespace tandem::engine::cuda {

__device__ inline uint8_t* KeyRow(const KvRows& kv, int64_t slot) {
  const int64_t elem = kv.f16 ? 2 : 4;
  return kv.base + slot / kv.block_size * kv.block_bytes + kv.k_offset +
         slot % kv.block_size * kv.kv_dim * elem;
}

__device__ inline uint8_t* ValueRow(const KvRows& kv, int64_t slot) {
  const int64_t elem = kv.f16 ? 2 : 4;
  return kv.base + slot / kv.block_size * kv.block_bytes + kv.v_offset +
         slot % kv.block_size * kv.kv_dim * elem;
}

// Element i of a row, converted to the pool's type (f16: round to nearest
// even).
__device__ inline void StoreElement(uint8_t* row, int32_t i, float v, bool f16) {
  if (f16) {
    reinterpret_cast<__half*>(row)[i] = __float2half_rn(v);
  } else {
    reinterpret_cast<float*>(row)[i] = v;
  }
}

__device__ inline float LoadElement(const uint8_t* row, int32_t i, bool f16) {
  return f16 ? __half2float(reinterpret_cast<const __half*>(row)[i])
             : reinterpret_cast<const float*>(row)[i];
}

}  // namespace tandem::engine::cuda

#endif  // TANDEM_ENGINE_CUDA_KV_ROWS_CUH_
