// cuda_bf16.h for the host emulation (cuda_runtime_api.h): the bf16 type,
// its exact widening to f32 and the device's rounding to it, all the
// kernels use of it (the GEMVs widen bf16 by hand).
#ifndef TANDEM_TESTS_CUDA_EMULATION_CUDA_BF16_H_
#define TANDEM_TESTS_CUDA_EMULATION_CUDA_BF16_H_

#include <cmath>
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

// Round to nearest even; a NaN becomes the device's canonical one.
inline __nv_bfloat16 __float2bfloat16_rn(float f) {
  if (std::isnan(f)) return {0x7fff};
  uint32_t x;
  std::memcpy(&x, &f, sizeof(x));
  x += 0x7fffu + ((x >> 16) & 1u);  // a carry is the next exponent (or infinity)
  return {static_cast<uint16_t>(x >> 16)};
}

#endif  // TANDEM_TESTS_CUDA_EMULATION_CUDA_BF16_H_
