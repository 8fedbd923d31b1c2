// AVX2 versions of the quantized-activation dot products for every
// quantized type but Q8_0 (which has its own gemv): unsigned quants (or |w|
// with the activations carrying w's sign) times signed 8-bit activations
// with maddubs, scaled per sub-block with madd, one f32 multiply per block,
// the same integer sums as the portable code; each block is unpacked once
// for every token of a batch.
#include "engine/cpu/quant_dot.h"

#include "engine/cpu/kernels.h"

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

// Q4_0 (q - 8) and IQ4_NL (the table's level q): one 18-byte block layout.
template <int T, bool kTable>
TANDEM_AVX2 void RowsQ4_0(const uint8_t* wrow, const uint8_t* xq, int64_t x_bytes, int64_t cols,
                          float* y, int64_t ldy) {
  static_assert(sizeof(BlockQ4_0) == sizeof(BlockIQ4_NL));
  const auto* w = reinterpret_cast<const BlockQ4_0*>(wrow);
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  const __m256i eight = _mm256_set1_epi8(8);
  const __m256i levels = _mm256_broadcastsi128_si256(
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(kIq4NlValues)));
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc[T];
  #pragma GCC unroll 8
  for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps();
  for (int64_t b = 0; b < cols / kQK4; ++b) {
    const __m128i packed = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w[b].qs));
    const __m256i nibbles =
        _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(packed, 4), packed), low4);
    const __m256i ws = kTable ? _mm256_shuffle_epi8(levels, nibbles)
                              : _mm256_sub_epi8(nibbles, eight);
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

// A token's dot with a super-block unpacked to 8 vectors of 32 unsigned
// quants, each vector's two 16-element halves scaled by its scales (int16
// lanes): the exact integer sum, in 8 int32 lanes.
TANDEM_AVX2 inline __m256i SuperBlockDot(const __m256i (&q)[8], const __m256i (&scales)[8],
                                         const int8_t* xqs) {
  __m256i isum = _mm256_setzero_si256();
  #pragma GCC unroll 8
  for (int v = 0; v < 8; ++v) {
    const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xqs + 32 * v));
    isum = _mm256_add_epi32(isum, DotU8S8(q[v], xv, scales[v]));
  }
  return isum;
}

// Q4_K / Q5_K: the 8 6-bit scales (bytes 0..7) and mins (bytes 8..15) of
// a super-block, rearranged from their 12 packed bytes four at a time.
TANDEM_AVX2 inline __m128i ScalesMins(const uint8_t* packed) {
  constexpr uint32_t kLow6 = 0x3f3f3f3f, kLow4 = 0x0f0f0f0f, kLow2 = 0x03030303;
  uint32_t u[4];
  std::memcpy(u, packed, 12);
  // Sub-blocks 4..7: low 4 bits from bytes 8..11, high 2 from the tops of
  // bytes 0..3 (scales) and 4..7 (mins).
  u[3] = ((u[2] >> 4) & kLow4) | (((u[1] >> 6) & kLow2) << 4);
  const uint32_t mins_low = u[1] & kLow6;
  u[1] = (u[2] & kLow4) | (((u[0] >> 6) & kLow2) << 4);
  u[2] = mins_low;
  u[0] &= kLow6;
  return _mm_loadu_si128(reinterpret_cast<const __m128i*>(u));
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
    const __m128i sm = ScalesMins(w[b].scales);
    const __m128i mins16 = _mm_cvtepu8_epi16(_mm_srli_si128(sm, 8));
    // Each scale broadcast to the 16-bit lanes of a vector.
    const __m256i sc16 = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(sm));
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
    __m256i scales[8];
    #pragma GCC unroll 8
    for (int v = 0; v < 8; ++v) {
      const auto word_v = static_cast<int16_t>(0x0100 * (2 * v + 1) + 2 * v);  // bytes 2v, 2v+1
      scales[v] = _mm256_shuffle_epi8(sc16, _mm256_set1_epi16(word_v));
    }
    const float dw = H(w[b].d), dmw = H(w[b].dmin);
    #pragma GCC unroll 8
    for (int t = 0; t < T; ++t) {
      const BlockQ8K& x = Act<BlockQ8K>(xq, x_bytes, t, b);
      const __m256i isum = SuperBlockDot(q, scales, x.qs);
      // sum_j m[j] * (bsums[2j] + bsums[2j + 1]).
      const __m128i bsums = _mm_hadd_epi16(
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(x.bsums)),
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(x.bsums + 8)));
      __m128i mins = _mm_madd_epi16(mins16, bsums);
      mins = _mm_hadd_epi32(mins, mins);
      mins = _mm_hadd_epi32(mins, mins);
      acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(x.d * dw), _mm256_cvtepi32_ps(isum), acc[t]);
      mins_sum[t] += x.d * dmw * static_cast<float>(_mm_cvtsi128_si32(mins));
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
      const __m256i isum = SuperBlockDot(q, scales, x.qs);
      const __m256 sum = _mm256_sub_ps(_mm256_cvtepi32_ps(isum),
                                       _mm256_set_ps(0, 0, 0, 0, 0, 0, 0, 32.0f * offset));
      acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(x.d * dw), sum, acc[t]);
    }
  }
  #pragma GCC unroll 8
  for (int t = 0; t < T; ++t) y[t * ldy] = HorizontalSum(acc[t]);
}

