#include "engine/cuda/kernels.h"
#include "engine/cuda/launch.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "engine/cuda/gemv_rows.cuh"
#include "engine/cuda/rope.cuh"

namespace tandem::engine::cuda {
namespace {

constexpr int kThreads = 256;

int Blocks(int64_t n) { return static_cast<int>((n + kThreads - 1) / kThreads); }

struct SumOp {
  __device__ float operator()(float a, float b) const { return a + b; }
};

// `op` over the block (`identity` for missing warps); every thread gets the
// result. `scratch` holds blockDim.x / 32 floats.
template <typename Op>
__device__ float BlockReduce(float v, float identity, Op op, float* scratch) {
  for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  __syncthreads();  // scratch may still be read from a previous call
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  const int warps = blockDim.x / 32;
  v = lane < warps ? scratch[lane] : identity;
  for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

__device__ float BlockSum(float v, float* scratch) {
  return BlockReduce(v, 0.0f, SumOp(), scratch);
}

// Where a kernel's values go: f32 as they are, or rounded to nearest even
// in a 16-bit type for the tensor cores.
__device__ __forceinline__ void Put(float* out, int64_t i, float v) { out[i] = v; }
__device__ __forceinline__ void Put(__half* out, int64_t i, float v) {
  out[i] = __float2half_rn(v);
}
__device__ __forceinline__ void Put(__nv_bfloat16* out, int64_t i, float v) {
  out[i] = __float2bfloat16_rn(v);
}

// Four consecutive values in one store.
template <typename T>
struct alignas(4 * sizeof(T)) Four {
  T v[4];
};
__device__ __forceinline__ void Put4(float4* out, int64_t i, float4 v) { out[i] = v; }
template <typename T>
__device__ __forceinline__ void Put4(Four<T>* out, int64_t i, float4 v) {
  Four<T> four;
  Put(four.v, 0, v.x);
  Put(four.v, 1, v.y);
  Put(four.v, 2, v.z);
  Put(four.v, 3, v.w);
  out[i] = four;
}

// One block per row; Out is float, __half or __nv_bfloat16.
template <typename Out>
__global__ void RmsNormKernel(const float* x, const float* w, int64_t dim, float eps, Out* y) {
  GridPrologue();
  __shared__ float scratch[kThreads / 32];
  const float* row = x + blockIdx.x * dim;
  Out* out = y + blockIdx.x * dim;
  float sum = 0.0f;
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) sum += row[i] * row[i];
  sum = BlockSum(sum, scratch);
  const float scale = rsqrtf(sum / static_cast<float>(dim) + eps);
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) Put(out, i, row[i] * scale * w[i]);
}

// RmsNormKernel for rows of whole, 16-byte aligned float4s (dim4 of them):
// a block of up to 1024 threads per row, every load of the row issued
// before the first sum, the first kRmsKeep float4s of each thread kept in
// registers for the scaling. At one row (decode) the old kernel's 256
// threads waited on eight dependent loads each. Out is float or a 16-bit
// type; its rows need not be aligned for four values a store (PutFour).
constexpr int kRmsMaxThreads = 1024;
constexpr int kRmsKeep = 4;

__device__ float SumSquares(float4 v) { return v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w; }

__device__ float4 Scaled(float4 v, float scale, float4 w) {
  return make_float4(v.x * scale * w.x, v.y * scale * w.y, v.z * scale * w.z, v.w * scale * w.w);
}

// Values [4i, 4i + 4) of `row`: one store where the row is aligned for it
// (kOneStore), else one a value.
template <typename Out, bool kOneStore>
__device__ __forceinline__ void PutFour(Out* row, int64_t i, float4 v) {
  if constexpr (kOneStore) {
    using Out4 = std::conditional_t<std::is_same_v<Out, float>, float4, Four<Out>>;
    Put4(reinterpret_cast<Out4*>(row), i, v);
  } else {
    Put(row, 4 * i, v.x);
    Put(row, 4 * i + 1, v.y);
    Put(row, 4 * i + 2, v.z);
    Put(row, 4 * i + 3, v.w);
  }
}

template <typename Out, bool kOneStore>
__global__ void __launch_bounds__(kRmsMaxThreads)
    RmsNorm4Kernel(const float4* x, const float4* w, int64_t dim4, float eps, Out* y) {
  GridPrologue();
  __shared__ float scratch[kRmsMaxThreads / 32];
  const float4* row = x + blockIdx.x * dim4;
  Out* out = y + blockIdx.x * 4 * dim4;
  float4 keep[kRmsKeep];
  float sum = 0.0f;
#pragma unroll
  for (int j = 0; j < kRmsKeep; ++j) {
    const int64_t i = threadIdx.x + int64_t{j} * blockDim.x;
    keep[j] = i < dim4 ? row[i] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  }
#pragma unroll
  for (int j = 0; j < kRmsKeep; ++j) sum += SumSquares(keep[j]);
  for (int64_t i = threadIdx.x + int64_t{kRmsKeep} * blockDim.x; i < dim4; i += blockDim.x) {
    sum += SumSquares(row[i]);
  }
  sum = BlockSum(sum, scratch);
  const float scale = rsqrtf(sum / static_cast<float>(4 * dim4) + eps);
#pragma unroll
  for (int j = 0; j < kRmsKeep; ++j) {
    const int64_t i = threadIdx.x + int64_t{j} * blockDim.x;
    if (i < dim4) PutFour<Out, kOneStore>(out, i, Scaled(keep[j], scale, w[i]));
  }
  for (int64_t i = threadIdx.x + int64_t{kRmsKeep} * blockDim.x; i < dim4; i += blockDim.x) {
    PutFour<Out, kOneStore>(out, i, Scaled(row[i], scale, w[i]));
  }
}

// Out: float, or a 16-bit type the value is rounded to (Put).
template <typename Out>
__global__ void SwiGluKernel(const float* gate, const float* up, int64_t n, Out* out) {
  GridPrologue();
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  Put(out, i, Silu(gate[i]) * up[i]);
}

__global__ void AddKernel(float* x, const float* y, int64_t n) {
  GridPrologue();
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) x[i] += y[i];
}

