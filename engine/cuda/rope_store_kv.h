// The attention's steps between its products and the attention itself in
// one launch: RoPE of q and k, then k and v into the KV pool. Separately they
// were three launches a layer (two LaunchRope and a LaunchStoreKv), each a
// few microseconds of a decode step that reads no weights. Device pointers;
// the launch's error, like kernels.h.
#ifndef TANDEM_ENGINE_CUDA_ROPE_STORE_KV_H_
#define TANDEM_ENGINE_CUDA_ROPE_STORE_KV_H_

#include <cstdint>

#include <cuda_runtime_api.h>

#include "engine/cuda/backend_kernels.h"
#include "engine/cuda/kernels.h"

namespace tandem::engine::cuda {

// How LaunchRope rotates: each token's position, and the tables.
struct RopeArgs {
  const int32_t* positions = nullptr;  // [n_tokens]
  int32_t n_rot = 0;
  RopeStyle style = RopeStyle::kNormal;
  const float* cos_table = nullptr;
  const float* sin_table = nullptr;
};

// q [n_tokens][n_head][head_dim] (none when null or n_head is 0) and k
// [n_tokens][n_head_kv][head_dim] rotated in place as LaunchRope rotates
// them, then k and v ([n_tokens][n_head_kv][head_dim]) stored in the pool
// as LaunchStoreKv stores them (nothing for a negative slot): the same
// results as those three launches. cudaErrorInvalidValue when kv.kv_dim is
// not n_head_kv * head_dim.
cudaError_t LaunchRopeStoreKv(float* q, int32_t n_head, float* k, const float* v, int32_t n_head_kv,
                              int32_t head_dim, const RopeArgs& rope, const KvRows& kv,
                              const int64_t* slots, int64_t n_tokens, cudaStream_t stream);

}  // namespace tandem::engine::cuda

#endif  // TANDEM_ENGINE_CUDA_ROPE_STORE_KV_H_
