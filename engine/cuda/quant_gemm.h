// The product of a block-quantized weight with a few dozen tokens on the
// tensor cores, without an f16 copy of the weight: between the quantized
// GEMV's 16 tokens (quant_kernels.h) and prefill's sizes, where the weight
// is dequantized whole and multiplied by cuBLAS (matmul.h). Device
// pointers; the launch's error, like kernels.h. Compiled by nvcc
// (quant_gemm.cu); this header is plain C++.
#ifndef TANDEM_ENGINE_CUDA_QUANT_GEMM_H_
#define TANDEM_ENGINE_CUDA_QUANT_GEMM_H_

#include <cstdint>

#include <cuda_runtime_api.h>

#include "engine/gguf/tensor_type.h"

namespace tandem::engine::cuda {

// The most tokens MatMul gives LaunchQuantTileGemm: each 32 tokens read the
// weight once more, where the dequantize-then-cuBLAS path writes and reads
// back an f16 copy 3.6x a Q4_K weight's bytes (not yet measured on a GPU).
inline constexpr int64_t kQuantTileGemmMaxTokens = 64;

// y [n_tokens][rows] = x [n_tokens][cols] w^T, or with `add` y += it, for w
// [rows][cols] in `type`'s blocks (Q8_0, Q4_0, Q4_K, Q5_K or Q6_K). A block
// of the grid takes 64 rows and 32 tokens: its two groups of four warps
// take turns at its rows' 128-column chunks, each dequantizing one into
// shared memory as f16 (rounded as LaunchDequantizeToF16 rounds them), with
// the tokens' x rounded to f16 beside it, and multiplying the two on the
// tensor cores with f32 accumulation (68 KiB of shared memory a block):
// the f16 GEMM's rounding, as dequantizing then cuBLAS gives, with the
// weight read once per 32 tokens. Any n_tokens is taken.
// cudaErrorInvalidValue for another type or a `cols` not of whole blocks;
// cudaErrorMisalignedAddress for `w` aligned as LaunchMatMulQuant's must
// be, or `x` not 16-byte aligned.
cudaError_t LaunchQuantTileGemm(GgmlType type, const void* w, int64_t rows, int64_t cols,
                                const float* x, int64_t n_tokens, float* y, bool add,
                                cudaStream_t stream);

}  // namespace tandem::engine::cuda

#endif  // TANDEM_ENGINE_CUDA_QUANT_GEMM_H_
