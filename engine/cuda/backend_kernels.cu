#include "engine/cuda/backend_kernels.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cfloat>
#include <cmath>

#include "engine/cuda/kv_rows.cuh"
#include "engine/cuda/launch.cuh"

namespace tandem::engine::cuda {
namespace {

constexpr int kThreads = 256;

unsigned Blocks(int64_t n) { return static_cast<unsigned>((n + kThreads - 1) / kThreads); }

__global__ void AddBiasKernel(float* x, const float* bias, int64_t n, int64_t dim) {
  GridPrologue();
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) x[i] += bias[i % dim];
}

// One block per token.
__global__ void StoreKvKernel(KvRows kv, const float* k, const float* v, const int64_t* slots) {
  GridPrologue();
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
  GridPrologue();
  const float* src = x + static_cast<int64_t>(rows[blockIdx.x]) * dim;
  float* dst = out + static_cast<int64_t>(blockIdx.x) * dim;
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) dst[i] = src[i];
}

// Is (v, id) ahead of (best_v, best_id): larger, ties to the lower id.
__device__ bool Ahead(float v, int32_t id, float best_v, int32_t best_id) {
  return id >= 0 && (best_id < 0 || v > best_v || (v == best_v && id < best_id));
}

// Is (v, id) behind (prev_v, prev_id) in that order: the candidates for the
// next rank once (prev_v, prev_id) is taken, so no list of taken ids is kept.
__device__ bool Behind(float v, int32_t id, float prev_v, int32_t prev_id) {
  return prev_id < 0 || v < prev_v || (v == prev_v && id > prev_id);
}

// The warp's best (v, id) by Ahead; every lane gets it.
__device__ void WarpBest(float& v, int32_t& id) {
  for (int off = 16; off > 0; off >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, v, off);
    const int32_t oid = __shfl_xor_sync(0xffffffffu, id, off);
    if (Ahead(ov, oid, v, id)) {
      v = ov;
      id = oid;
    }
  }
}

// A row is cut into slices of at least kSliceMin logits, at most
// kMaxSlices of them; each slice's block writes one SlicePartial.
constexpr int64_t kSliceMin = 4096;
constexpr int32_t kMaxSlices = 32;
constexpr int kSliceWarps = kThreads / 32;

struct SlicePartial {
  double sum;  // of exp(logit - max) over the slice
  float max;
  int32_t n_top;
  float top_v[kReducedTop];  // the slice's best logits, in order
  int32_t top_id[kReducedTop];
};

int32_t SliceCount(int64_t vocab) {
  const int64_t n = (vocab + kSliceMin - 1) / kSliceMin;
  return static_cast<int32_t>(n < kMaxSlices ? (n > 0 ? n : 1) : kMaxSlices);
}

// The best `count` of up to 32 sorted lists (lane i holds list i: `n` long,
// its j-th entry from at(j)), merged by the whole warp, written to
// out_v/out_id by lane 0; the number found is returned to every lane.
template <typename At>
__device__ int32_t MergeSorted(int32_t n, At at, int32_t count, float* out_v, int32_t* out_id) {
  const int lane = threadIdx.x % 32;
  int32_t next = 0;
  int32_t found = 0;
  for (; found < count; ++found) {
    float v = 0.0f;
    int32_t id = -1;
    if (next < n) at(next, v, id);
    const int32_t mine = id;
    WarpBest(v, id);
    if (id < 0) break;
    if (mine == id) ++next;  // ids are distinct: exactly one lane advances
    if (lane == 0) {
      out_v[found] = v;
      out_id[found] = id;
    }
  }
  return found;
}

// grid (n_rows, slices): one slice of one row. Its max and sum of exp in
// double; its top k as each warp's top k over the warp's part (k passes,
// each taking the best behind the last one taken), then the block's warps'
// lists merged by warp 0.
__global__ void ReduceSliceKernel(const float* logits, int64_t vocab, const int32_t* top_k,
                                  SlicePartial* partials) {
  GridPrologue();
  __shared__ float warp_f[kSliceWarps];
  __shared__ double warp_d[kSliceWarps];
  __shared__ float list_v[kSliceWarps][kReducedTop];
  __shared__ int32_t list_id[kSliceWarps][kReducedTop];
  __shared__ int32_t list_n[kSliceWarps];
  const int32_t k = top_k[blockIdx.x];
  if (k < 0) return;
  const int32_t slices = gridDim.y;
  const int64_t per = (vocab + slices - 1) / slices;
  const int64_t begin = min(vocab, blockIdx.y * per);
  const int64_t end = min(vocab, begin + per);
  const float* row = logits + blockIdx.x * vocab;
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;

  float m = -INFINITY;
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) m = fmaxf(m, row[i]);
  for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
  if (lane == 0) warp_f[warp] = m;
  __syncthreads();
  m = warp_f[0];
  for (int w = 1; w < kSliceWarps; ++w) m = fmaxf(m, warp_f[w]);
  double s = 0.0;
  if (m != -INFINITY) {
    for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) s += exp(double(row[i]) - m);
  }
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  if (lane == 0) warp_d[warp] = s;

  const int32_t count = min(k, kReducedTop);
  const int64_t wper = (end - begin + kSliceWarps - 1) / kSliceWarps;
  const int64_t wbegin = min(end, begin + warp * wper);
  const int64_t wend = min(end, wbegin + wper);
  float prev_v = 0.0f;
  int32_t prev_id = -1;
  int32_t n = 0;
  for (; n < count; ++n) {
    float v = 0.0f;
    int32_t id = -1;
    for (int64_t i = wbegin + lane; i < wend; i += 32) {
      const float x = row[i];
      const auto xi = static_cast<int32_t>(i);
      if (Behind(x, xi, prev_v, prev_id) && Ahead(x, xi, v, id)) {
        v = x;
        id = xi;
      }
    }
    WarpBest(v, id);
    if (id < 0) break;
    if (lane == 0) {
      list_v[warp][n] = v;
      list_id[warp][n] = id;
    }
    prev_v = v;
    prev_id = id;
  }
  if (lane == 0) list_n[warp] = n;
  __syncthreads();
  if (warp != 0) return;
  SlicePartial& out = partials[blockIdx.x * slices + blockIdx.y];
  const int32_t mine = lane < kSliceWarps ? list_n[lane] : 0;
  const int32_t found = MergeSorted(
      mine,
      [&](int32_t j, float& v, int32_t& id) {
        v = list_v[lane][j];
        id = list_id[lane][j];
      },
      count, out.top_v, out.top_id);
  if (lane == 0) {
    double total = 0.0;
    for (int w = 0; w < kSliceWarps; ++w) total += warp_d[w];
    out.sum = total;
    out.max = m;
    out.n_top = found;
  }
}

