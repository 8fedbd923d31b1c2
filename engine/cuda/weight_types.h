// The weight types the CUDA matrix products (engine/cuda/matmul.cc) have a
// kernel for. Plain C++, no CUDA headers: a build without nvcc includes it
// too (engine/backend_factory.cc), so a model is refused by weight type the
// same way whether or not this build or machine can run CUDA.
#ifndef TANDEM_ENGINE_CUDA_WEIGHT_TYPES_H_
#define TANDEM_ENGINE_CUDA_WEIGHT_TYPES_H_

#include <algorithm>
#include <array>

#include "engine/gguf/tensor_type.h"

namespace tandem::engine::cuda {

// Adding a case to cuda::MatMul adds its type here; cuda_kernels_test checks
// that MatMul takes exactly these.
inline constexpr std::array<GgmlType, 8> kMatMulWeightTypes = {
    GgmlType::kF32,  GgmlType::kF16,  GgmlType::kBF16, GgmlType::kQ8_0,
    GgmlType::kQ4_0, GgmlType::kQ4_K, GgmlType::kQ5_K, GgmlType::kQ6_K};

constexpr bool HasMatMulKernel(GgmlType type) {
  return std::find(kMatMulWeightTypes.begin(), kMatMulWeightTypes.end(), type) !=
         kMatMulWeightTypes.end();
}

}  // namespace tandem::engine::cuda

#endif  // TANDEM_ENGINE_CUDA_WEIGHT_TYPES_H_
