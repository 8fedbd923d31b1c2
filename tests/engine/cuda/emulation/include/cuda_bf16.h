// cuda_bf16.h for the host emulation (cuda_runtime_api.h): the bf16 type
// and its exact widening to f32, all the kernels use of it (the GEMVs
// widen bf16 by hand).
#ifndef TANDEM_TESTS_CUDA_EMULATION_CUDA_BF16_H_
#define TANDEM_TESTS_CUDA_EMULATION_CUDA_BF16_H_

#include <cstdint>
#include <cstring>

#include "cuda_fp16.h"

struct __nv_bfloat16 {
  uint16_t bits = 0;
};
static_assert(sizeof(__nv_bfloat16) == 2, "the device's layout");

inline float __bfloat162float(__nv_bfloat16 b) {
  const uint32_t x = static_cast<uint32_t>(b.bits) << 16;
  float f;
  std::memcpy(&f, &x, sizeof(f));
  return f;
}

#endif  // TANDEM_TESTS_CUDA_EMULATION_CUDA_BF16_H_
