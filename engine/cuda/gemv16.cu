#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "engine/cuda/gemv16.h"
#include "engine/cuda/gemv_rows.cuh"
#include "engine/cuda/kernels.h"
#include "engine/cuda/launch.cuh"

namespace tandem::engine::cuda {
namespace {

// 16-byte loads in flight per lane and matrix before the first is used.
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
// then the row's first warp adds its partners' in a fixed order. A row is
// one product's (p.Locate), or with kSwiGlu the same row of the gate and
// the up matrix, read side by side and written as silu(gate) * up.
//
// With kNorm the products take RmsNorm(x) with `norm_w`, folded in: each
// column's weight is taken with the matrix's (on the widened weights, or on
// x where a launch has fewer tokens than matrices: the fewer products), the
// warps of the block's first row also sum each token's squares of x (the
// row's warps cover every column once), and every row of the block scales
// its sums by that token's 1 / rms as RmsNorm4Kernel computes it.
template <int kTokens, bool kSwiGlu, bool kNorm>
__global__ void __launch_bounds__(32 * kBlockWarps)
    Gemv16Kernel(GemvRows p, bool bf16, int64_t cols, int split, bool prefetch,
                 const float* __restrict__ x, const float* __restrict__ norm_w, float eps) {
  constexpr int kMats = kSwiGlu ? 2 : 1;
  constexpr bool kNormWeights = kNorm && kTokens > kMats;
  __shared__ float partial[kMats][kBlockWarps][kTokens];
  __shared__ float squares[kNorm ? kBlockWarps : 1][kTokens];
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  int64_t row = static_cast<int64_t>(blockIdx.x) * (kBlockWarps / split) + warp / split;
  const bool live = row < p.total;
  const int which = kSwiGlu || !live ? 0 : p.Locate(row);
  const int part = warp % split;
  // The row's weights, which no kernel writes, asked of L2 while the kernel
  // before may still run (engine/cuda/launch.h).
  if (live && prefetch) {
#pragma unroll
    for (int m = 0; m < kMats; ++m) {
      const auto* w = static_cast<const uint8_t*>(GemvRows::Pick(p.w, which + m));
      PrefetchL2(w + row * cols * 2, cols * 2, 32 * part + lane, 32 * split);
    }
  }
  GridPrologue();
  float acc[kMats][kTokens];
  float sq[kTokens];
#pragma unroll
  for (int t = 0; t < kTokens; ++t) {
    sq[t] = 0.0f;
#pragma unroll
    for (int m = 0; m < kMats; ++m) acc[m][t] = 0.0f;
  }
  const bool squaring = kNorm && warp < split;  // the block's first row, always live
  if (live) {
    const int64_t chunks = cols / 8;  // 16-byte chunks per row
    const int64_t stride = 32 * static_cast<int64_t>(split);
    const uint4* wr[kMats];
#pragma unroll
    for (int m = 0; m < kMats; ++m)
      wr[m] = static_cast<const uint4*>(GemvRows::Pick(p.w, which + m)) + row * chunks;
    for (int64_t base = 32 * part; base < chunks; base += stride * kUnroll) {
      uint4 raw[kMats][kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int64_t c = base + u * stride + lane;
#pragma unroll
        for (int m = 0; m < kMats; ++m) {
          raw[m][u] = c < chunks ? __ldcs(wr[m] + c) : make_uint4(0, 0, 0, 0);
        }
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int64_t c = base + u * stride + lane;
        if (c >= chunks) break;
        float wf[kMats][8];
#pragma unroll
        for (int m = 0; m < kMats; ++m) Widen(raw[m][u], bf16, wf[m]);
        float4 ga = make_float4(1.0f, 1.0f, 1.0f, 1.0f), gb = ga;
        if constexpr (kNorm) {
          ga = __ldg(reinterpret_cast<const float4*>(norm_w) + 2 * c);
          gb = __ldg(reinterpret_cast<const float4*>(norm_w) + 2 * c + 1);
        }
        if constexpr (kNormWeights) {
          const float g[8] = {ga.x, ga.y, ga.z, ga.w, gb.x, gb.y, gb.z, gb.w};
#pragma unroll
          for (int m = 0; m < kMats; ++m) {
#pragma unroll
            for (int i = 0; i < 8; ++i) wf[m][i] *= g[i];
          }
        }
#pragma unroll
        for (int t = 0; t < kTokens; ++t) {
          const float4* xt = reinterpret_cast<const float4*>(x + t * cols) + 2 * c;
          float4 a = __ldg(xt);
          float4 b = __ldg(xt + 1);
          if constexpr (kNorm) {
            if (squaring) sq[t] += SumSquares(a) + SumSquares(b);
            if constexpr (!kNormWeights) {
              a = make_float4(a.x * ga.x, a.y * ga.y, a.z * ga.z, a.w * ga.w);
              b = make_float4(b.x * gb.x, b.y * gb.y, b.z * gb.z, b.w * gb.w);
            }
          }
#pragma unroll
          for (int m = 0; m < kMats; ++m) {
            const float(&f)[8] = wf[m];
            acc[m][t] += f[0] * a.x + f[1] * a.y + f[2] * a.z + f[3] * a.w + f[4] * b.x +
                         f[5] * b.y + f[6] * b.z + f[7] * b.w;
          }
        }
      }
    }
  }
#pragma unroll
  for (int m = 0; m < kMats; ++m) {
#pragma unroll
    for (int t = 0; t < kTokens; ++t) {
      float v = acc[m][t];
      for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
      if (lane == 0) partial[m][warp][t] = v;
    }
  }
  if constexpr (kNorm) StoreSquares(sq, squaring, warp, lane, squares);
  __syncthreads();
  if (live && part == 0 && lane < kTokens) {
    float scale = 1.0f;
    if constexpr (kNorm) scale = NormScale(squares, split, lane, cols, eps);
    p.Store<kSwiGlu>(partial, warp, split, which, row, lane, scale);
  }
}

template <int kTokens, bool kSwiGlu>
void LaunchTokens(const GemvRows& p, bool bf16, int64_t cols, const float* x, const GemvNorm* norm,
                  cudaStream_t stream) {
  const int split = GemvRowSplit(p.total, kBlockWarps);
  const int64_t rows_per_block = kBlockWarps / split;
  const auto blocks = static_cast<unsigned>((p.total + rows_per_block - 1) / rows_per_block);
  if (norm != nullptr) {
    Launch(Gemv16Kernel<kTokens, kSwiGlu, true>, blocks, 32 * kBlockWarps, 0, stream, p, bf16, cols,
           split, ProgrammaticLaunch(), x, norm->weight, norm->eps);
  } else {
    Launch(Gemv16Kernel<kTokens, kSwiGlu, false>, blocks, 32 * kBlockWarps, 0, stream, p, bf16,
           cols, split, ProgrammaticLaunch(), x, static_cast<const float*>(nullptr), 0.0f);
  }
}

bool Aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

bool NormTakes(const GemvNorm* norm) { return norm == nullptr || Aligned16(norm->weight); }

// Each launch streams the weights once for up to 8 tokens; 3, 5, 6 and 7
// run as the next size up would waste registers, so as 2 + 1, 4 + 1, ...
template <bool kSwiGlu>
cudaError_t LaunchAll(GemvRows p, bool bf16, int64_t cols, const float* x, int64_t n_tokens,
                      const GemvNorm* norm, cudaStream_t stream) {
  if (p.total == 0) return cudaSuccess;
  int64_t done = 0;
  while (done < n_tokens) {
    const int64_t left = n_tokens - done;
    const int64_t n = left >= 8 ? 8 : left >= 4 ? 4 : left >= 2 ? 2 : 1;
    GemvRows at = p;
    for (int i = 0; i < p.count; ++i) {
      if (at.y[i] != nullptr) at.y[i] += done * p.rows[i];
    }
    const float* xt = x + done * cols;
    if (n == 8) {
      LaunchTokens<8, kSwiGlu>(at, bf16, cols, xt, norm, stream);
    } else if (n == 4) {
      LaunchTokens<4, kSwiGlu>(at, bf16, cols, xt, norm, stream);
    } else if (n == 2) {
      LaunchTokens<2, kSwiGlu>(at, bf16, cols, xt, norm, stream);
    } else {
      LaunchTokens<1, kSwiGlu>(at, bf16, cols, xt, norm, stream);
    }
    done += n;
  }
  return cudaGetLastError();
}

}  // namespace

bool Gemv16Takes(const void* w, int64_t cols, const float* x, int64_t n_tokens) {
  return n_tokens >= 1 && n_tokens <= kGemv16MaxTokens && cols % 8 == 0 && Aligned16(w) &&
         Aligned16(x);
}

cudaError_t LaunchGemv16(const void* w, bool bf16, int64_t rows, int64_t cols, const float* x,
                         int64_t n_tokens, float* y, cudaStream_t stream) {
  const GemvProduct product{.w = w, .rows = rows, .y = y};
  return LaunchGemv16Group(&product, 1, bf16, cols, x, n_tokens, stream);
}

cudaError_t LaunchGemv16Group(const GemvProduct* products, int count, bool bf16, int64_t cols,
                              const float* x, int64_t n_tokens, cudaStream_t stream,
                              const GemvNorm* norm) {
  GemvRows p;
  if (!GemvRows::Of(products, count, p) || !NormTakes(norm)) return cudaErrorInvalidValue;
  for (int i = 0; i < count; ++i) {
    if (!Gemv16Takes(products[i].w, cols, x, n_tokens)) return cudaErrorInvalidValue;
  }
  return LaunchAll<false>(p, bf16, cols, x, n_tokens, norm, stream);
}

cudaError_t LaunchGemv16SwiGlu(const void* gate, const void* up, bool bf16, int64_t rows,
                               int64_t cols, const float* x, int64_t n_tokens, float* out,
                               cudaStream_t stream, const GemvNorm* norm) {
  if (!Gemv16Takes(gate, cols, x, n_tokens) || !Gemv16Takes(up, cols, x, n_tokens) ||
      !NormTakes(norm)) {
    return cudaErrorInvalidValue;
  }
  return LaunchAll<true>(GemvRows::Pair(gate, up, rows, out), bf16, cols, x, n_tokens, norm,
                         stream);
}

}  // namespace tandem::engine::cuda
