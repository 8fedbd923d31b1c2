// __half for the host emulation (cuda_runtime_api.h): the compiler's
// _Float16, IEEE binary16 with round-to-nearest-even conversions, as the
// device's __float2half_rn.
#ifndef TANDEM_TESTS_CUDA_EMULATION_CUDA_FP16_H_
#define TANDEM_TESTS_CUDA_EMULATION_CUDA_FP16_H_

using __half = _Float16;

inline __half __float2half_rn(float x) { return static_cast<_Float16>(x); }
inline __half __float2half(float x) { return static_cast<_Float16>(x); }
inline float __half2float(__half x) { return static_cast<float>(x); }
inline __half __ushort_as_half(unsigned short x) {
  __half h;
  __builtin_memcpy(&h, &x, sizeof(h));
  return h;
}

#endif  // TANDEM_TESTS_CUDA_EMULATION_CUDA_FP16_H_