// grid (n_rows), one warp: the row's slices merged (lane z takes slice z).
__global__ void ReduceRowKernel(const float* logits, int64_t vocab, int32_t slices,
                                const int32_t* top_k, const int32_t* target,
                                const SlicePartial* partials, ReducedRow* out) {
  GridPrologue();
  const int32_t k = top_k[blockIdx.x];
  if (k < 0) return;
  const int lane = threadIdx.x;
  const SlicePartial* p = partials + blockIdx.x * slices;
  const bool has = lane < slices;
  float m = has ? p[lane].max : -INFINITY;
  for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
  // No token possible: every logprob -inf rather than NaN.
  const bool none = m == -INFINITY;
  const float max = none ? 0.0f : m;
  double s = has && !none && p[lane].max != -INFINITY
                 ? p[lane].sum * exp(double(p[lane].max) - double(max))
                 : 0.0;
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  const float log_sum = none ? INFINITY : static_cast<float>(log(s));
  ReducedRow& o = out[blockIdx.x];
  const int32_t count = min(k, kReducedTop);
  const int32_t found = MergeSorted(
      has ? p[lane].n_top : 0,
      [&](int32_t j, float& v, int32_t& id) {
        v = p[lane].top_v[j];
        id = p[lane].top_id[j];
      },
      count, o.top_logprobs, o.top_ids);
  __syncwarp();
  if (lane == 0) {
    for (int32_t j = 0; j < found; ++j) o.top_logprobs[j] = o.top_logprobs[j] - max - log_sum;
    o.max = max;
    o.log_sum = log_sum;
    o.target_logit =
        target[blockIdx.x] >= 0 ? logits[blockIdx.x * vocab + target[blockIdx.x]] : 0.0f;
    o.n_top = found;
  }
}

// One block per slot.
__global__ void GatherKvRowsKernel(KvRows kv, const int64_t* slots, float* keys,
                                   uint8_t* values) {
  GridPrologue();
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
  GridPrologue();
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
  Launch(AddBiasKernel, Blocks(n), kThreads, 0, stream, x, bias, n, dim);
  return cudaGetLastError();
}

cudaError_t LaunchStoreKv(const KvRows& kv, const float* k, const float* v,
                          const int64_t* slots, int64_t n_tokens, cudaStream_t stream) {
  if (n_tokens == 0) return cudaSuccess;
  Launch(StoreKvKernel, static_cast<unsigned>(n_tokens), 128, 0, stream, kv, k, v, slots);
  return cudaGetLastError();
}

cudaError_t LaunchGatherRows(const float* x, int64_t dim, const int32_t* rows, int64_t n_rows,
                             float* out, cudaStream_t stream) {
  if (n_rows == 0) return cudaSuccess;
  Launch(GatherRowsKernel, static_cast<unsigned>(n_rows), kThreads, 0, stream, x, dim, rows, out);
  return cudaGetLastError();
}

int64_t ReduceLogitsScratchBytes(int64_t n_rows) {
  return n_rows * kMaxSlices * int64_t{sizeof(SlicePartial)};
}

cudaError_t LaunchReduceLogits(const float* logits, int64_t n_rows, int64_t vocab,
                               const int32_t* top_k, const int32_t* target, void* scratch,
                               ReducedRow* out, cudaStream_t stream) {
  if (n_rows == 0) return cudaSuccess;
  const int32_t slices = SliceCount(vocab);
  auto* partials = static_cast<SlicePartial*>(scratch);
  const dim3 grid(static_cast<unsigned>(n_rows), static_cast<unsigned>(slices));
  Launch(ReduceSliceKernel, grid, kThreads, 0, stream, logits, vocab, top_k, partials);
  if (const cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  Launch(ReduceRowKernel, static_cast<unsigned>(n_rows), 32, 0, stream, logits, vocab, slices,
         top_k, target, partials, out);
  return cudaGetLastError();
}

cudaError_t LaunchGatherKvRows(const KvRows& kv, const int64_t* slots, int64_t n, float* keys,
                               uint8_t* values, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  Launch(GatherKvRowsKernel, static_cast<unsigned>(n), 128, 0, stream, kv, slots, keys, values);
  return cudaGetLastError();
}

cudaError_t LaunchScatterKvRows(const KvRows& kv, const int64_t* slots, int64_t n,
                                const float* keys, const uint8_t* values, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  Launch(ScatterKvRowsKernel, static_cast<unsigned>(n), 128, 0, stream, kv, slots, keys, values);
  return cudaGetLastError();
}

}  // namespace tandem::engine::cuda
