// AVX2 versions of the quantized-activation dot products for the types most
// models use (Q4_0, Q4_K, Q5_K, Q6_K): unsigned quants times signed 8-bit
// activations with maddubs, scaled per sub-block with madd, one f32 multiply
// per block, the same integer sums as the portable code. Other types fall
// back to it.
#include "engine/cpu/quant_dot.h"

#if defined(__x86_64__) && defined(__GNUC__)

#include <immintrin.h>

#include <cstring>

#define TANDEM_AVX2 __attribute__((target("avx2,fma,f16c")))

namespace tandem::engine::cpu {
namespace {

TANDEM_AVX2 inline float H(uint16_t h) { return _cvtsh_ss(h); }

TANDEM_AVX2 inline float HorizontalSum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// Sum of unsigned a (0..127) times signed b over 32 lanes, as 8 int32 lanes.
TANDEM_AVX2 inline __m256i DotU8S8(__m256i a, __m256i b, __m256i scale16) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(a, b), scale16);
}

TANDEM_AVX2 float DotQ4_0(const uint8_t* wrow, const void* xq, int64_t cols) {
  const auto* w = reinterpret_cast<const BlockQ4_0*>(wrow);
  const auto* x = static_cast<const BlockQ8_0*>(xq);
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  const __m256i eight = _mm256_set1_epi8(8);
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t b = 0; b < cols / kQK4; ++b) {
    const __m128i packed = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w[b].qs));
    const __m256i q = _mm256_and_si256(
        _mm256_set_m128i(_mm_srli_epi16(packed, 4), packed), low4);  // elements 0..31
    const __m256i ws = _mm256_sub_epi8(q, eight);                      // -8..7
    const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[b].qs));
    // |w| times x carrying w's sign: maddubs needs one unsigned operand.
    const __m256i dot = DotU8S8(_mm256_sign_epi8(ws, ws), _mm256_sign_epi8(xv, ws), ones);
    const float d = H(w[b].d) * H(x[b].d);
    acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(dot), acc);
  }
  return HorizontalSum(acc);
}

// Q4_K / Q5_K: the 6-bit scales and mins of the 8 sub-blocks.
inline void ScalesMins(const uint8_t* q, uint8_t* sc, uint8_t* m) {
  for (int j = 0; j < 4; ++j) {
    sc[j] = q[j] & 63;
    m[j] = q[j + 4] & 63;
  }
  for (int j = 4; j < 8; ++j) {
    sc[j] = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    m[j] = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

template <bool kFiveBits, typename Block>
TANDEM_AVX2 float DotQ45K(const uint8_t* wrow, const void* xq, int64_t cols) {
  const auto* w = reinterpret_cast<const Block*>(wrow);
  const auto* x = static_cast<const BlockQ8K*>(xq);
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  const __m256i one = _mm256_set1_epi8(1);
  __m256 acc = _mm256_setzero_ps();
  float mins_sum = 0;
  for (int64_t b = 0; b < cols / kQKK; ++b) {
    uint8_t sc[8], m[8];
    ScalesMins(w[b].scales, sc, m);
    int mins = 0;
    for (int j = 0; j < 8; ++j) mins += m[j] * (x[b].bsums[2 * j] + x[b].bsums[2 * j + 1]);
    [[maybe_unused]] __m256i qh;
    if constexpr (kFiveBits) qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[b].qh));
    __m256i isum = _mm256_setzero_si256();
    for (int g = 0; g < 4; ++g) {
      const __m256i packed = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[b].qs + 32 * g));
      __m256i lo = _mm256_and_si256(packed, low4);
      __m256i hi = _mm256_and_si256(_mm256_srli_epi16(packed, 4), low4);
      if constexpr (kFiveBits) {
        const __m256i h0 = _mm256_and_si256(_mm256_srli_epi16(qh, 2 * g), one);
        const __m256i h1 = _mm256_and_si256(_mm256_srli_epi16(qh, 2 * g + 1), one);
        lo = _mm256_or_si256(lo, _mm256_slli_epi16(h0, 4));
        hi = _mm256_or_si256(hi, _mm256_slli_epi16(h1, 4));
      }
      const __m256i x0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[b].qs + 64 * g));
      const __m256i x1 =
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[b].qs + 64 * g + 32));
      isum = _mm256_add_epi32(isum, DotU8S8(lo, x0, _mm256_set1_epi16(sc[2 * g])));
      isum = _mm256_add_epi32(isum, DotU8S8(hi, x1, _mm256_set1_epi16(sc[2 * g + 1])));
    }
    const float d = x[b].d * H(w[b].d);
    acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(isum), acc);
    mins_sum += x[b].d * H(w[b].dmin) * static_cast<float>(mins);
  }
  return HorizontalSum(acc) - mins_sum;
}

