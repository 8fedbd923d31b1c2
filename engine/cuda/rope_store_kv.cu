#include "engine/cuda/rope_store_kv.h"

#include "engine/cuda/kv_rows.cuh"
#include "engine/cuda/launch.cuh"
#include "engine/cuda/rope.cuh"

namespace tandem::engine::cuda {
namespace {

constexpr int kThreads = 64;

// grid (n_tokens, n_head + n_head_kv): a block rotates one head of q, or one
// of k and then stores it and the same head of v.
__global__ void RopeStoreKvKernel(float* q, int32_t n_head, float* k, const float* v,
                                  int32_t n_head_kv, int32_t head_dim, RopeArgs rope, KvRows kv,
                                  const int64_t* slots) {
  GridPrologue();
  const int64_t t = blockIdx.x;
  const int32_t h = static_cast<int32_t>(blockIdx.y);
  const bool is_q = h < n_head;
  const int32_t kh = h - n_head;
  float* x = is_q ? q + (t * n_head + h) * head_dim : k + (t * n_head_kv + kh) * head_dim;
  RotateHead(x, rope.positions[t], rope.n_rot, static_cast<int32_t>(rope.style), rope.cos_table,
             rope.sin_table, threadIdx.x, blockDim.x);
  const int64_t slot = is_q ? -1 : slots[t];
  if (slot < 0) return;  // a query head, or a pad row of a graph's bucket: the block leaves whole
  __syncthreads();       // the head's rotated pairs, written by the block's threads
  uint8_t* kd = KeyRow(kv, slot);
  uint8_t* vd = ValueRow(kv, slot);
  const float* vh = v + (t * n_head_kv + kh) * head_dim;
  for (int32_t i = threadIdx.x; i < head_dim; i += blockDim.x) {
    StoreElement(kd, kh * head_dim + i, x[i], kv.f16);
    StoreElement(vd, kh * head_dim + i, vh[i], kv.f16);
  }
}

}  // namespace

cudaError_t LaunchRopeStoreKv(float* q, int32_t n_head, float* k, const float* v, int32_t n_head_kv,
                              int32_t head_dim, const RopeArgs& rope, const KvRows& kv,
                              const int64_t* slots, int64_t n_tokens, cudaStream_t stream) {
  if (kv.kv_dim != n_head_kv * head_dim) return cudaErrorInvalidValue;
  if (q == nullptr) n_head = 0;
  if (n_tokens == 0 || n_head + n_head_kv == 0) return cudaSuccess;
  const dim3 grid(static_cast<unsigned>(n_tokens), static_cast<unsigned>(n_head + n_head_kv));
  Launch(RopeStoreKvKernel, grid, kThreads, 0, stream, q, n_head, k, v, n_head_kv, head_dim, rope,
         kv, slots);
  return cudaGetLastError();
}

}  // namespace tandem::engine::cuda
