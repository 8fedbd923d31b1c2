// AVX2 versions of the quantized-activation dot products for the types most
// models use (Q4_0, Q4_K, Q5_K, Q6_K): unsigned quants times signed 8-bit
// activations with maddubs, scaled per sub-block with madd, one f32 multiply
// per block, the same integer sums as the portable code; each block is
// unpacked once for every token of a batch. Other types fall back to it.
#include "engine/cpu/quant_dot.h"

#if defined(__x86_64__) && defined(__GNUC__)

#include <immintrin.h>

#include <algorithm>
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

// Each kernel takes one weight row against T tokens (token t's activation
// blocks at xq + t * x_bytes; T a compile-time count, so the accumulators
// live in registers): a block's weights are unpacked once and dotted with
// every token. VecDotRowsAvx2 splits a batch into chunks of 8, 4, 2 and 1.

template <typename XBlock>
inline const XBlock& Act(const uint8_t* xq, int64_t x_bytes, int64_t t, int64_t b) {
  return reinterpret_cast<const XBlock*>(xq + t * x_bytes)[b];
}

template <int T>
TANDEM_AVX2 void RowsQ4_0(const uint8_t* wrow, const uint8_t* xq, int64_t x_bytes, int64_t cols,
                          float* y, int64_t ldy) {
  const auto* w = reinterpret_cast<const BlockQ4_0*>(wrow);
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  const __m256i eight = _mm256_set1_epi8(8);
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc[T];
  #pragma GCC unroll 8
  for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps();
  for (int64_t b = 0; b < cols / kQK4; ++b) {
    const __m128i packed = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w[b].qs));
    const __m256i ws = _mm256_sub_epi8(
        _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(packed, 4), packed), low4), eight);
    // |w| times x carrying w's sign: maddubs needs one unsigned operand.
    const __m256i wabs = _mm256_sign_epi8(ws, ws);
    const float dw = H(w[b].d);
    #pragma GCC unroll 8
    for (int t = 0; t < T; ++t) {
      const BlockQ8_0& x = Act<BlockQ8_0>(xq, x_bytes, t, b);
      const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.qs));
      const __m256i dot = DotU8S8(wabs, _mm256_sign_epi8(xv, ws), ones);
      acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(dw * H(x.d)), _mm256_cvtepi32_ps(dot), acc[t]);
    }
  }
  #pragma GCC unroll 8
  for (int t = 0; t < T; ++t) y[t * ldy] = HorizontalSum(acc[t]);
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

template <int T, bool kFiveBits, typename Block>
TANDEM_AVX2 void RowsQ45K(const uint8_t* wrow, const uint8_t* xq, int64_t x_bytes, int64_t cols,
                          float* y, int64_t ldy) {
  const auto* w = reinterpret_cast<const Block*>(wrow);
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  const __m256i one = _mm256_set1_epi8(1);
  __m256 acc[T];
  float mins_sum[T];
  #pragma GCC unroll 8
  for (int t = 0; t < T; ++t) {
    acc[t] = _mm256_setzero_ps();
    mins_sum[t] = 0;
  }
  for (int64_t b = 0; b < cols / kQKK; ++b) {
    uint8_t sc[8], m[8];
    ScalesMins(w[b].scales, sc, m);
    // The 256 quants as 8 vectors of 32 (sub-block order).
    __m256i q[8];
    [[maybe_unused]] __m256i qh;
    if constexpr (kFiveBits) {
      qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[b].qh));
    }
    #pragma GCC unroll 8
    for (int g = 0; g < 4; ++g) {
      const __m256i packed =
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[b].qs + 32 * g));
      q[2 * g] = _mm256_and_si256(packed, low4);
      q[2 * g + 1] = _mm256_and_si256(_mm256_srli_epi16(packed, 4), low4);
      if constexpr (kFiveBits) {
        const __m256i h0 = _mm256_and_si256(_mm256_srli_epi16(qh, 2 * g), one);
        const __m256i h1 = _mm256_and_si256(_mm256_srli_epi16(qh, 2 * g + 1), one);
        q[2 * g] = _mm256_or_si256(q[2 * g], _mm256_slli_epi16(h0, 4));
        q[2 * g + 1] = _mm256_or_si256(q[2 * g + 1], _mm256_slli_epi16(h1, 4));
      }
    }
    const float dw = H(w[b].d), dmw = H(w[b].dmin);
    #pragma GCC unroll 8
    for (int t = 0; t < T; ++t) {
      const BlockQ8K& x = Act<BlockQ8K>(xq, x_bytes, t, b);
      __m256i isum = _mm256_setzero_si256();
      #pragma GCC unroll 8
      for (int s = 0; s < 8; ++s) {
        const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.qs + 32 * s));
        isum = _mm256_add_epi32(isum, DotU8S8(q[s], xv, _mm256_set1_epi16(sc[s])));
      }
      int mins = 0;
      #pragma GCC unroll 8
      for (int j = 0; j < 8; ++j) mins += m[j] * (x.bsums[2 * j] + x.bsums[2 * j + 1]);
      acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(x.d * dw), _mm256_cvtepi32_ps(isum), acc[t]);
      mins_sum[t] += x.d * dmw * static_cast<float>(mins);
    }
  }
  #pragma GCC unroll 8
  for (int t = 0; t < T; ++t) y[t * ldy] = HorizontalSum(acc[t]) - mins_sum[t];
}

