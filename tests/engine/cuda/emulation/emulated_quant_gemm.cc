// engine/cuda/quant_gemm.cu compiled for the host (emulated_kernels.h), as
// emulated_quant.cc compiles the rest of the quantized formats' kernels (a
// unit of its own: both files have kernels' constants of the same names).
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "tests/engine/cuda/emulation/emulated_kernels.h"

#define tandem tandem_emulated
#include "engine/cuda/quant_gemm.cu"
#undef tandem

namespace tandem::engine::cuda::emulation {

int64_t QuantTileGemmMaxTokens() { return tandem_emulated::engine::cuda::kQuantTileGemmMaxTokens; }

int RunQuantTileGemm(int type, const void* w, int64_t rows, int64_t cols, const float* x,
                     int64_t n_tokens, float* y, bool add) {
  return tandem_emulated::engine::cuda::LaunchQuantTileGemm(
      static_cast<tandem_emulated::engine::GgmlType>(type), w, rows, cols, x, n_tokens, y, add,
      nullptr);
}

}  // namespace tandem::engine::cuda::emulation
