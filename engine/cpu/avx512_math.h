// Vector math shared by the AVX-512 kernels (matmul/elementwise and
// attention). Include only from files whose functions carry TANDEM_AVX512;
// callers must check the CPU first. Header-only; pure; thread-safe.
#ifndef TANDEM_ENGINE_CPU_AVX512_MATH_H_
#define TANDEM_ENGINE_CPU_AVX512_MATH_H_

#include <immintrin.h>

#include <cstdint>

// The instruction sets the AVX-512 kernels are compiled for, per function,
// so the rest of the build stays portable.
#define TANDEM_AVX512 \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,fma,f16c,avx2")))

namespace tandem::engine::cpu {

// The first n lanes of 16 (none for n <= 0, all for n >= 16).
inline __mmask16 LaneMask(int64_t n) {
  if (n <= 0) return 0;
  return n >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << n) - 1);
}

// e^x on 16 lanes with a degree-7 Taylor polynomial on |r| <= ln2/2
// (relative error ~1e-8 before rounding) and scalef for the power of two,
// which saturates to 0 / inf outside the float range. NaN propagates.
TANDEM_AVX512 inline __m512 Exp16(__m512 x) {
  x = _mm512_min_ps(_mm512_set1_ps(100.0f), _mm512_max_ps(_mm512_set1_ps(-100.0f), x));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.0f / 5040.0f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(p, n);
}

}  // namespace tandem::engine::cpu

#endif  // TANDEM_ENGINE_CPU_AVX512_MATH_H_
