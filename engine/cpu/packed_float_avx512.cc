// The AVX-512 kernels for packed float matrices (F16x16, F32x16 and, with
// AVX512_BF16, BF16x16; engine/cpu/packed_weights.h): the float half of
// PackedGemvAvx512, compiled per function like the rest of the AVX-512 code.
#include <cstring>
#include <type_traits>

#include "engine/cpu/packed_weights.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

// GCC 12's intrinsics build "undefined" vectors as `__m512 __Y = __Y;`, which
// -W(maybe-)uninitialized reports once inlined here (a known false positive).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#include "engine/cpu/avx512_math.h"

namespace tandem::engine::cpu {
namespace {

// Tokens per register tile (twice that for float prompts).
constexpr int kTileTokens = 4;

// F16x16 / F32x16: column c of G groups against T tokens from t0.
template <bool kF16, int G, int T>
TANDEM_AVX512 inline void FloatColumn(const uint8_t* w, int64_t group_bytes, int64_t c,
                                      const float* x, int64_t ldx, int64_t t0,
                                      __m512 (&acc)[G][T]) {
  __m512 wv[G];
#pragma GCC unroll 8
  for (int g = 0; g < G; ++g) {
    const uint8_t* col = w + g * group_bytes + (kF16 ? 32 : 64) * c;
    wv[g] = kF16 ? _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(col)))
                 : _mm512_loadu_ps(col);
  }
#pragma GCC unroll 8
  for (int t = 0; t < T; ++t) {
    const __m512 xv = _mm512_set1_ps(x[(t0 + t) * ldx + c]);
#pragma GCC unroll 8
    for (int g = 0; g < G; ++g) acc[g][t] = _mm512_fmadd_ps(wv[g], xv, acc[g][t]);
  }
}

// F16x16 / F32x16: G groups x T tokens from t0 over every column. Fewer
// than 4 tokens keep two accumulators per output (even and odd columns), so
// the FMAs' latency overlaps; more have enough chains without.
template <bool kF16, int G, int T>
TANDEM_AVX512 void PackedFloatTile(const PackedGemvArgs& a, const uint8_t* w, int64_t t0, float* y,
                                   int64_t rows) {
  constexpr int H = T < 4 ? 2 : 1;
  const int64_t cols = a.w->cols(), gb = a.w->group_bytes();
  __m512 acc[H][G][T];
#pragma GCC unroll 2
  for (int h = 0; h < H; ++h) {
#pragma GCC unroll 8
    for (int g = 0; g < G; ++g) {
#pragma GCC unroll 8
      for (int t = 0; t < T; ++t) acc[h][g][t] = _mm512_setzero_ps();
    }
  }
  int64_t c = 0;
  for (; c + H <= cols; c += H) {
#pragma GCC unroll 2
    for (int h = 0; h < H; ++h) FloatColumn<kF16, G, T>(w, gb, c + h, a.x, cols, t0, acc[h]);
  }
  if (c < cols) FloatColumn<kF16, G, T>(w, gb, c, a.x, cols, t0, acc[0]);
#pragma GCC unroll 8
  for (int g = 0; g < G; ++g) {
    const int64_t valid = rows - g * kPackRows;
    const __mmask16 m = LaneMask(valid);
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) {
      __m512 sum = acc[0][g][t];
      if constexpr (H == 2) sum = _mm512_add_ps(sum, acc[1][g][t]);
      _mm512_mask_storeu_ps(y + t * a.ldy + g * kPackRows, m, sum);
    }
  }
}

