// AVX2 + FMA + F16C kernels: the table for x86-64 machines without AVX-512
// (most laptops and many cloud instances). Compiled per function through a
// target attribute like the AVX-512 table; kernels.cc picks it at run time
// (or TANDEM_ISA=avx2 on a machine with more).
//
// Matrix-vector products keep a tile of R weight rows x T tokens of 8-lane
// accumulators in registers, each weight vector loaded and converted once
// per T tokens. Q8_0 multiplies |w| by the activations carrying w's sign
// with maddubs (the activations as Q8Activations lays them out; only its qs
// and scale are read). Token quantization uses the portable code; SwiGLU
// is in attention_avx2.cc, beside the exp it shares.
#include <cstring>

#include "engine/cpu/attention_avx2.h"
#include "engine/cpu/kernels.h"
#include "engine/cpu/quant_dot.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#define TANDEM_AVX2 __attribute__((target("avx2,fma,f16c")))

namespace tandem::engine::cpu {
namespace {

constexpr int kTokens = 4;
constexpr int kRows = 4;

enum class WKind { kF32, kF16, kBF16 };

inline uint16_t LoadU16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

// 8 weights starting at element k of a row, as f32.
template <WKind K>
TANDEM_AVX2 inline __m256 LoadW(const uint8_t* row, int64_t k) {
  if constexpr (K == WKind::kF32) {
    return _mm256_loadu_ps(reinterpret_cast<const float*>(row) + k);
  } else {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * k));
    if constexpr (K == WKind::kF16) return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
}

// One scalar weight, as f32 (the tails).
template <WKind K>
inline float LoadW1(const uint8_t* row, int64_t k) {
  if constexpr (K == WKind::kF32) {
    float f;
    std::memcpy(&f, row + 4 * k, 4);
    return f;
  } else if constexpr (K == WKind::kF16) {
    return Fp16ToFp32(LoadU16(row + 2 * k));
  } else {
    return Bf16ToFp32(LoadU16(row + 2 * k));
  }
}

TANDEM_AVX2 inline float Sum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// One R x T tile: rows at w + r * row_bytes, tokens at x + t * ldx.
template <WKind K, int R, int T>
TANDEM_AVX2 void GemvTile(const uint8_t* w, int64_t row_bytes, int64_t cols, const float* x,
                          int64_t ldx, float* y, int64_t ldy) {
  __m256 acc[R][T];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) acc[r][t] = _mm256_setzero_ps();
  }
  int64_t k = 0;
  for (; k + 8 <= cols; k += 8) {
    __m256 wv[R];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) wv[r] = LoadW<K>(w + r * row_bytes, k);
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) {
      const __m256 xv = _mm256_loadu_ps(x + t * ldx + k);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) acc[r][t] = _mm256_fmadd_ps(wv[r], xv, acc[r][t]);
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int t = 0; t < T; ++t) {
      float s = Sum8(acc[r][t]);
      for (int64_t c = k; c < cols; ++c) s += LoadW1<K>(w + r * row_bytes, c) * x[t * ldx + c];
      y[t * ldy + r] = s;
    }
  }
}

template <WKind K, int R>
TANDEM_AVX2 void GemvRowBlock(const uint8_t* w, const GemvArgs& a, int64_t r) {
  float* y = a.y + r;
  int64_t t = 0;
  for (; t + kTokens <= a.n; t += kTokens) {
    GemvTile<K, R, kTokens>(w, a.row_bytes, a.cols, a.x + t * a.cols, a.cols, y + t * a.ldy,
                            a.ldy);
  }
  const float* x = a.x + t * a.cols;
  y += t * a.ldy;
  switch (a.n - t) {
    case 3: GemvTile<K, R, 3>(w, a.row_bytes, a.cols, x, a.cols, y, a.ldy); break;
    case 2: GemvTile<K, R, 2>(w, a.row_bytes, a.cols, x, a.cols, y, a.ldy); break;
    case 1: GemvTile<K, R, 1>(w, a.row_bytes, a.cols, x, a.cols, y, a.ldy); break;
    default: break;
  }
}

template <WKind K>
TANDEM_AVX2 void GemvFloatRows(const GemvArgs& a, int64_t row_begin, int64_t row_end) {
  int64_t r = row_begin;
  for (; r + kRows <= row_end; r += kRows) GemvRowBlock<K, kRows>(a.w + r * a.row_bytes, a, r);
  for (; r < row_end; ++r) GemvRowBlock<K, 1>(a.w + r * a.row_bytes, a, r);
}

