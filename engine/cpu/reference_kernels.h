// Naive reference versions of every CPU kernel, written for obviousness, not
// speed: double accumulation, one element at a time. Tests compare the
// optimized kernels against them; nothing on the serving path calls them.
// Pure functions; thread-safe.
#ifndef TANDEM_ENGINE_CPU_REFERENCE_KERNELS_H_
#define TANDEM_ENGINE_CPU_REFERENCE_KERNELS_H_

#include <cstdint>
#include <vector>

#include "engine/model/backend.h"

namespace tandem::engine::cpu {

// y[t, r] = sum_c x[t, c] * dequantized w[r, c], exact up to the final
// rounding to f32.
void MatMulReference(const WeightMatrix& w, const float* x, int64_t n_tokens, float* y);

// Like MatMulReference for Q8_0 or Q4_0 weights, but with x first quantized
// per 32-element block as the int8 kernels do (d = max|x| / 127,
// q = nearest-even(x * 127 / max|x|)): the result those kernels should
// reproduce up to f32 summation order.
void MatMulQ8Reference(const WeightMatrix& w, const float* x, int64_t n_tokens, float* y);

// Per-block activation quantization of one row as modeled above; q and d
// receive cols and cols / 32 entries.
void QuantizeActivationsReference(const float* x, int64_t cols, std::vector<int8_t>* q,
                                  std::vector<float>* d);

void RmsNormReference(const float* x, const float* weight, int64_t n_tokens, int64_t dim,
                      float eps, float* y);
void SwiGluReference(const float* gate, const float* up, int64_t n, float* out);
void AddReference(float* x, const float* y, int64_t n);

}  // namespace tandem::engine::cpu

#endif  // TANDEM_ENGINE_CPU_REFERENCE_KERNELS_H_