TANDEM_AVX2 float DotQ6K(const uint8_t* wrow, const void* xq, int64_t cols) {
  const auto* w = reinterpret_cast<const BlockQ6_K*>(wrow);
  const auto* x = static_cast<const BlockQ8K*>(xq);
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  const __m256i three = _mm256_set1_epi8(3);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t b = 0; b < cols / kQKK; ++b) {
    // q - 32 = q + (-32): the -32 goes through the activations' sums.
    int offset = 0;
    for (int s = 0; s < 16; ++s) offset += w[b].scales[s] * x[b].bsums[s];
    __m256i isum = _mm256_setzero_si256();
    for (int half = 0; half < 2; ++half) {
      const uint8_t* ql = w[b].ql + 64 * half;
      const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[b].qh + 32 * half));
      const __m256i ql0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql));
      const __m256i ql1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql + 32));
      for (int k = 0; k < 4; ++k) {
        const __m256i low_src = k % 2 == 0 ? ql0 : ql1;
        const __m256i low = k < 2 ? _mm256_and_si256(low_src, low4)
                                  : _mm256_and_si256(_mm256_srli_epi16(low_src, 4), low4);
        const __m256i high = _mm256_and_si256(_mm256_srli_epi16(qh, 2 * k), three);
        const __m256i q = _mm256_or_si256(low, _mm256_slli_epi16(high, 4));  // 0..63
        const int sub = 8 * half + 2 * k;
        const __m256i scales = _mm256_set_m128i(_mm_set1_epi16(w[b].scales[sub + 1]),
                                                _mm_set1_epi16(w[b].scales[sub]));
        const __m256i xv = _mm256_loadu_si256(
            reinterpret_cast<const __m256i*>(x[b].qs + 128 * half + 32 * k));
        isum = _mm256_add_epi32(isum, DotU8S8(q, xv, scales));
      }
    }
    const float d = x[b].d * H(w[b].d);
    const __m256 sum = _mm256_sub_ps(_mm256_cvtepi32_ps(isum),
                                     _mm256_set_ps(0, 0, 0, 0, 0, 0, 0, 32.0f * offset));
    acc = _mm256_fmadd_ps(_mm256_set1_ps(d), sum, acc);
  }
  return HorizontalSum(acc);
}

}  // namespace

bool QuantDotAvx2Supported() {
  static const bool supported = __builtin_cpu_supports("avx2") &&
                                __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
  return supported;
}

float VecDotRowAvx2(GgmlType type, const uint8_t* w, const void* xq, int64_t cols) {
  switch (type) {
    case GgmlType::kQ4_0: return DotQ4_0(w, xq, cols);
    case GgmlType::kQ4_K: return DotQ45K<false, BlockQ4_K>(w, xq, cols);
    case GgmlType::kQ5_K: return DotQ45K<true, BlockQ5_K>(w, xq, cols);
    case GgmlType::kQ6_K: return DotQ6K(w, xq, cols);
    default: return VecDotRow(type, w, xq, cols);
  }
}

}  // namespace tandem::engine::cpu

#else

namespace tandem::engine::cpu {
bool QuantDotAvx2Supported() { return false; }
float VecDotRowAvx2(GgmlType type, const uint8_t* w, const void* xq, int64_t cols) {
  return VecDotRow(type, w, xq, cols);
}
}  // namespace tandem::engine::cpu

#endif