// The fifth bits of a Q5_0 / Q5_1 block (bit j of qh for element j) as
// 0x10 in the bytes whose bit is set.
TANDEM_AVX2 inline __m256i FifthBits(const uint8_t* qh_bytes) {
  uint32_t qh;
  std::memcpy(&qh, qh_bytes, 4);
  const __m256i shuffle = _mm256_setr_epi64x(0, 0x0101010101010101, 0x0202020202020202,
                                             0x0303030303030303);
  const __m256i bytes = _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(qh)), shuffle);
  const __m256i bit = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201));
  const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(bytes, bit), bit);
  return _mm256_and_si256(set, _mm256_set1_epi8(0x10));
}

// The 32 nibbles of a legacy block in element order.
TANDEM_AVX2 inline __m256i Nibbles(const uint8_t* qs) {
  const __m128i packed = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(packed, 4), packed),
                          _mm256_set1_epi8(0x0F));
}

template <int T>
TANDEM_AVX2 void RowsQ5_0(const uint8_t* wrow, const uint8_t* xq, int64_t x_bytes, int64_t cols,
                          float* y, int64_t ldy) {
  const auto* w = reinterpret_cast<const BlockQ5_0*>(wrow);
  const __m256i sixteen = _mm256_set1_epi8(16);
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc[T];
  #pragma GCC unroll 8
  for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps();
  for (int64_t b = 0; b < cols / kQK4; ++b) {
    const __m256i ws =
        _mm256_sub_epi8(_mm256_or_si256(Nibbles(w[b].qs), FifthBits(w[b].qh)), sixteen);
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

// Q4_1 / Q5_1: unsigned quants, the min through the activations' d * sum.
template <int T, bool kFiveBits, typename Block>
TANDEM_AVX2 void RowsWithMin(const uint8_t* wrow, const uint8_t* xq, int64_t x_bytes,
                             int64_t cols, float* y, int64_t ldy) {
  const auto* w = reinterpret_cast<const Block*>(wrow);
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc[T];
  float mins[T];
  #pragma GCC unroll 8
  for (int t = 0; t < T; ++t) {
    acc[t] = _mm256_setzero_ps();
    mins[t] = 0;
  }
  for (int64_t b = 0; b < cols / kQK4; ++b) {
    __m256i q = Nibbles(w[b].qs);
    if constexpr (kFiveBits) q = _mm256_or_si256(q, FifthBits(w[b].qh));
    const float dw = H(w[b].d), mw = H(w[b].m);
    #pragma GCC unroll 8
    for (int t = 0; t < T; ++t) {
      const BlockQ8_1& x = Act<BlockQ8_1>(xq, x_bytes, t, b);
      const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.qs));
      const __m256i dot = DotU8S8(q, xv, ones);
      acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(dw * H(x.d)), _mm256_cvtepi32_ps(dot), acc[t]);
      mins[t] += mw * H(x.s);
    }
  }
  #pragma GCC unroll 8
  for (int t = 0; t < T; ++t) y[t * ldy] = HorizontalSum(acc[t]) + mins[t];
}

// Q2_K / Q3_K: the 2-bit planes of a super-block as 8 vectors of 32
// quants (element order: half h, plane p -> vector 4h + p).
TANDEM_AVX2 inline void Planes(const uint8_t* qs, __m256i* q) {
  const __m256i three = _mm256_set1_epi8(3);
  #pragma GCC unroll 8
  for (int half = 0; half < 2; ++half) {
    const __m256i bytes = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 32 * half));
    #pragma GCC unroll 8
    for (int p = 0; p < 4; ++p) {
      q[4 * half + p] = _mm256_and_si256(_mm256_srli_epi16(bytes, 2 * p), three);
    }
  }
}

template <int T>
TANDEM_AVX2 void RowsQ2K(const uint8_t* wrow, const uint8_t* xq, int64_t x_bytes, int64_t cols,
                         float* y, int64_t ldy) {
  const auto* w = reinterpret_cast<const BlockQ2_K*>(wrow);
  __m256 acc[T];
  float mins_sum[T];
  #pragma GCC unroll 8
  for (int t = 0; t < T; ++t) {
    acc[t] = _mm256_setzero_ps();
    mins_sum[t] = 0;
  }
  for (int64_t b = 0; b < cols / kQKK; ++b) {
    __m256i q[8], scales[8];
    Planes(w[b].qs, q);
    #pragma GCC unroll 8
    for (int v = 0; v < 8; ++v) {
      scales[v] = _mm256_set_m128i(_mm_set1_epi16(w[b].scales[2 * v + 1] & 0xF),
                                   _mm_set1_epi16(w[b].scales[2 * v] & 0xF));
    }
    const float dw = H(w[b].d), dmw = H(w[b].dmin);
    #pragma GCC unroll 8
    for (int t = 0; t < T; ++t) {
      const BlockQ8K& x = Act<BlockQ8K>(xq, x_bytes, t, b);
      const __m256i isum = SuperBlockDot(q, scales, x.qs);
      int mins = 0;
      #pragma GCC unroll 8
      for (int j = 0; j < 16; ++j) mins += x.bsums[j] * (w[b].scales[j] >> 4);
      acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(x.d * dw), _mm256_cvtepi32_ps(isum), acc[t]);
      mins_sum[t] += x.d * dmw * static_cast<float>(mins);
    }
  }
  #pragma GCC unroll 8
  for (int t = 0; t < T; ++t) y[t * ldy] = HorizontalSum(acc[t]) - mins_sum[t];
}

