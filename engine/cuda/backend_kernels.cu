#include "engine/cuda/backend_kernels.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cfloat>
#include <cmath>

namespace tandem::engine::cuda {
namespace {

constexpr int kThreads = 256;

unsigned Blocks(int64_t n) { return static_cast<unsigned>((n + kThreads - 1) / kThreads); }

__global__ void AddBiasKernel(float* x, const float* bias, int64_t n, int64_t dim) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) x[i] += bias[i % dim];
}

__device__ uint8_t* KeyRow(const KvRows& kv, int64_t slot) {
  const int64_t elem = kv.f16 ? 2 : 4;
  return kv.base + slot / kv.block_size * kv.block_bytes + kv.k_offset +
         slot % kv.block_size * kv.kv_dim * elem;
}

__device__ uint8_t* ValueRow(const KvRows& kv, int64_t slot) {
  const int64_t elem = kv.f16 ? 2 : 4;
  return kv.base + slot / kv.block_size * kv.block_bytes + kv.v_offset +
         slot % kv.block_size * kv.kv_dim * elem;
}

__device__ void StoreElement(uint8_t* row, int32_t i, float v, bool f16) {
  if (f16) {
    reinterpret_cast<__half*>(row)[i] = __float2half_rn(v);
  } else {
    reinterpret_cast<float*>(row)[i] = v;
  }
}

__device__ float LoadElement(const uint8_t* row, int32_t i, bool f16) {
  return f16 ? __half2float(reinterpret_cast<const __half*>(row)[i])
             : reinterpret_cast<const float*>(row)[i];
}

// One block per token.
__global__ void StoreKvKernel(KvRows kv, const float* k, const float* v, const int64_t* slots) {
  const int64_t t = blockIdx.x;
  const int64_t slot = slots[t];
  if (slot < 0) return;  // a pad row of a graph's bucket
  uint8_t* kd = KeyRow(kv, slot);
  uint8_t* vd = ValueRow(kv, slot);
  for (int32_t i = threadIdx.x; i < kv.kv_dim; i += blockDim.x) {
    StoreElement(kd, i, k[t * kv.kv_dim + i], kv.f16);
    StoreElement(vd, i, v[t * kv.kv_dim + i], kv.f16);
  }
}

__global__ void GatherRowsKernel(const float* x, int64_t dim, const int32_t* rows, float* out) {
  const float* src = x + static_cast<int64_t>(rows[blockIdx.x]) * dim;
  float* dst = out + static_cast<int64_t>(blockIdx.x) * dim;
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) dst[i] = src[i];
}

// Is (v, id) ahead of (best_v, best_id): larger, ties to the lower id.
__device__ bool Ahead(float v, int32_t id, float best_v, int32_t best_id) {
  return id >= 0 && (best_id < 0 || v > best_v || (v == best_v && id < best_id));
}

