// engine/cuda/quant_kernels.cu compiled for the host (emulated_kernels.h), as
// emulated_gemv16.cc compiles the 16-bit GEMVs.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "tests/engine/cuda/emulation/emulated_kernels.h"

#define tandem tandem_emulated
#include "engine/cuda/quant_kernels.cu"
#undef tandem

namespace tandem::engine::cuda::emulation {

namespace {

namespace real = tandem_emulated::engine::cuda;
using tandem_emulated::engine::GgmlType;

// The launch's norm, or null.
const real::GemvNorm* NormOf(const float* weight, float eps, real::GemvNorm& norm) {
  if (weight == nullptr) return nullptr;
  norm = {.weight = weight, .eps = eps};
  return &norm;
}

}  // namespace

int64_t QuantGemvNormTokensPerLaunch() { return real::kQuantGemvNormTokensPerLaunch; }

int RunMatMulQuantGroup(int type, const Product* products, int count, int64_t cols, const float* x,
                        int64_t n_tokens, const float* norm_weight, float eps) {
  std::vector<real::GemvProduct> ps(count);
  for (int i = 0; i < count; ++i) {
    ps[i] = {
        .w = products[i].w, .rows = products[i].rows, .y = products[i].y, .add = products[i].add};
  }
  real::GemvNorm norm;
  return real::LaunchMatMulQuantGroup(static_cast<GgmlType>(type), ps.data(), count, cols, x,
                                      n_tokens, nullptr, NormOf(norm_weight, eps, norm));
}

int RunMatMulQuantSwiGlu(int type, const void* gate, const void* up, int64_t rows, int64_t cols,
                         const float* x, int64_t n_tokens, float* out, const float* norm_weight,
                         float eps) {
  real::GemvNorm norm;
  return real::LaunchMatMulQuantSwiGlu(static_cast<GgmlType>(type), gate, up, rows, cols, x,
                                       n_tokens, out, nullptr, NormOf(norm_weight, eps, norm));
}

int RunDequantizeToF16(int type, const void* w, int64_t rows, int64_t cols, void* out_f16) {
  return real::LaunchDequantizeToF16(static_cast<GgmlType>(type), w, rows, cols, out_f16, nullptr);
}

int RunEmbedRows(int type, const void* table, int64_t cols, const int32_t* tokens, int64_t n_tokens,
                 float* out) {
  return real::LaunchEmbedRows(static_cast<GgmlType>(type), table, cols, tokens, n_tokens, out,
                               nullptr);
}

}  // namespace tandem::engine::cuda::emulation
