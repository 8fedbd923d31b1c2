// Decode-time products with 16-bit weights: y[t, r] = sum_c x[t, c] * w[r, c]
// for a few tokens, the weight (f16 or bf16, as GGUF stores it) streamed
// once and widened to f32 in registers, the activations read as f32. At
// batch 1-8 a GEMM on the tensor cores is bound by reading the weight
// anyway, and this skips converting the activations (a launch and a
// rounding) and cuBLAS's small-n kernels. Device pointers; the launch's
// error, like kernels.h.
#ifndef TANDEM_ENGINE_CUDA_GEMV16_H_
#define TANDEM_ENGINE_CUDA_GEMV16_H_

#include <cstdint>

#include <cuda_runtime_api.h>

#include "engine/cuda/kernels.h"

namespace tandem::engine::cuda {

// The most tokens LaunchGemv16 takes in one launch.
inline constexpr int64_t kGemv16MaxTokens = 8;

// Whether LaunchGemv16 takes this shape: 1..kGemv16MaxTokens tokens, cols a
// multiple of 8 (whole 16-byte loads), w and x 16-byte aligned.
bool Gemv16Takes(const void* w, int64_t cols, const float* x, int64_t n_tokens);

// y [n_tokens][rows] = x [n_tokens][cols] * w^T, w [rows][cols] of f16, or
// bf16 when `bf16`. cudaErrorInvalidValue for a shape Gemv16Takes refuses.
cudaError_t LaunchGemv16(const void* w, bool bf16, int64_t rows, int64_t cols, const float* x,
                         int64_t n_tokens, float* y, cudaStream_t stream);

// The `count` (1..kMaxGemvProducts) products of one x, each weight of
// `cols` columns and the same 16-bit type, in one launch per 8 tokens, each
// stored into its y or, with GemvProduct::add, added to it; with `norm`,
// of RmsNorm(x) (GemvNorm). cudaErrorInvalidValue for a count or shape
// LaunchGemv16 would refuse, products that differ in `add`, or a norm
// weight not 16-byte aligned.
cudaError_t LaunchGemv16Group(const GemvProduct* products, int count, bool bf16, int64_t cols,
                              const float* x, int64_t n_tokens, cudaStream_t stream,
                              const GemvNorm* norm = nullptr);

// out [n_tokens][rows] = silu(x gate^T) * (x up^T) for gate and up [rows]
// [cols] of one 16-bit type: the two rows read side by side and the SwiGLU
// applied to their sums, bit for bit LaunchGemv16 twice and LaunchSwiGlu;
// with `norm`, of RmsNorm(x) as LaunchGemv16Group.
cudaError_t LaunchGemv16SwiGlu(const void* gate, const void* up, bool bf16, int64_t rows,
                               int64_t cols, const float* x, int64_t n_tokens, float* out,
                               cudaStream_t stream, const GemvNorm* norm = nullptr);

}  // namespace tandem::engine::cuda

#endif  // TANDEM_ENGINE_CUDA_GEMV16_H_
