// __half for the host emulation (cuda_runtime_api.h): IEEE binary16 bits
// with the device's conversions (round to nearest even, subnormals kept,
// overflow to infinity), written out rather than taken from the compiler's
// _Float16, which not every host compiler has on x86.
#ifndef TANDEM_TESTS_CUDA_EMULATION_CUDA_FP16_H_
#define TANDEM_TESTS_CUDA_EMULATION_CUDA_FP16_H_

#include <cmath>
#include <cstdint>
#include <cstring>

// The raw bits, as CUDA's __half_raw, from which a __half is made.
struct __half_raw {
  unsigned short x = 0;
};

struct __half {
  uint16_t bits = 0;
  __half() = default;
  constexpr __half(uint16_t b) : bits(b) {}          // NOLINT: brace-initialized from bits below
  constexpr __half(__half_raw raw) : bits(raw.x) {}  // NOLINT: CUDA's conversion
};
static_assert(sizeof(__half) == 2 && alignof(__half) == 2, "the device's layout");

// Two halves, 4-byte aligned, as CUDA's.
struct alignas(4) __half2 {
  __half x, y;
};

inline __half __float2half_rn(float f) {
  uint32_t x;
  std::memcpy(&x, &f, sizeof(x));
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  x &= 0x7fffffffu;
  if (x >= 0x7f800000u)
    return {static_cast<uint16_t>(sign | (x > 0x7f800000u ? 0x7e00u : 0x7c00u))};
  if (x >= 0x477ff000u) return {static_cast<uint16_t>(sign | 0x7c00u)};  // 65520 and up: inf
  if (x < 0x38800000u) {  // below 2^-14: a subnormal (or zero) in steps of 2^-24
    const auto m = static_cast<uint16_t>(std::nearbyint(std::fabs(f) * 16777216.0f));
    return {static_cast<uint16_t>(sign | m)};  // 1024 is 2^-14's own bits
  }
  uint32_t h = ((((x >> 23) - 127 + 15) << 10) | ((x & 0x7fffffu) >> 13));
  const uint32_t rest = x & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u) != 0)) ++h;  // a carry is the next exponent
  return {static_cast<uint16_t>(sign | h)};
}
inline __half __float2half(float f) { return __float2half_rn(f); }

inline float __half2float(__half h) {
  const uint32_t sign = static_cast<uint32_t>(h.bits & 0x8000u) << 16;
  const uint32_t e = (h.bits >> 10) & 0x1fu;
  const uint32_t m = h.bits & 0x3ffu;
  if (e == 0) {
    const float v = static_cast<float>(m) * 5.9604644775390625e-8f;  // 2^-24
    return sign != 0 ? -v : v;
  }
  const uint32_t x = sign | (e == 31 ? 0x7f800000u | (m << 13) : ((e + 112) << 23) | (m << 13));
  float f;
  std::memcpy(&f, &x, sizeof(f));
  return f;
}

inline __half __ushort_as_half(unsigned short x) { return {static_cast<uint16_t>(x)}; }

inline __half2 __floats2half2_rn(float a, float b) {
  return {__float2half_rn(a), __float2half_rn(b)};
}

#endif  // TANDEM_TESTS_CUDA_EMULATION_CUDA_FP16_H_
