// The GPU kernels for block-quantized weights (GGUF's Q8_0, Q4_0, Q4_K,
// Q5_K, Q6_K), as host-callable launchers on a stream: the decode-time
// matrix-vector product that dequantizes on the fly, the whole-matrix
// dequantization to f16 for the tensor-core GEMM, and the embedding gather.
// All pointers are device memory, shapes row-major as in
// engine/model/backend.h; each launcher returns the launch's error, not the
// kernel's outcome (synchronize the stream to see that), and
// cudaErrorInvalidValue for a type it has no kernel for or a `cols` that is
// not a multiple of the type's block size. Compiled by nvcc
// (quant_kernels.cu); this header is plain C++.
#ifndef TANDEM_ENGINE_CUDA_QUANT_KERNELS_H_
#define TANDEM_ENGINE_CUDA_QUANT_KERNELS_H_

#include <cstdint>

#include <cuda_runtime_api.h>

#include "engine/cuda/kernels.h"
#include "engine/gguf/tensor_type.h"

namespace tandem::engine::cuda {

// Tokens one GEMV launch multiplies per read of the weight; LaunchMatMulQuant
// takes any count, in launches of at most this many.
inline constexpr int64_t kQuantGemvTokensPerLaunch = 16;
// The same with an RMSNorm folded in (GemvNorm): the norm's weight and the
// tokens' squares take registers that more tokens' sums would spill
// (ptxas -v, sm_90).
inline constexpr int64_t kQuantGemvNormTokensPerLaunch = 4;

// y[t, r] = sum_c x[t, c] * w[r, c] for w [rows][cols] in `type`'s blocks
// (Q8_0, Q4_0, Q4_K, Q5_K or Q6_K), dequantized on the fly in f32. `w` is
// 16-byte aligned for Q4_K and Q5_K (cudaMalloc's 256 and GGUF's 32-byte
// tensor alignment both are), 2-byte aligned otherwise; `x` is 16-byte
// aligned; cudaErrorMisalignedAddress if not.
cudaError_t LaunchMatMulQuant(GgmlType type, const void* w, int64_t rows, int64_t cols,
                              const float* x, int64_t n_tokens, float* y, cudaStream_t stream);

// The `count` (1..kMaxGemvProducts) products of one x, every weight in
// `type` with `cols` columns, in one launch per kQuantGemvTokensPerLaunch
// tokens (kQuantGemvNormTokensPerLaunch with a norm), each stored into its
// y or, with GemvProduct::add, added to it; with `norm`, of RmsNorm(x)
// (GemvNorm). Errors as LaunchMatMulQuant's, cudaErrorInvalidValue for a
// count out of range or products that differ in `add`,
// cudaErrorMisalignedAddress for a norm weight not 16-byte aligned.
cudaError_t LaunchMatMulQuantGroup(GgmlType type, const GemvProduct* products, int count,
                                   int64_t cols, const float* x, int64_t n_tokens,
                                   cudaStream_t stream, const GemvNorm* norm = nullptr);

// out [n_tokens][rows] = silu(x gate^T) * (x up^T) for gate and up [rows]
// [cols] in `type`, decoded side by side: bit for bit LaunchMatMulQuant
// twice and LaunchSwiGlu; with `norm`, of RmsNorm(x) as
// LaunchMatMulQuantGroup.
cudaError_t LaunchMatMulQuantSwiGlu(GgmlType type, const void* gate, const void* up, int64_t rows,
                                    int64_t cols, const float* x, int64_t n_tokens, float* out,
                                    cudaStream_t stream, const GemvNorm* norm = nullptr);

// out_f16 [rows][cols] = w dequantized and rounded to f16 (nearest even),
// for any of LaunchMatMulQuant's types; `w` aligned as there, `out_f16`
// 16-byte aligned.
cudaError_t LaunchDequantizeToF16(GgmlType type, const void* w, int64_t rows, int64_t cols,
                                  void* out_f16, cudaStream_t stream);

// out[t, :] = row tokens[t] of `table` ([vocab][cols] of `type`: F32, F16,
// BF16 or one of LaunchMatMulQuant's types) as f32, bit for bit what the
// CPU's DequantizeRow gives. The ids are not checked against the vocabulary
// (the launcher does not know it): the caller validates them. `table`
// aligned as LaunchMatMulQuant's `w` (4 bytes for F32).
cudaError_t LaunchEmbedRows(GgmlType type, const void* table, int64_t cols, const int32_t* tokens,
                            int64_t n_tokens, float* out, cudaStream_t stream);

}  // namespace tandem::engine::cuda

#endif  // TANDEM_ENGINE_CUDA_QUANT_KERNELS_H_