template <int T>
TANDEM_AVX2 void RowsQ6K(const uint8_t* wrow, const uint8_t* xq, int64_t x_bytes, int64_t cols,
                         float* y, int64_t ldy) {
  const auto* w = reinterpret_cast<const BlockQ6_K*>(wrow);
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  const __m256i three = _mm256_set1_epi8(3);
  __m256 acc[T];
  #pragma GCC unroll 8
  for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps();
  for (int64_t b = 0; b < cols / kQKK; ++b) {
    // The 256 quants (0..63) as 8 vectors of 32, and each vector's two
    // sub-block scales.
    __m256i q[8], scales[8];
    #pragma GCC unroll 8
    for (int half = 0; half < 2; ++half) {
      const uint8_t* ql = w[b].ql + 64 * half;
      const __m256i qh =
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[b].qh + 32 * half));
      const __m256i ql0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql));
      const __m256i ql1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql + 32));
      #pragma GCC unroll 8
      for (int k = 0; k < 4; ++k) {
        const __m256i low_src = k % 2 == 0 ? ql0 : ql1;
        const __m256i low = k < 2 ? _mm256_and_si256(low_src, low4)
                                  : _mm256_and_si256(_mm256_srli_epi16(low_src, 4), low4);
        const __m256i high = _mm256_and_si256(_mm256_srli_epi16(qh, 2 * k), three);
        q[4 * half + k] = _mm256_or_si256(low, _mm256_slli_epi16(high, 4));
        const int sub = 8 * half + 2 * k;
        scales[4 * half + k] = _mm256_set_m128i(_mm_set1_epi16(w[b].scales[sub + 1]),
                                                _mm_set1_epi16(w[b].scales[sub]));
      }
    }
    const float dw = H(w[b].d);
    #pragma GCC unroll 8
    for (int t = 0; t < T; ++t) {
      const BlockQ8K& x = Act<BlockQ8K>(xq, x_bytes, t, b);
      // q - 32 = q + (-32): the -32 goes through the activations' sums.
      int offset = 0;
      #pragma GCC unroll 8
      for (int s = 0; s < 16; ++s) offset += w[b].scales[s] * x.bsums[s];
      __m256i isum = _mm256_setzero_si256();
      #pragma GCC unroll 8
      for (int v = 0; v < 8; ++v) {
        const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.qs + 32 * v));
        isum = _mm256_add_epi32(isum, DotU8S8(q[v], xv, scales[v]));
      }
      const __m256 sum = _mm256_sub_ps(_mm256_cvtepi32_ps(isum),
                                       _mm256_set_ps(0, 0, 0, 0, 0, 0, 0, 32.0f * offset));
      acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(x.d * dw), sum, acc[t]);
    }
  }
  #pragma GCC unroll 8
  for (int t = 0; t < T; ++t) y[t * ldy] = HorizontalSum(acc[t]);
}

}  // namespace