// One block per row: the max, the sum of exp in double, then top_k rounds
// of a block-wide argmax over the ids not yet taken (k <= 20 rounds of one
// pass each, out of L2 after the first).
__global__ void ReduceLogitsKernel(const float* logits, int64_t vocab, const int32_t* top_k,
                                   const int32_t* target, ReducedRow* out) {
  constexpr int kWarps = kThreads / 32;
  __shared__ float warp_f[kWarps];
  __shared__ double warp_d[kWarps];
  __shared__ int32_t warp_id[kWarps];
  __shared__ int32_t taken[kReducedTop];
  const int32_t k = top_k[blockIdx.x];
  if (k < 0) return;
  const float* row = logits + blockIdx.x * vocab;
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;

  float m = -INFINITY;
  for (int64_t i = threadIdx.x; i < vocab; i += blockDim.x) m = fmaxf(m, row[i]);
  for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
  if (lane == 0) warp_f[warp] = m;
  __syncthreads();
  m = warp_f[0];
  for (int w = 1; w < kWarps; ++w) m = fmaxf(m, warp_f[w]);
  // No token possible: every logprob -inf rather than NaN.
  const bool none = m == -INFINITY;
  const float max = none ? 0.0f : m;

  double s = 0.0;
  if (!none) {
    for (int64_t i = threadIdx.x; i < vocab; i += blockDim.x) s += exp(double(row[i]) - max);
  }
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  if (lane == 0) warp_d[warp] = s;
  __syncthreads();
  s = 0.0;
  for (int w = 0; w < kWarps; ++w) s += warp_d[w];
  const float log_sum = none ? INFINITY : static_cast<float>(log(s));

  ReducedRow& o = out[blockIdx.x];
  if (threadIdx.x == 0) {
    o.max = max;
    o.log_sum = log_sum;
    o.target_logit = target[blockIdx.x] >= 0 ? row[target[blockIdx.x]] : 0.0f;
  }
  const int32_t count = k < vocab ? k : static_cast<int32_t>(vocab);
  for (int32_t j = 0; j < count; ++j) {
    float best_v = -INFINITY;
    int32_t best_id = -1;
    for (int64_t i = threadIdx.x; i < vocab; i += blockDim.x) {
      bool used = false;
      for (int32_t u = 0; u < j; ++u) used |= taken[u] == static_cast<int32_t>(i);
      if (!used && Ahead(row[i], static_cast<int32_t>(i), best_v, best_id)) {
        best_v = row[i];
        best_id = static_cast<int32_t>(i);
      }
    }
    for (int off = 16; off > 0; off >>= 1) {
      const float ov = __shfl_xor_sync(0xffffffffu, best_v, off);
      const int32_t oid = __shfl_xor_sync(0xffffffffu, best_id, off);
      if (Ahead(ov, oid, best_v, best_id)) {
        best_v = ov;
        best_id = oid;
      }
    }
    if (lane == 0) {
      warp_f[warp] = best_v;
      warp_id[warp] = best_id;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      for (int w = 1; w < kWarps; ++w) {
        if (Ahead(warp_f[w], warp_id[w], warp_f[0], warp_id[0])) {
          warp_f[0] = warp_f[w];
          warp_id[0] = warp_id[w];
        }
      }
      taken[j] = warp_id[0];
      o.top_ids[j] = warp_id[0];
      o.top_logprobs[j] = warp_f[0] - max - log_sum;
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) o.n_top = count;
}

// One block per slot.
__global__ void GatherKvRowsKernel(KvRows kv, const int64_t* slots, float* keys,
                                   uint8_t* values) {
  const int64_t i = blockIdx.x;
  const uint8_t* k = KeyRow(kv, slots[i]);
  const uint8_t* v = ValueRow(kv, slots[i]);
  const int64_t value_bytes = int64_t{kv.kv_dim} * (kv.f16 ? 2 : 4);
  for (int32_t j = threadIdx.x; j < kv.kv_dim; j += blockDim.x) {
    keys[i * kv.kv_dim + j] = LoadElement(k, j, kv.f16);
  }
  for (int64_t b = threadIdx.x; b < value_bytes; b += blockDim.x) {
    values[i * value_bytes + b] = v[b];
  }
}

__global__ void ScatterKvRowsKernel(KvRows kv, const int64_t* slots, const float* keys,
                                    const uint8_t* values) {
  const int64_t i = blockIdx.x;
  uint8_t* k = KeyRow(kv, slots[i]);
  uint8_t* v = ValueRow(kv, slots[i]);
  const int64_t value_bytes = int64_t{kv.kv_dim} * (kv.f16 ? 2 : 4);
  for (int32_t j = threadIdx.x; j < kv.kv_dim; j += blockDim.x) {
    StoreElement(k, j, keys[i * kv.kv_dim + j], kv.f16);
  }
  for (int64_t b = threadIdx.x; b < value_bytes; b += blockDim.x) {
    v[b] = values[i * value_bytes + b];
  }
}

}  // namespace

cudaError_t LaunchAddBias(float* x, const float* bias, int64_t n_rows, int64_t dim,
                          cudaStream_t stream) {
  const int64_t n = n_rows * dim;
  if (n == 0) return cudaSuccess;
  AddBiasKernel<<<Blocks(n), kThreads, 0, stream>>>(x, bias, n, dim);
  return cudaGetLastError();
}

cudaError_t LaunchStoreKv(const KvRows& kv, const float* k, const float* v,
                          const int64_t* slots, int64_t n_tokens, cudaStream_t stream) {
  if (n_tokens == 0) return cudaSuccess;
  StoreKvKernel<<<static_cast<unsigned>(n_tokens), 128, 0, stream>>>(kv, k, v, slots);
  return cudaGetLastError();
}

cudaError_t LaunchGatherRows(const float* x, int64_t dim, const int32_t* rows, int64_t n_rows,
                             float* out, cudaStream_t stream) {
  if (n_rows == 0) return cudaSuccess;
  GatherRowsKernel<<<static_cast<unsigned>(n_rows), kThreads, 0, stream>>>(x, dim, rows, out);
  return cudaGetLastError();
}

cudaError_t LaunchReduceLogits(const float* logits, int64_t n_rows, int64_t vocab,
                               const int32_t* top_k, const int32_t* target, ReducedRow* out,
                               cudaStream_t stream) {
  if (n_rows == 0) return cudaSuccess;
  ReduceLogitsKernel<<<static_cast<unsigned>(n_rows), kThreads, 0, stream>>>(logits, vocab,
                                                                             top_k, target, out);
  return cudaGetLastError();
}

cudaError_t LaunchGatherKvRows(const KvRows& kv, const int64_t* slots, int64_t n, float* keys,
                               uint8_t* values, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  GatherKvRowsKernel<<<static_cast<unsigned>(n), 128, 0, stream>>>(kv, slots, keys, values);
  return cudaGetLastError();
}

cudaError_t LaunchScatterKvRows(const KvRows& kv, const int64_t* slots, int64_t n,
                                const float* keys, const uint8_t* values, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  ScatterKvRowsKernel<<<static_cast<unsigned>(n), 128, 0, stream>>>(kv, slots, keys, values);
  return cudaGetLastError();
}

}  // namespace tandem::engine::cuda