template <bool kF16>
TANDEM_AVX512 void PackedFloatRows(const PackedGemvArgs& a, int64_t row_begin, int64_t row_end) {
  const PackedMatrix& m = *a.w;
  int64_t r = row_begin;
  const auto groups = [&](auto g_const) {
    constexpr int G = decltype(g_const)::value;
    const uint8_t* w = m.data() + r / kPackRows * m.group_bytes();
    float* y = a.y + r;
    const int64_t rows = row_end - r;
    int64_t t = 0;
    for (; t + 2 * kTileTokens <= a.n; t += 2 * kTileTokens) {
      PackedFloatTile<kF16, G, 2 * kTileTokens>(a, w, t, y + t * a.ldy, rows);
    }
    for (; t + kTileTokens <= a.n; t += kTileTokens) {
      PackedFloatTile<kF16, G, kTileTokens>(a, w, t, y + t * a.ldy, rows);
    }
    // The last one to three tokens in one tile: one more pass over the
    // group's weights, not one per token.
    switch (a.n - t) {
      case 3:
        PackedFloatTile<kF16, G, 3>(a, w, t, y + t * a.ldy, rows);
        break;
      case 2:
        PackedFloatTile<kF16, G, 2>(a, w, t, y + t * a.ldy, rows);
        break;
      case 1:
        PackedFloatTile<kF16, G, 1>(a, w, t, y + t * a.ldy, rows);
        break;
      default:
        break;
    }
  };
  for (; r + kPackRows < row_end; r += 2 * kPackRows) groups(std::integral_constant<int, 2>());
  if (r < row_end) groups(std::integral_constant<int, 1>());
}

// BF16x16 (its functions add AVX512_BF16 to the AVX-512 set).
#define TANDEM_AVX512_BF16                                                        \
  __attribute__((                                                                 \
      target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx512bf16,fma,f16c," \
             "avx2")))

// Column pair k of G groups against T tokens from t0.
template <int G, int T>
TANDEM_AVX512_BF16 inline void Bf16Pair(const uint8_t* w, int64_t group_bytes, int64_t k,
                                        const uint16_t* xb, int64_t ldx, int64_t t0,
                                        __m512 (&acc)[G][T]) {
  __m512i wv[G];
#pragma GCC unroll 8
  for (int g = 0; g < G; ++g) wv[g] = _mm512_loadu_si512(w + g * group_bytes + 64 * k);
#pragma GCC unroll 8
  for (int t = 0; t < T; ++t) {
    uint32_t pair;
    std::memcpy(&pair, xb + (t0 + t) * ldx + 2 * k, sizeof(pair));
    const __m512i xv = _mm512_set1_epi32(static_cast<int32_t>(pair));
#pragma GCC unroll 8
    for (int g = 0; g < G; ++g) {
      acc[g][t] = _mm512_dpbf16_ps(acc[g][t], (__m512bh)wv[g], (__m512bh)xv);
    }
  }
}

// G groups x T tokens from t0 over every column pair; two accumulators per
// output (even and odd pairs), so the dots' latency overlaps.
template <int G, int T>
TANDEM_AVX512_BF16 void PackedBf16Tile(const uint8_t* w, int64_t group_bytes, int64_t pairs,
                                       const uint16_t* xb, int64_t t0, float* y, int64_t ldy,
                                       int64_t rows) {
  const int64_t ldx = 2 * pairs;
  __m512 acc[2][G][T];
#pragma GCC unroll 2
  for (int h = 0; h < 2; ++h) {
#pragma GCC unroll 8
    for (int g = 0; g < G; ++g) {
#pragma GCC unroll 8
      for (int t = 0; t < T; ++t) acc[h][g][t] = _mm512_setzero_ps();
    }
  }
  int64_t k = 0;
  for (; k + 1 < pairs; k += 2) {
    Bf16Pair<G, T>(w, group_bytes, k, xb, ldx, t0, acc[0]);
    Bf16Pair<G, T>(w, group_bytes, k + 1, xb, ldx, t0, acc[1]);
  }
  if (k < pairs) Bf16Pair<G, T>(w, group_bytes, k, xb, ldx, t0, acc[0]);
#pragma GCC unroll 8
  for (int g = 0; g < G; ++g) {
    const int64_t valid = rows - g * kPackRows;
    if (valid <= 0) break;
    const __mmask16 m = LaneMask(valid);
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) {
      _mm512_mask_storeu_ps(y + t * ldy + g * kPackRows, m,
                            _mm512_add_ps(acc[0][g][t], acc[1][g][t]));
    }
  }
}

template <int G>
TANDEM_AVX512_BF16 void PackedBf16Groups(const PackedGemvArgs& a, int64_t r, int64_t rows) {
  const PackedMatrix& m = *a.w;
  const uint8_t* w = m.data() + r / kPackRows * m.group_bytes();
  const int64_t gb = m.group_bytes(), pairs = m.blocks();
  float* y = a.y + r;
  int64_t t = 0;
  for (; t + kTileTokens <= a.n; t += kTileTokens) {
    PackedBf16Tile<G, kTileTokens>(w, gb, pairs, a.xb, t, y + t * a.ldy, a.ldy, rows);
  }
  switch (a.n - t) {
    case 3:
      PackedBf16Tile<G, 3>(w, gb, pairs, a.xb, t, y + t * a.ldy, a.ldy, rows);
      break;
    case 2:
      PackedBf16Tile<G, 2>(w, gb, pairs, a.xb, t, y + t * a.ldy, a.ldy, rows);
      break;
    case 1:
      PackedBf16Tile<G, 1>(w, gb, pairs, a.xb, t, y + t * a.ldy, a.ldy, rows);
      break;
    default:
      break;
  }
}

TANDEM_AVX512_BF16 void PackedBf16Rows(const PackedGemvArgs& a, int64_t row_begin,
                                       int64_t row_end) {
  int64_t r = row_begin;
  for (; r + kPackRows < row_end; r += 2 * kPackRows) PackedBf16Groups<2>(a, r, row_end - r);
  if (r < row_end) PackedBf16Groups<1>(a, r, row_end - r);
}

}  // namespace