bool QuantDotAvx2Supported() {
  static const bool supported = __builtin_cpu_supports("avx2") &&
                                __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
  return supported;
}

namespace {

// Runs kernel<T> on the tokens in chunks of T = 8, 4, 2, 1.
template <void (*kEight)(const uint8_t*, const uint8_t*, int64_t, int64_t, float*, int64_t),
          void (*kFour)(const uint8_t*, const uint8_t*, int64_t, int64_t, float*, int64_t),
          void (*kTwo)(const uint8_t*, const uint8_t*, int64_t, int64_t, float*, int64_t),
          void (*kOne)(const uint8_t*, const uint8_t*, int64_t, int64_t, float*, int64_t)>
void Chunked(const uint8_t* w, const uint8_t* xq, int64_t x_bytes, int64_t n, int64_t cols,
             float* y, int64_t ldy) {
  int64_t t = 0;
  for (; t + 8 <= n; t += 8) kEight(w, xq + t * x_bytes, x_bytes, cols, y + t * ldy, ldy);
  if (n - t >= 4) {
    kFour(w, xq + t * x_bytes, x_bytes, cols, y + t * ldy, ldy);
    t += 4;
  }
  if (n - t >= 2) {
    kTwo(w, xq + t * x_bytes, x_bytes, cols, y + t * ldy, ldy);
    t += 2;
  }
  if (n - t >= 1) kOne(w, xq + t * x_bytes, x_bytes, cols, y + t * ldy, ldy);
}

}  // namespace

void VecDotRowsAvx2(GgmlType type, const uint8_t* w, const uint8_t* xq, int64_t x_bytes,
                    int64_t n, int64_t cols, float* y, int64_t ldy) {
  switch (type) {
    case GgmlType::kQ4_0:
      Chunked<RowsQ4_0<8>, RowsQ4_0<4>, RowsQ4_0<2>, RowsQ4_0<1>>(w, xq, x_bytes, n, cols, y,
                                                                   ldy);
      return;
    case GgmlType::kQ4_K:
      Chunked<RowsQ45K<8, false, BlockQ4_K>, RowsQ45K<4, false, BlockQ4_K>,
              RowsQ45K<2, false, BlockQ4_K>, RowsQ45K<1, false, BlockQ4_K>>(w, xq, x_bytes, n,
                                                                          cols, y, ldy);
      return;
    case GgmlType::kQ5_K:
      Chunked<RowsQ45K<8, true, BlockQ5_K>, RowsQ45K<4, true, BlockQ5_K>,
              RowsQ45K<2, true, BlockQ5_K>, RowsQ45K<1, true, BlockQ5_K>>(w, xq, x_bytes, n,
                                                                        cols, y, ldy);
      return;
    case GgmlType::kQ6_K:
      Chunked<RowsQ6K<8>, RowsQ6K<4>, RowsQ6K<2>, RowsQ6K<1>>(w, xq, x_bytes, n, cols, y, ldy);
      return;
    default:
      VecDotRows(type, w, xq, x_bytes, n, cols, y, ldy);
      return;
  }
}

}  // namespace tandem::engine::cpu

#else

namespace tandem::engine::cpu {
bool QuantDotAvx2Supported() { return false; }
void VecDotRowsAvx2(GgmlType type, const uint8_t* w, const uint8_t* xq, int64_t x_bytes,
                    int64_t n, int64_t cols, float* y, int64_t ldy) {
  VecDotRows(type, w, xq, x_bytes, n, cols, y, ldy);
}
}  // namespace tandem::engine::cpu

#endif