// Q8_0 rows against quantized activations: per block, |w| times x with w's
// sign (maddubs takes one unsigned operand), the exact int32 sum scaled by
// d_w * d_x.
TANDEM_AVX2 void GemvQ8Rows(const GemvArgs& a, int64_t row_begin, int64_t row_end) {
  const int64_t nblocks = a.cols / kQ8_0BlockSize;
  const Q8Activations& xq = *a.xq;
  const __m256i ones = _mm256_set1_epi16(1);
  for (int64_t r = row_begin; r < row_end; ++r) {
    const uint8_t* row = a.w + r * a.row_bytes;
    for (int64_t t = 0; t < a.n; ++t) {
      const int8_t* xqs = xq.qs + t * xq.pairs * 64;
      const float* xscale = xq.scale + t * xq.pairs * 16;
      __m256 acc = _mm256_setzero_ps();
      for (int64_t b = 0; b < nblocks; ++b) {
        const uint8_t* block = row + b * sizeof(BlockQ8_0);
        const __m256i wv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(block + 2));
        const __m256i xv =
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xqs + b * kQ8_0BlockSize));
        const __m256i dot = _mm256_madd_epi16(
            _mm256_maddubs_epi16(_mm256_sign_epi8(wv, wv), _mm256_sign_epi8(xv, wv)), ones);
        const float d = _cvtsh_ss(LoadU16(block)) * xscale[b * 8];
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(dot), acc);
      }
      a.y[t * a.ldy + r] = Sum8(acc);
    }
  }
}

TANDEM_AVX2 void GemvAvx2(const GemvArgs& a, int64_t row_begin, int64_t row_end) {
  switch (a.type) {
    case GgmlType::kF32: GemvFloatRows<WKind::kF32>(a, row_begin, row_end); return;
    case GgmlType::kF16: GemvFloatRows<WKind::kF16>(a, row_begin, row_end); return;
    case GgmlType::kBF16: GemvFloatRows<WKind::kBF16>(a, row_begin, row_end); return;
    case GgmlType::kQ8_0: GemvQ8Rows(a, row_begin, row_end); return;
    default: break;
  }
  PortableKernels().gemv(a, row_begin, row_end);  // the other block formats
}

template <WKind K>
TANDEM_AVX2 void ConvertRows(const uint8_t* src, int64_t row_bytes, int64_t rows, int64_t cols,
                             float* dst) {
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t* row = src + r * row_bytes;
    float* out = dst + r * cols;
    int64_t k = 0;
    for (; k + 8 <= cols; k += 8) _mm256_storeu_ps(out + k, LoadW<K>(row, k));
    for (; k < cols; ++k) out[k] = LoadW1<K>(row, k);
  }
}

TANDEM_AVX2 void DequantizeRowsAvx2(GgmlType type, const uint8_t* src, int64_t row_bytes,
                                    int64_t rows, int64_t cols, float* dst) {
  switch (type) {
    case GgmlType::kF16: ConvertRows<WKind::kF16>(src, row_bytes, rows, cols, dst); return;
    case GgmlType::kBF16: ConvertRows<WKind::kBF16>(src, row_bytes, rows, cols, dst); return;
    default: PortableKernels().dequantize_rows(type, src, row_bytes, rows, cols, dst); return;
  }
}

TANDEM_AVX2 void RmsNormAvx2(const float* x, const float* weight, int64_t n_tokens, int64_t dim,
                             float eps, float* y) {
  for (int64_t t = 0; t < n_tokens; ++t) {
    const float* xt = x + t * dim;
    float* yt = y + t * dim;
    __m256 acc = _mm256_setzero_ps();
    int64_t k = 0;
    for (; k + 8 <= dim; k += 8) {
      const __m256 v = _mm256_loadu_ps(xt + k);
      acc = _mm256_fmadd_ps(v, v, acc);
    }
    float ss = Sum8(acc);
    for (; k < dim; ++k) ss += xt[k] * xt[k];
    const float scale = 1.0f / __builtin_sqrtf(ss / static_cast<float>(dim) + eps);
    const __m256 vs = _mm256_set1_ps(scale);
    for (k = 0; k + 8 <= dim; k += 8) {
      const __m256 v = _mm256_mul_ps(_mm256_loadu_ps(xt + k), vs);
      _mm256_storeu_ps(yt + k, _mm256_mul_ps(v, _mm256_loadu_ps(weight + k)));
    }
    for (; k < dim; ++k) yt[k] = xt[k] * scale * weight[k];
  }
}

TANDEM_AVX2 void AddAvx2(float* x, const float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(x + i, _mm256_add_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
  }
  for (; i < n; ++i) x[i] += y[i];
}

}  // namespace

const KernelTable& Avx2Kernels() {
  static const KernelTable table = {
      .isa = Isa::kAvx2,
      .gemv = GemvAvx2,
      .quantize_q8 = PortableKernels().quantize_q8,
      .dequantize_rows = DequantizeRowsAvx2,
      .rms_norm = RmsNormAvx2,
      .swiglu = SwiGluAvx2,
      .add = AddAvx2,
      .quant_dot = VecDotRowsAvx2,
  };
  return table;
}

}  // namespace tandem::engine::cpu

#else

namespace tandem::engine::cpu {
const KernelTable& Avx2Kernels() { return PortableKernels(); }
}  // namespace tandem::engine::cpu

#endif
