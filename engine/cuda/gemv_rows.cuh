// The rows a GEMV launch computes (gemv16.cu, quant_kernels.cu): either the
// rows of up to kMaxGemvProducts products numbered one after another, or,
// for a fused SwiGLU, the rows of a gate and an up product taken in pairs.
// Passed to the kernel by value.
#ifndef TANDEM_ENGINE_CUDA_GEMV_ROWS_CUH_
#define TANDEM_ENGINE_CUDA_GEMV_ROWS_CUH_

#include <cstdint>

#include "engine/cuda/kernels.h"

namespace tandem::engine::cuda {

// SwiGluKernel's formula (kernels.cu), so a fused product writes the bits
// the separate launches would.
__device__ inline float Silu(float g) { return g / (1.0f + expf(-g)); }

// A norm folded into a GEMV launch (GemvNorm): the warps of a block's first
// row, which between them read every column of x once, sum each token's
// squares as they read (SumSquares); StoreSquares keeps each such warp's
// sums in the block's `squares`, and NormScale gives token t's 1 / rms, as
// RmsNorm4Kernel computes it, from the row's `split` warps' sums added in a
// fixed order.
__device__ inline float SumSquares(float4 v) {
  return v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
}
template <int kWarps, int kTokens>
__device__ void StoreSquares(const float (&sq)[kTokens], bool squaring, int warp, int lane,
                             float (&squares)[kWarps][kTokens]) {
#pragma unroll
  for (int t = 0; t < kTokens; ++t) {
    float v = sq[t];
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if (lane == 0 && squaring) squares[warp][t] = v;
  }
}
template <int kWarps, int kTokens>
__device__ float NormScale(const float (&squares)[kWarps][kTokens], int split, int t, int64_t cols,
                           float eps) {
  float sum = squares[0][t];
  for (int q = 1; q < split; ++q) sum += squares[q][t];
  return rsqrtf(sum / static_cast<float>(cols) + eps);
}

struct GemvRows {
  const void* w[kMaxGemvProducts] = {};
  float* y[kMaxGemvProducts] = {};
  int64_t rows[kMaxGemvProducts] = {};
  int count = 0;
  int64_t total = 0;  // rows of the launch: the sum, or a pair's rows
  bool add = false;   // y += the sums (GemvProduct::add)

  // The products' rows one after another; false for more than
  // kMaxGemvProducts products, or products that differ in `add`.
  static bool Of(const GemvProduct* products, int count, GemvRows& out) {
    if (count < 1 || count > kMaxGemvProducts) return false;
    out = GemvRows{};
    out.add = products[0].add;
    for (int i = 0; i < count; ++i) {
      if (products[i].add != out.add) return false;
      out.w[i] = products[i].w;
      out.y[i] = products[i].y;
      out.rows[i] = products[i].rows;
      out.total += products[i].rows;
    }
    out.count = count;
    return true;
  }
  // A gate and an up product of `rows` rows each, whose row r's two sums
  // give out[t, r] = silu(gate) * up.
  static GemvRows Pair(const void* gate, const void* up, int64_t rows, float* out) {
    GemvRows p;
    p.w[0] = gate;
    p.w[1] = up;
    p.y[0] = out;
    p.rows[0] = rows;
    p.rows[1] = rows;
    p.count = 2;
    p.total = rows;
    return p;
  }

  // The product launch row `row` (< total) falls in; `row` becomes its row
  // there. Constant indices only, here and in Pick: an array of a kernel's
  // argument indexed at run time is copied to local memory first.
  __device__ int Locate(int64_t& row) const {
    int i = 0;
#pragma unroll
    for (int k = 0; k + 1 < kMaxGemvProducts; ++k) {
      if (i == k && k + 1 < count && row >= rows[k]) {
        row -= rows[k];
        i = k + 1;
      }
    }
    return i;
  }
  // Row `row` of product `which` for token t, from the partial sums of the
  // row's `split` warps (partial[m][warp + q][t], added in a fixed order)
  // times `scale` (a folded norm's; 1 is exact): the product's y (added to
  // it with `add`), or silu(gate) * up for a pair.
  template <bool kSwiGlu, int kWarps, int kTokens>
  __device__ void Store(const float (&partial)[kSwiGlu ? 2 : 1][kWarps][kTokens], int warp,
                        int split, int which, int64_t row, int t, float scale = 1.0f) const {
    constexpr int kMats = kSwiGlu ? 2 : 1;
    float sum[kMats];
#pragma unroll
    for (int m = 0; m < kMats; ++m) {
      sum[m] = partial[m][warp][t];
      for (int q = 1; q < split; ++q) sum[m] += partial[m][warp + q][t];
      sum[m] *= scale;
    }
    const int64_t n = Pick(rows, which);
    if constexpr (kSwiGlu) {
      y[0][t * n + row] = Silu(sum[0]) * sum[1];
    } else {
      float& out = Pick(y, which)[t * n + row];
      out = add ? out + sum[0] : sum[0];
    }
  }
  // a[i] for one of the arrays above.
  template <typename T>
  __device__ static T Pick(const T (&a)[kMaxGemvProducts], int i) {
    static_assert(kMaxGemvProducts == 3, "one select per product");
    return i == 0 ? a[0] : i == 1 ? a[1] : a[2];
  }
};

}  // namespace tandem::engine::cuda

#endif  // TANDEM_ENGINE_CUDA_GEMV_ROWS_CUH_