template <int T>
TANDEM_AVX2 void RowsQ3K(const uint8_t* wrow, const uint8_t* xq, int64_t x_bytes, int64_t cols,
                         float* y, int64_t ldy) {
  const auto* w = reinterpret_cast<const BlockQ3_K*>(wrow);
  const __m256i one = _mm256_set1_epi8(1);
  __m256 acc[T];
  #pragma GCC unroll 8
  for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps();
  for (int64_t b = 0; b < cols / kQKK; ++b) {
    // q = low 2 bits | high bit << 2 (0..7); the value is q - 4, the -4
    // going through the activations' sums.
    __m256i q[8], scales[8];
    Planes(w[b].qs, q);
    const __m256i hmask = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[b].hmask));
    #pragma GCC unroll 8
    for (int v = 0; v < 8; ++v) {
      const __m256i h = _mm256_and_si256(_mm256_srli_epi16(hmask, v), one);
      q[v] = _mm256_or_si256(q[v], _mm256_slli_epi16(h, 2));
    }
    int8_t sc[16];
    UnpackScalesQ3K(w[b].scales, sc);
    #pragma GCC unroll 8
    for (int v = 0; v < 8; ++v) {
      scales[v] = _mm256_set_m128i(_mm_set1_epi16(sc[2 * v + 1]), _mm_set1_epi16(sc[2 * v]));
    }
    const float dw = H(w[b].d);
    #pragma GCC unroll 8
    for (int t = 0; t < T; ++t) {
      const BlockQ8K& x = Act<BlockQ8K>(xq, x_bytes, t, b);
      int offset = 0;
      #pragma GCC unroll 8
      for (int j = 0; j < 16; ++j) offset += sc[j] * x.bsums[j];
      const __m256i isum = SuperBlockDot(q, scales, x.qs);
      const __m256 sum = _mm256_sub_ps(_mm256_cvtepi32_ps(isum),
                                       _mm256_set_ps(0, 0, 0, 0, 0, 0, 0, 4.0f * offset));
      acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(x.d * dw), sum, acc[t]);
    }
  }
  #pragma GCC unroll 8
  for (int t = 0; t < T; ++t) y[t * ldy] = HorizontalSum(acc[t]);
}

}  // namespace

bool QuantDotAvx2Supported() { return IsaSupported(Isa::kAvx2); }

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
      Chunked<RowsQ4_0<8, false>, RowsQ4_0<4, false>, RowsQ4_0<2, false>, RowsQ4_0<1, false>>(
          w, xq, x_bytes, n, cols, y, ldy);
      return;
    case GgmlType::kIQ4_NL:
      Chunked<RowsQ4_0<8, true>, RowsQ4_0<4, true>, RowsQ4_0<2, true>, RowsQ4_0<1, true>>(
          w, xq, x_bytes, n, cols, y, ldy);
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
    case GgmlType::kQ5_0:
      Chunked<RowsQ5_0<8>, RowsQ5_0<4>, RowsQ5_0<2>, RowsQ5_0<1>>(w, xq, x_bytes, n, cols, y,
                                                                   ldy);
      return;
    case GgmlType::kQ4_1:
      Chunked<RowsWithMin<8, false, BlockQ4_1>, RowsWithMin<4, false, BlockQ4_1>,
              RowsWithMin<2, false, BlockQ4_1>, RowsWithMin<1, false, BlockQ4_1>>(
          w, xq, x_bytes, n, cols, y, ldy);
      return;
    case GgmlType::kQ5_1:
      Chunked<RowsWithMin<8, true, BlockQ5_1>, RowsWithMin<4, true, BlockQ5_1>,
              RowsWithMin<2, true, BlockQ5_1>, RowsWithMin<1, true, BlockQ5_1>>(
          w, xq, x_bytes, n, cols, y, ldy);
      return;
    case GgmlType::kQ2_K:
      Chunked<RowsQ2K<8>, RowsQ2K<4>, RowsQ2K<2>, RowsQ2K<1>>(w, xq, x_bytes, n, cols, y, ldy);
      return;
    case GgmlType::kQ3_K:
      Chunked<RowsQ3K<8>, RowsQ3K<4>, RowsQ3K<2>, RowsQ3K<1>>(w, xq, x_bytes, n, cols, y, ldy);
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
