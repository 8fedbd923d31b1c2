// The rows a GEMV launch computes (gemv16.cu, quant_kernels.cu): either the
// rows of up to kMaxGemvProducts products numbered one after another, or,
// for a fused SwiGLU, the rows of a gate and an up product taken in pairs.
// Passed to the kernel by value.
#ifndef TANDEM_ENGINE_CUDA_GEMV_ROWS_CUH_
#define TANDEM_ENGINE_CUDA_GEMV_ROWS_CUH_

#include <cstdint>

#include "engine/cuda/kernels.h"

namespace tandem::engine::cuda {

struct GemvRows {
  const void* w[kMaxGemvProducts] = {};
  float* y[kMaxGemvProducts] = {};
  int64_t rows[kMaxGemvProducts] = {};
  int count = 0;
  int64_t total = 0;  // rows of the launch: the sum, or a pair's rows

  // The products' rows one after another; false for more than
  // kMaxGemvProducts products.
  static bool Of(const GemvProduct* products, int count, GemvRows& out) {
    if (count < 1 || count > kMaxGemvProducts) return false;
    out = GemvRows{};
    for (int i = 0; i < count; ++i) {
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
  // a[i] for one of the arrays above.
  template <typename T>
  __device__ static T Pick(const T (&a)[kMaxGemvProducts], int i) {
    static_assert(kMaxGemvProducts == 3, "one select per product");
    return i == 0 ? a[0] : i == 1 ? a[1] : a[2];
  }
};

// SwiGluKernel's formula (kernels.cu), so a fused product writes the bits
// the separate launches would.
__device__ inline float Silu(float g) { return g / (1.0f + expf(-g)); }

}  // namespace tandem::engine::cuda

#endif  // TANDEM_ENGINE_CUDA_GEMV_ROWS_CUH_
