// engine/cuda/gemv16.cu compiled for the host (emulated_kernels.h), as
// emulated_attention.cc compiles the attention tiles.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "tests/engine/cuda/emulation/emulated_kernels.h"

#define tandem tandem_emulated
#include "engine/cuda/gemv16.cu"
#undef tandem

namespace tandem::engine::cuda::emulation {

namespace {

using tandem_emulated::engine::cuda::GemvNorm;

// The launch's norm, or null.
const GemvNorm* NormOf(const float* weight, float eps, GemvNorm& norm) {
  if (weight == nullptr) return nullptr;
  norm = {.weight = weight, .eps = eps};
  return &norm;
}

}  // namespace

int RunGemv16Group(const Product* products, int count, bool bf16, int64_t cols, const float* x,
                   int64_t n_tokens, const float* norm_weight, float eps) {
  std::vector<tandem_emulated::engine::cuda::GemvProduct> ps(count);
  for (int i = 0; i < count; ++i) {
    ps[i] = {
        .w = products[i].w, .rows = products[i].rows, .y = products[i].y, .add = products[i].add};
  }
  GemvNorm norm;
  return tandem_emulated::engine::cuda::LaunchGemv16Group(ps.data(), count, bf16, cols, x, n_tokens,
                                                          nullptr, NormOf(norm_weight, eps, norm));
}

int RunGemv16SwiGlu(const void* gate, const void* up, bool bf16, int64_t rows, int64_t cols,
                    const float* x, int64_t n_tokens, float* out, const float* norm_weight,
                    float eps) {
  GemvNorm norm;
  return tandem_emulated::engine::cuda::LaunchGemv16SwiGlu(
      gate, up, bf16, rows, cols, x, n_tokens, out, nullptr, NormOf(norm_weight, eps, norm));
}

uint16_t HalfBits(float f) { return __float2half_rn(f).bits; }

float HalfValue(uint16_t bits) { return __half2float(__ushort_as_half(bits)); }

}  // namespace tandem::engine::cuda::emulation
