// Dot products of block-quantized weight rows (the legacy quants and the
// K-quants; Q8_0 has its own kernels in kernels_*.cc) with activations
// quantized to 8 bits per block the way ggml does for each type, so that the
// products are exact integer sums scaled once per block, as in llama.cpp:
//   Q4_0, Q5_0 x Q8_0 (32 int8, fp16 scale);
//   Q4_1, Q5_1 x Q8_1 (the same plus fp16 d * sum of the block);
//   Q2_K .. Q6_K x Q8_K (256 int8, f32 scale, sums of each 16).
// Portable code and AVX2 versions of the common types (through the kernel
// tables, engine/cpu/kernels.h); callers: engine/cpu/matmul.cc and the
// kernel tests. Pure functions; callers own the buffers.
#ifndef TANDEM_ENGINE_CPU_QUANT_DOT_H_
#define TANDEM_ENGINE_CPU_QUANT_DOT_H_

#include <cstdint>

#include "engine/gguf/quant_formats.h"
#include "engine/gguf/tensor_type.h"

namespace tandem::engine::cpu {

struct BlockQ8_1 {
  uint16_t d;  // fp16
  uint16_t s;  // fp16: d * sum(qs)
  int8_t qs[kQK4];
};
static_assert(sizeof(BlockQ8_1) == 36);

struct BlockQ8K {
  float d;
  int8_t qs[kQKK];
  int16_t bsums[kQKK / 16];
};
static_assert(sizeof(BlockQ8K) == 292);

// Whether `type`'s rows go through VecDotRow (the block-quantized types
// other than Q8_0).
bool HasQuantDot(GgmlType type);

// Bytes of one token's activations of `cols` elements quantized for `type`.
int64_t QuantActivationBytes(GgmlType type, int64_t cols);

// Quantizes one token's activations `x` (cols a multiple of the block size)
// for `type` into `out` (QuantActivationBytes(type, cols) bytes).
void QuantizeActivations(GgmlType type, const float* x, int64_t cols, void* out);

// sum_c w[c] * x[c] for one weight row of `type` and one token's quantized
// activations: portable code.
float VecDotRow(GgmlType type, const uint8_t* w, const void* xq, int64_t cols);

// One weight row against n tokens' activations (token t's at xq + t *
// x_bytes): y[t * ldy] = VecDotRow of token t. Portable code.
void VecDotRows(GgmlType type, const uint8_t* w, const uint8_t* xq, int64_t x_bytes, int64_t n,
                int64_t cols, float* y, int64_t ldy);

// The same with AVX2 + FMA + F16C (the same integer sums; f32 summation
// order differs; each block unpacked once for all the tokens). Needs
// QuantDotAvx2Supported() (engine/cpu/quant_dot_avx2.cc).
bool QuantDotAvx2Supported();
void VecDotRowsAvx2(GgmlType type, const uint8_t* w, const uint8_t* xq, int64_t x_bytes,
                    int64_t n, int64_t cols, float* y, int64_t ldy);

}  // namespace tandem::engine::cpu

#endif  // TANDEM_ENGINE_CPU_QUANT_DOT_H_