// grid (n_tokens, n_heads); one thread per rotated pair.
__global__ void RopeKernel(float* x, const int32_t* positions, int32_t n_heads, int32_t head_dim,
                           int32_t n_rot, int32_t style, const float* cos_table,
                           const float* sin_table) {
  GridPrologue();
  float* v = x + (static_cast<int64_t>(blockIdx.x) * n_heads + blockIdx.y) * head_dim;
  RotateHead(v, positions[blockIdx.x], n_rot, style, cos_table, sin_table, threadIdx.x, blockDim.x);
}

// grid (rows, n_tokens); each thread takes whole 32-element blocks.
__global__ void MatMulQ8_0Kernel(const uint8_t* w, int64_t cols, const float* x, int64_t rows,
                                 float* y) {
  GridPrologue();
  __shared__ float scratch[kThreads / 32];
  const int64_t r = blockIdx.x;
  const int64_t t = blockIdx.y;
  const int64_t n_blocks = cols / 32;
  const uint8_t* row = w + r * n_blocks * 34;
  const float* xt = x + t * cols;
  float sum = 0.0f;
  for (int64_t b = threadIdx.x; b < n_blocks; b += blockDim.x) {
    const uint8_t* block = row + b * 34;
    // The scale is an unaligned little-endian f16.
    const __half_raw raw{static_cast<unsigned short>(block[0] | (block[1] << 8))};
    const float d = __half2float(__half(raw));
    const int8_t* q = reinterpret_cast<const int8_t*>(block + 2);
    const float* xb = xt + b * 32;
    float dot = 0.0f;
#pragma unroll
    for (int i = 0; i < 32; ++i) dot += static_cast<float>(q[i]) * xb[i];
    sum += d * dot;
  }
  sum = BlockSum(sum, scratch);
  if (threadIdx.x == 0) y[t * rows + r] = sum;
}

// x rounded to a 16-bit type (Put).
template <typename Out>
__global__ void To16Kernel(const float* x, int64_t n, Out* out) {
  GridPrologue();
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) Put(out, i, x[i]);
}

}  // namespace

cudaError_t CheckKernelImage(int device) {
  if (const cudaError_t e = cudaSetDevice(device); e != cudaSuccess) return e;
  // Every kernel file of tandem_cuda_kernels is compiled for the same
  // architectures: one kernel's image answers for all of them.
  cudaFuncAttributes attributes;
  return cudaFuncGetAttributes(&attributes, AddKernel);
}