TANDEM_AVX512 void PackedFloatGemvAvx512(const PackedGemvArgs& a, int64_t row_begin,
                                         int64_t row_end) {
  switch (a.w->type()) {
    case GgmlType::kBF16:
      PackedBf16Rows(a, row_begin, row_end);
      return;
    case GgmlType::kF16:
      PackedFloatRows<true>(a, row_begin, row_end);
      return;
    default:
      PackedFloatRows<false>(a, row_begin, row_end);
      return;
  }
}

bool Bf16DotSupported() {
  static const bool supported = __builtin_cpu_supports("avx512bf16") &&
                                __builtin_cpu_supports("avx512f") &&
                                __builtin_cpu_supports("avx512vnni");
  return supported;
}

TANDEM_AVX512_BF16 void ToBf16Avx512(const float* x, int64_t n, int64_t cols, int64_t padded,
                                     uint16_t* out) {
  for (int64_t t = 0; t < n; ++t) {
    const float* xt = x + t * cols;
    uint16_t* ot = out + t * padded;
    for (int64_t c = 0; c < padded; c += 32) {
      const __m512 lo = _mm512_maskz_loadu_ps(LaneMask(cols - c), xt + c);
      const __m512 hi = _mm512_maskz_loadu_ps(LaneMask(cols - c - 16), xt + c + 16);
      const __m512i both = (__m512i)_mm512_cvtne2ps_pbh(hi, lo);
      const int64_t left = padded - c;
      const auto m = left >= 32 ? ~__mmask32{0} : static_cast<__mmask32>((1u << left) - 1);
      _mm512_mask_storeu_epi16(ot + c, m, both);
    }
  }
}

}  // namespace tandem::engine::cpu

#else  // not x86-64: the AVX-512 table is the portable one, without packing.

namespace tandem::engine::cpu {
void PackedFloatGemvAvx512(const PackedGemvArgs&, int64_t, int64_t) {}
bool Bf16DotSupported() { return false; }
void ToBf16Avx512(const float*, int64_t, int64_t, int64_t, uint16_t*) {}
}  // namespace tandem::engine::cpu

#endif
