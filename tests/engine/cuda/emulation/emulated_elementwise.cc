// engine/cuda/kernels.cu compiled for the host (emulated_kernels.h), as
// emulated_gemv16.cc compiles the 16-bit GEMVs: its RMSNorms, the SwiGLU
// and the conversions of activations to 16 bits for the tensor cores.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "tests/engine/cuda/emulation/emulated_kernels.h"

#define tandem tandem_emulated
#include "engine/cuda/kernels.cu"
#undef tandem

namespace tandem::engine::cuda::emulation {

namespace real = tandem_emulated::engine::cuda;

int RunRmsNorm(const float* x, const float* weight, int64_t n_tokens, int64_t dim, float eps,
               float* y) {
  return real::LaunchRmsNorm(x, weight, n_tokens, dim, eps, y, nullptr);
}

int RunRmsNorm16(const float* x, const float* weight, int64_t n_tokens, int64_t dim, float eps,
                 bool bf16, void* y) {
  return real::LaunchRmsNorm16(x, weight, n_tokens, dim, eps, bf16, y, nullptr);
}

int RunSwiGlu(const float* gate, const float* up, int64_t n, float* out) {
  return real::LaunchSwiGlu(gate, up, n, out, nullptr);
}

int RunSwiGlu16(const float* gate, const float* up, int64_t n, bool bf16, void* out) {
  return real::LaunchSwiGlu16(gate, up, n, bf16, out, nullptr);
}

int RunTo16(const float* x, int64_t n, bool bf16, void* out) {
  return bf16 ? real::LaunchToBf16(x, n, out, nullptr) : real::LaunchToF16(x, n, out, nullptr);
}

}  // namespace tandem::engine::cuda::emulation