namespace {

// LaunchRmsNorm into rows of Out (float, __half or __nv_bfloat16).
template <typename Out>
cudaError_t LaunchRmsNormTo(const float* x, const float* weight, int64_t n_tokens, int64_t dim,
                            float eps, Out* y, cudaStream_t stream) {
  if (n_tokens == 0) return cudaSuccess;
  using Out4 = std::conditional_t<std::is_same_v<Out, float>, float4, Four<Out>>;
  const auto aligned = [](const void* p, size_t to) {
    return reinterpret_cast<uintptr_t>(p) % to == 0;
  };
  // The output's alignment picks only its stores, never the kernel: its sum
  // order is the scale's, and every output type must get the same scale.
  if (dim % 4 == 0 && aligned(x, 16) && aligned(weight, 16)) {
    const int64_t dim4 = dim / 4;
    const int64_t threads = std::min<int64_t>(kRmsMaxThreads, (dim4 + 31) / 32 * 32);
    Launch(aligned(y, alignof(Out4)) ? RmsNorm4Kernel<Out, true> : RmsNorm4Kernel<Out, false>,
           static_cast<unsigned>(n_tokens), static_cast<unsigned>(threads), 0, stream,
           reinterpret_cast<const float4*>(x), reinterpret_cast<const float4*>(weight), dim4, eps,
           y);
    return cudaGetLastError();
  }
  Launch(RmsNormKernel<Out>, static_cast<unsigned>(n_tokens), kThreads, 0, stream, x, weight, dim,
         eps, y);
  return cudaGetLastError();
}

}  // namespace

cudaError_t LaunchRmsNorm(const float* x, const float* weight, int64_t n_tokens, int64_t dim,
                          float eps, float* y, cudaStream_t stream) {
  return LaunchRmsNormTo(x, weight, n_tokens, dim, eps, y, stream);
}

cudaError_t LaunchRmsNorm16(const float* x, const float* weight, int64_t n_tokens, int64_t dim,
                            float eps, bool bf16, void* y, cudaStream_t stream) {
  return bf16 ? LaunchRmsNormTo(x, weight, n_tokens, dim, eps, static_cast<__nv_bfloat16*>(y),
                                stream)
              : LaunchRmsNormTo(x, weight, n_tokens, dim, eps, static_cast<__half*>(y), stream);
}

cudaError_t LaunchSwiGlu(const float* gate, const float* up, int64_t n, float* out,
                         cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  Launch(SwiGluKernel<float>, Blocks(n), kThreads, 0, stream, gate, up, n, out);
  return cudaGetLastError();
}

cudaError_t LaunchSwiGlu16(const float* gate, const float* up, int64_t n, bool bf16, void* out,
                           cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  if (bf16) {
    Launch(SwiGluKernel<__nv_bfloat16>, Blocks(n), kThreads, 0, stream, gate, up, n,
           static_cast<__nv_bfloat16*>(out));
  } else {
    Launch(SwiGluKernel<__half>, Blocks(n), kThreads, 0, stream, gate, up, n,
           static_cast<__half*>(out));
  }
  return cudaGetLastError();
}

cudaError_t LaunchAdd(float* x, const float* y, int64_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  Launch(AddKernel, Blocks(n), kThreads, 0, stream, x, y, n);
  return cudaGetLastError();
}

cudaError_t LaunchRope(float* x, const int32_t* positions, int64_t n_tokens, int32_t n_heads,
                       int32_t head_dim, int32_t n_rot, RopeStyle style, const float* cos_table,
                       const float* sin_table, cudaStream_t stream) {
  if (n_tokens == 0 || n_heads == 0) return cudaSuccess;
  const dim3 grid(static_cast<unsigned>(n_tokens), static_cast<unsigned>(n_heads));
  Launch(RopeKernel, grid, 64, 0, stream, x, positions, n_heads, head_dim, n_rot,
         static_cast<int32_t>(style), cos_table, sin_table);
  return cudaGetLastError();
}

cudaError_t LaunchMatMulQ8_0(const void* w, int64_t rows, int64_t cols, const float* x,
                             int64_t n_tokens, float* y, cudaStream_t stream) {
  if (rows == 0 || n_tokens == 0) return cudaSuccess;
  if (cols % 32 != 0) return cudaErrorInvalidValue;
  const dim3 grid(static_cast<unsigned>(rows), static_cast<unsigned>(n_tokens));
  Launch(MatMulQ8_0Kernel, grid, 128, 0, stream, static_cast<const uint8_t*>(w), cols, x, rows, y);
  return cudaGetLastError();
}

cudaError_t LaunchToF16(const float* x, int64_t n, void* out, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  Launch(To16Kernel<__half>, Blocks(n), kThreads, 0, stream, x, n, static_cast<__half*>(out));
  return cudaGetLastError();
}

cudaError_t LaunchToBf16(const float* x, int64_t n, void* out, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  Launch(To16Kernel<__nv_bfloat16>, Blocks(n), kThreads, 0, stream, x, n,
         static_cast<__nv_bfloat16*>(out));
  return cudaGetLastError();
}

}  // namespace tandem::engine::cuda
