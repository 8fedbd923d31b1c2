// exp(x) for x <= 0, vectorizable, shared by the sampler's softmax passes
// and attention's online softmax. Header-only, pure; thread-safe.
#ifndef TANDEM_ENGINE_SAMPLE_FAST_EXP_H_
#define TANDEM_ENGINE_SAMPLE_FAST_EXP_H_

#include <algorithm>
#include <bit>
#include <cstdint>

namespace tandem::engine {

// exp(x) for x <= 0 (callers pass differences from a running max), within 2e-7
// relative of the true value; results below ~1e-38 and exp(-inf) are exactly
// 0, so a masked token never gets mass. Written out instead of std::exp
// because it vectorizes (libm's expf is a call per element, the bulk of a
// 150K-row pass) and gives the same bits on every platform.
inline float ExpNonPositive(float x) {
  // Clamp the magnitude at 100 so that -inf stays finite below. For x <= 0
  // the IEEE bit pattern grows with the magnitude, so an unsigned min does
  // it; a float compare here makes GCC split the loop into branches.
  x = std::bit_cast<float>(
      std::min(std::bit_cast<uint32_t>(x), std::bit_cast<uint32_t>(-100.0f)));
  // x = n ln2 + r, |r| <= ln2 / 2. Adding 1.5 * 2^23 rounds x / ln2 to the
  // integer n, which then sits in the low mantissa bits of `shifted`.
  constexpr float kRound = 12582912.0f;
  const float shifted = x * 1.44269504f + kRound;
  const float n = shifted - kRound;
  // ln2 split so that n * kLn2Hi is exact for |n| < 2^11 (Cody-Waite).
  const float r = (x - n * 0.693359375f) - n * -2.12194440e-4f;
  // Taylor series to r^7: truncation error below 1e-8 on |r| <= ln2 / 2.
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  // 2^n from its exponent field; n < -126 gives field 0, i.e. +0.0.
  int32_t biased =
      std::bit_cast<int32_t>(shifted) - std::bit_cast<int32_t>(kRound) + 127;
  biased = std::max(biased, 0);
  return p * std::bit_cast<float>(biased << 23);
}

}  // namespace tandem::engine

#endif  // TANDEM_ENGINE_SAMPLE_FAST_EXP_H_
