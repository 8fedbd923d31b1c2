#include "engine/cuda/gemv16.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "engine/cuda/kernels.h"

namespace tandem::engine::cuda {
namespace {

// 16-byte loads in flight per lane before the first is used.
constexpr int kUnroll = 4;

// Eight 16-bit values (one 16-byte load) widened to f32.
__device__ void Widen(const uint4& raw, bool bf16, float (&out)[8]) {
  const auto* h = reinterpret_cast<const unsigned short*>(&raw);
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    if (bf16) {
      out[i] = __uint_as_float(static_cast<unsigned>(h[i]) << 16);
    } else {
      out[i] = __half2float(__ushort_as_half(h[i]));
    }
  }
}

// A block of kBlockWarps warps; `split` of them (1, 2, 4 or 8:
// GemvRowSplit) share a row.
constexpr int kBlockWarps = 8;

// The row's warps interleave over its 16-byte chunks 32 at a time; each
// lane takes 8 columns a chunk, kUnroll loads of the row in flight, every
// token's dot product accumulated from the same widened weights. Warp sums,
// then the row's first warp adds its partners' in a fixed order.
template <int kTokens>
__global__ void __launch_bounds__(32 * kBlockWarps)
    Gemv16Kernel(const uint4* __restrict__ w, bool bf16, int64_t rows, int64_t cols, int split,
                 const float* __restrict__ x, float* __restrict__ y) {
  __shared__ float partial[kBlockWarps][kTokens];
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * (kBlockWarps / split) + warp / split;
  const int part = warp % split;
  float acc[kTokens];
#pragma unroll
  for (int t = 0; t < kTokens; ++t) acc[t] = 0.0f;
  if (row < rows) {
    const int64_t chunks = cols / 8;  // 16-byte chunks per row
    const int64_t stride = 32 * static_cast<int64_t>(split);
    const uint4* wr = w + row * chunks;
    for (int64_t base = 32 * part; base < chunks; base += stride * kUnroll) {
      uint4 raw[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int64_t c = base + u * stride + lane;
        raw[u] = c < chunks ? __ldcs(wr + c) : make_uint4(0, 0, 0, 0);
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int64_t c = base + u * stride + lane;
        if (c >= chunks) break;
        float wf[8];
        Widen(raw[u], bf16, wf);
#pragma unroll
        for (int t = 0; t < kTokens; ++t) {
          const float4* xt = reinterpret_cast<const float4*>(x + t * cols) + 2 * c;
          const float4 a = __ldg(xt);
          const float4 b = __ldg(xt + 1);
          acc[t] += wf[0] * a.x + wf[1] * a.y + wf[2] * a.z + wf[3] * a.w + wf[4] * b.x +
                    wf[5] * b.y + wf[6] * b.z + wf[7] * b.w;
        }
      }
    }
  }
#pragma unroll
  for (int t = 0; t < kTokens; ++t) {
    float v = acc[t];
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if (lane == 0) partial[warp][t] = v;
  }
  __syncthreads();
  if (row < rows && part == 0 && lane < kTokens) {
    float v = partial[warp][lane];
    for (int p = 1; p < split; ++p) v += partial[warp + p][lane];
    y[lane * rows + row] = v;
  }
}

template <int kTokens>
void Launch(const void* w, bool bf16, int64_t rows, int64_t cols, const float* x, float* y,
            cudaStream_t stream) {
  const int split = GemvRowSplit(rows, kBlockWarps);
  const int64_t rows_per_block = kBlockWarps / split;
  const auto blocks = static_cast<unsigned>((rows + rows_per_block - 1) / rows_per_block);
  Gemv16Kernel<kTokens><<<blocks, 32 * kBlockWarps, 0, stream>>>(
      static_cast<const uint4*>(w), bf16, rows, cols, split, x, y);
}

}  // namespace

bool Gemv16Takes(const void* w, int64_t cols, const float* x, int64_t n_tokens) {
  return n_tokens >= 1 && n_tokens <= kGemv16MaxTokens && cols % 8 == 0 &&
         reinterpret_cast<uintptr_t>(w) % 16 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0;
}

cudaError_t LaunchGemv16(const void* w, bool bf16, int64_t rows, int64_t cols, const float* x,
                         int64_t n_tokens, float* y, cudaStream_t stream) {
  if (!Gemv16Takes(w, cols, x, n_tokens)) return cudaErrorInvalidValue;
  if (rows == 0) return cudaSuccess;
  // Each launch streams the weight once for up to 8 tokens; 3, 5, 6 and 7
  // run as the next size up would waste registers, so as 2 + 1, 4 + 1, ...
  int64_t done = 0;
  while (done < n_tokens) {
    const int64_t left = n_tokens - done;
    const float* xt = x + done * cols;
    float* yt = y + done * rows;
    if (left >= 8) {
      Launch<8>(w, bf16, rows, cols, xt, yt, stream);
      done += 8;
    } else if (left >= 4) {
      Launch<4>(w, bf16, rows, cols, xt, yt, stream);
      done += 4;
    } else if (left >= 2) {
      Launch<2>(w, bf16, rows, cols, xt, yt, stream);
      done += 2;
    } else {
      Launch<1>(w, bf16, rows, cols, xt, yt, stream);
      done += 1;
    }
  }
  return cudaGetLastError();
}

}  // namespace tandem::engine::cuda
