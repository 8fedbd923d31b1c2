// The AVX-512 VNNI kernel for packed matrices (engine/cpu/packed_weights.h).
// Compiled for AVX-512 per function, like kernels_avx512.cc; the AVX-512
// table hands it out only where the CPU has it.
//
// Q4_0x16 / Q8_0x16 against Q8Activations: for each block of 32 columns, a
// group of 16 rows is 8 unsigned dot operands (Q4_0: the low and high
// nibbles of 4 vectors, 0..15; Q8_0: 8 vectors of w + 128), each meeting 4
// activation bytes broadcast to every lane, so 8 VNNI dots sum a block for
// all 16 rows, starting from the block's correction (-8 or -128 * sum(x)).
// One conversion and one fused multiply-add per block then scale the 16
// integer sums by the rows' scales times the block's activation scale.
// Q4_K, Q5_K and Q6_K against ggml's Q8_K activations: the same dots, summed
// in int32 over a super-block as ggml sums them (their tiles below). The
// float layouts' kernels are in packed_float_avx512.cc.
#include <cstring>

#include "engine/cpu/packed_weights.h"
#include "engine/cpu/quant_dot.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

// GCC 12's intrinsics build "undefined" vectors as `__m512 __Y = __Y;`, which
// -W(maybe-)uninitialized reports once inlined here (a known false positive).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#include "engine/cpu/avx512_math.h"

namespace tandem::engine::cpu {
namespace {

// Tokens per register tile.
constexpr int kTileTokens = 4;

TANDEM_AVX512 inline __m512i Broadcast4(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, sizeof(v));
  return _mm512_set1_epi32(v);
}

// The 8 unsigned dot operands of one group's block, in activation order
// (operand k holds weights 4k..4k+3 of each row), and their scales.
template <GgmlType kType>
TANDEM_AVX512 inline void LoadBlock(const uint8_t* block, __m512i (&q)[8], __m512& dw) {
  dw = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(block)));
  const uint8_t* quants = block + kPackedQuants;
  if constexpr (kType == GgmlType::kQ8_0) {
#pragma GCC unroll 8
    for (int k = 0; k < 8; ++k) q[k] = _mm512_loadu_si512(quants + 64 * k);
  } else {
    const __m512i low4 = _mm512_set1_epi8(0x0F);
#pragma GCC unroll 4
    for (int v = 0; v < 4; ++v) {
      const __m512i packed = _mm512_loadu_si512(quants + 64 * v);
      q[v] = _mm512_and_si512(packed, low4);
      q[4 + v] = _mm512_and_si512(_mm512_srli_epi16(packed, 4), low4);
    }
  }
}

// G groups of 16 rows (w: the first group's start) x T tokens from t0, all
// blocks; y: row 0 of the first group for token t0. Rows from `rows` on are
// not stored.
template <GgmlType kType, int G, int T>
TANDEM_AVX512 void PackedTile(const uint8_t* w, int64_t group_bytes, int64_t blocks,
                              const Q8Activations& xq, int64_t t0, float* y, int64_t ldy,
                              int64_t rows) {
  constexpr int64_t kBlockBytes = PackedBlockBytes(kType);
  const int64_t qs_stride = xq.pairs * 64;    // a token's quantized bytes
  const int64_t lane_stride = xq.pairs * 16;  // a token's bias and scale lanes
  __m512 acc[G][T];
#pragma GCC unroll 8
  for (int g = 0; g < G; ++g) {
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) acc[g][t] = _mm512_setzero_ps();
  }
  for (int64_t b = 0; b < blocks; ++b) {
    __m512i q[G][8];
    __m512 dw[G];
#pragma GCC unroll 8
    for (int g = 0; g < G; ++g)
      LoadBlock<kType>(w + g * group_bytes + b * kBlockBytes, q[g], dw[g]);
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) {
      const int64_t token = t0 + t;
      const int8_t* x = xq.qs + token * qs_stride + b * 32;
      // Q8Activations' bias lanes hold -16 * sum(x): a block's correction
      // is -128 * sum(x) for Q8_0 (its weights enter as w + 128) and
      // -8 * sum(x) for Q4_0 (its weights are q - 8).
      const int32_t lane_bias = xq.bias[token * lane_stride + b * 8];
      const __m512i bias =
          _mm512_set1_epi32(kType == GgmlType::kQ8_0 ? lane_bias * 8 : lane_bias / 2);
      const __m512 dx = _mm512_set1_ps(xq.scale[token * lane_stride + b * 8]);
#pragma GCC unroll 8
      for (int g = 0; g < G; ++g) {
        // Two chains, so the dots do not wait on one another's latency.
        __m512i even = bias;
        __m512i odd = _mm512_setzero_si512();
#pragma GCC unroll 4
        for (int k = 0; k < 8; k += 2) {
          even = _mm512_dpbusd_epi32(even, q[g][k], Broadcast4(x + 4 * k));
          odd = _mm512_dpbusd_epi32(odd, q[g][k + 1], Broadcast4(x + 4 * k + 4));
        }
        acc[g][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(even, odd)),
                                    _mm512_mul_ps(dw[g], dx), acc[g][t]);
      }
    }
  }
#pragma GCC unroll 8
  for (int g = 0; g < G; ++g) {
    const int64_t valid = rows - g * kPackRows;
    const __mmask16 m = LaneMask(valid);
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) _mm512_mask_storeu_ps(y + t * ldy + g * kPackRows, m, acc[g][t]);
  }
}

// Bit `bit` of every byte of h moved to bit 4 (other bits: anything).
TANDEM_AVX512 inline __m512i BitTo4(__m512i h, int bit) {
  if (bit < 4) return _mm512_slli_epi16(h, 4 - bit);
  if (bit > 4) return _mm512_srli_epi16(h, bit - 4);
  return h;
}

// Token t's Q8_K block of super-block sb.
inline const BlockQ8K& ActK(const PackedGemvArgs& a, int64_t t, int64_t sb) {
  return reinterpret_cast<const BlockQ8K*>(a.xk + t * a.xk_bytes)[sb];
}

// Q4_K / Q5_K (kFive): 16 rows x T tokens from t0, all super-blocks, against
// Q8_K activations, in ggml's integer arithmetic: per sub-block 8 VNNI dots
// of its quants (nibbles, with Q5_K's fifth bit) times the sub-block's
// scale, summed over the super-block in int32, and the mins times the
// sub-blocks' activation sums (bsums); then d * d_x and dmin * d_x once per
// super-block.
template <bool kFive, int T>
TANDEM_AVX512 void PackedQ4KTile(const PackedGemvArgs& a, const uint8_t* w, int64_t t0, float* y,
                                 int64_t rows) {
  constexpr int64_t kBlockBytes = PackedBlockBytes(kFive ? GgmlType::kQ5_K : GgmlType::kQ4_K);
  const __m512i low4 = _mm512_set1_epi8(0x0F);
  const __m512i bit4 = _mm512_set1_epi8(0x10);
  __m512 acc[T];
#pragma GCC unroll 8
  for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t sb = 0; sb < a.w->blocks(); ++sb) {
    const uint8_t* block = w + sb * kBlockBytes;
    const uint8_t* quants = block + kK4Quants;
    __m512i sums[T], mins[T];
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) {
      sums[t] = _mm512_setzero_si512();
      mins[t] = _mm512_setzero_si512();
    }
    for (int j = 0; j < 4; ++j) {  // sub-blocks 2j (low nibbles) and 2j + 1 (high)
      __m512i q[2][8];
#pragma GCC unroll 8
      for (int v = 0; v < 8; ++v) {
        const __m512i packed = _mm512_loadu_si512(quants + 64 * (8 * j + v));
        q[0][v] = _mm512_and_si512(packed, low4);
        q[1][v] = _mm512_and_si512(_mm512_srli_epi16(packed, 4), low4);
        if constexpr (kFive) {
          // a | (b & c): the fifth bit into bit 4.
          const __m512i h = _mm512_loadu_si512(block + kK5Fifth + 64 * v);
          q[0][v] = _mm512_ternarylogic_epi32(q[0][v], BitTo4(h, 2 * j), bit4, 0xF8);
          q[1][v] = _mm512_ternarylogic_epi32(q[1][v], BitTo4(h, 2 * j + 1), bit4, 0xF8);
        }
      }
#pragma GCC unroll 2
      for (int h = 0; h < 2; ++h) {
        const int sub = 2 * j + h;
        const __m512i scale = _mm512_cvtepu8_epi32(
            _mm_load_si128(reinterpret_cast<const __m128i*>(block + kK4Scales + 16 * sub)));
        const __m512i min = _mm512_cvtepu8_epi32(
            _mm_load_si128(reinterpret_cast<const __m128i*>(block + kK4Mins + 16 * sub)));
#pragma GCC unroll 8
        for (int t = 0; t < T; ++t) {
          const BlockQ8K& x = ActK(a, t0 + t, sb);
          const int8_t* xs = x.qs + 32 * sub;
          __m512i even = _mm512_setzero_si512();
          __m512i odd = _mm512_setzero_si512();
#pragma GCC unroll 4
          for (int v = 0; v < 8; v += 2) {
            even = _mm512_dpbusd_epi32(even, q[h][v], Broadcast4(xs + 4 * v));
            odd = _mm512_dpbusd_epi32(odd, q[h][v + 1], Broadcast4(xs + 4 * v + 4));
          }
          sums[t] =
              _mm512_add_epi32(sums[t], _mm512_mullo_epi32(_mm512_add_epi32(even, odd), scale));
          const int32_t xsum = x.bsums[2 * sub] + x.bsums[2 * sub + 1];
          mins[t] = _mm512_add_epi32(mins[t], _mm512_mullo_epi32(min, _mm512_set1_epi32(xsum)));
        }
      }
    }
    const __m512 d = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(block)));
    const __m512 dmin =
        _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(block + kK4Dmin)));
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) {
      const __m512 dx = _mm512_set1_ps(ActK(a, t0 + t, sb).d);
      acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(d, dx), _mm512_cvtepi32_ps(sums[t]), acc[t]);
      acc[t] = _mm512_fnmadd_ps(_mm512_mul_ps(dmin, dx), _mm512_cvtepi32_ps(mins[t]), acc[t]);
    }
  }
  const __mmask16 m = LaneMask(rows);
#pragma GCC unroll 8
  for (int t = 0; t < T; ++t) _mm512_mask_storeu_ps(y + t * a.ldy, m, acc[t]);
}

// Q6_K: 16 rows x T tokens from t0, all super-blocks, against Q8_K
// activations, in ggml's integer arithmetic: per 16 weights 4 VNNI dots of
// the unsigned quants (0..63) times the sub-block's scale, less 32 times the
// scale times the activations' bsum, summed over the super-block in int32;
// then d * d_x once per super-block.
template <int T>
TANDEM_AVX512 void PackedQ6KTile(const PackedGemvArgs& a, const uint8_t* w, int64_t t0, float* y,
                                 int64_t rows) {
  constexpr int64_t kBlockBytes = PackedBlockBytes(GgmlType::kQ6_K);
  __m512 acc[T];
#pragma GCC unroll 8
  for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t sb = 0; sb < a.w->blocks(); ++sb) {
    const uint8_t* block = w + sb * kBlockBytes;
    const uint8_t* quants = block + kQ6KQuants;
    __m512i sums[T], offsets[T];
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) {
      sums[t] = _mm512_setzero_si512();
      offsets[t] = _mm512_setzero_si512();
    }
    for (int k = 0; k < 16; ++k) {
      const __m512i scale = _mm512_cvtepi8_epi32(
          _mm_load_si128(reinterpret_cast<const __m128i*>(block + kQ6KScales + 16 * k)));
      const __m512i q0 = _mm512_loadu_si512(quants + 64 * (4 * k));
      const __m512i q1 = _mm512_loadu_si512(quants + 64 * (4 * k + 1));
      const __m512i q2 = _mm512_loadu_si512(quants + 64 * (4 * k + 2));
      const __m512i q3 = _mm512_loadu_si512(quants + 64 * (4 * k + 3));
#pragma GCC unroll 8
      for (int t = 0; t < T; ++t) {
        const BlockQ8K& x = ActK(a, t0 + t, sb);
        const int8_t* xs = x.qs + 16 * k;
        __m512i even = _mm512_dpbusd_epi32(_mm512_setzero_si512(), q0, Broadcast4(xs));
        __m512i odd = _mm512_dpbusd_epi32(_mm512_setzero_si512(), q1, Broadcast4(xs + 4));
        even = _mm512_dpbusd_epi32(even, q2, Broadcast4(xs + 8));
        odd = _mm512_dpbusd_epi32(odd, q3, Broadcast4(xs + 12));
        sums[t] = _mm512_add_epi32(sums[t], _mm512_mullo_epi32(_mm512_add_epi32(even, odd), scale));
        offsets[t] =
            _mm512_add_epi32(offsets[t], _mm512_mullo_epi32(scale, _mm512_set1_epi32(x.bsums[k])));
      }
    }
    const __m512 d = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(block)));
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) {
      const __m512i total = _mm512_sub_epi32(sums[t], _mm512_slli_epi32(offsets[t], 5));
      const __m512 dx = _mm512_set1_ps(ActK(a, t0 + t, sb).d);
      acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(d, dx), _mm512_cvtepi32_ps(total), acc[t]);
    }
  }
  const __mmask16 m = LaneMask(rows);
#pragma GCC unroll 8
  for (int t = 0; t < T; ++t) _mm512_mask_storeu_ps(y + t * a.ldy, m, acc[t]);
}

// A K-quant tile kernel over row groups and tiles of tokens.
template <template <int> class Tile>
TANDEM_AVX512 void PackedKRows(const PackedGemvArgs& a, int64_t row_begin, int64_t row_end) {
  const PackedMatrix& m = *a.w;
  for (int64_t r = row_begin; r < row_end; r += kPackRows) {
    const uint8_t* w = m.data() + r / kPackRows * m.group_bytes();
    float* y = a.y + r;
    const int64_t rows = row_end - r;
    int64_t t = 0;
    for (; t + kTileTokens <= a.n; t += kTileTokens) {
      Tile<kTileTokens>::Run(a, w, t, y + t * a.ldy, rows);
    }
    // The last one to three tokens in one tile: one more pass over the
    // group's weights, not one per token.
    switch (a.n - t) {
      case 3:
        Tile<3>::Run(a, w, t, y + t * a.ldy, rows);
        break;
      case 2:
        Tile<2>::Run(a, w, t, y + t * a.ldy, rows);
        break;
      case 1:
        Tile<1>::Run(a, w, t, y + t * a.ldy, rows);
        break;
      default:
        break;
    }
  }
}

template <int T>
struct Q4KTile {
  TANDEM_AVX512 static void Run(const PackedGemvArgs& a, const uint8_t* w, int64_t t0, float* y,
                                int64_t rows) {
    PackedQ4KTile<false, T>(a, w, t0, y, rows);
  }
};
template <int T>
struct Q5KTile {
  TANDEM_AVX512 static void Run(const PackedGemvArgs& a, const uint8_t* w, int64_t t0, float* y,
                                int64_t rows) {
    PackedQ4KTile<true, T>(a, w, t0, y, rows);
  }
};
template <int T>
struct Q6KTile {
  TANDEM_AVX512 static void Run(const PackedGemvArgs& a, const uint8_t* w, int64_t t0, float* y,
                                int64_t rows) {
    PackedQ6KTile<T>(a, w, t0, y, rows);
  }
};

// G groups against every token.
template <GgmlType kType, int G>
TANDEM_AVX512 void PackedGroups(const PackedGemvArgs& a, int64_t r, int64_t rows) {
  const PackedMatrix& m = *a.w;
  const uint8_t* w = m.data() + r / kPackRows * m.group_bytes();
  const int64_t gb = m.group_bytes(), blocks = m.blocks();
  float* y = a.y + r;
  int64_t t = 0;
  for (; t + kTileTokens <= a.n; t += kTileTokens) {
    PackedTile<kType, G, kTileTokens>(w, gb, blocks, *a.xq, t, y + t * a.ldy, a.ldy, rows);
  }
  switch (a.n - t) {
    case 3:
      PackedTile<kType, G, 3>(w, gb, blocks, *a.xq, t, y + t * a.ldy, a.ldy, rows);
      break;
    case 2:
      PackedTile<kType, G, 2>(w, gb, blocks, *a.xq, t, y + t * a.ldy, a.ldy, rows);
      break;
    case 1:
      PackedTile<kType, G, 1>(w, gb, blocks, *a.xq, t, y + t * a.ldy, a.ldy, rows);
      break;
    default:
      break;
  }
}

template <GgmlType kType>
TANDEM_AVX512 void PackedRows(const PackedGemvArgs& a, int64_t row_begin, int64_t row_end) {
  int64_t r = row_begin;
  // Decode: two groups a tile, so two groups' dots hide each other's
  // latency.
  if (a.n == 1) {
    for (; r + kPackRows < row_end; r += 2 * kPackRows) {
      PackedGroups<kType, 2>(a, r, row_end - r);
    }
  }
  for (; r < row_end; r += kPackRows) PackedGroups<kType, 1>(a, r, row_end - r);
}

}  // namespace

TANDEM_AVX512 void PackedGemvAvx512(const PackedGemvArgs& a, int64_t row_begin, int64_t row_end) {
  if (a.w->type() == GgmlType::kQ8_0) {
    PackedRows<GgmlType::kQ8_0>(a, row_begin, row_end);
  } else if (a.w->type() == GgmlType::kBF16 || a.w->type() == GgmlType::kF16 ||
             a.w->type() == GgmlType::kF32) {
    PackedFloatGemvAvx512(a, row_begin, row_end);
  } else if (a.w->type() == GgmlType::kQ4_K) {
    PackedKRows<Q4KTile>(a, row_begin, row_end);
  } else if (a.w->type() == GgmlType::kQ5_K) {
    PackedKRows<Q5KTile>(a, row_begin, row_end);
  } else if (a.w->type() == GgmlType::kQ6_K) {
    PackedKRows<Q6KTile>(a, row_begin, row_end);
  } else {
    PackedRows<GgmlType::kQ4_0>(a, row_begin, row_end);
  }
}

TANDEM_AVX512 void QuantizeQ8KAvx512(const float* x, int64_t cols, void* out) {
  auto* y = static_cast<BlockQ8K*>(out);
  for (int64_t b = 0; b < cols / kQKK; ++b, x += kQKK) {
    __m512 v[kQKK / 16];
    __m512 amax = _mm512_setzero_ps();
#pragma GCC unroll 16
    for (int i = 0; i < kQKK / 16; ++i) {
      v[i] = _mm512_loadu_ps(x + 16 * i);
      amax = _mm512_max_ps(amax, _mm512_abs_ps(v[i]));
    }
    const float top = _mm512_reduce_max_ps(amax);
    if (top == 0) {
      std::memset(&y[b], 0, sizeof(BlockQ8K));
      continue;
    }
    // The first element of largest magnitude, with its sign (as the
    // portable quantizer picks it).
    float max = 0;
    for (int i = 0; i < kQKK / 16; ++i) {
      const __mmask16 at = _mm512_cmp_ps_mask(_mm512_abs_ps(v[i]), _mm512_set1_ps(top), _CMP_EQ_OQ);
      if (at != 0) {
        max = x[16 * i + __builtin_ctz(at)];
        break;
      }
    }
    const float iscale = -127.0f / max;
    const __m512 scale = _mm512_set1_ps(iscale);
    for (int i = 0; i < kQKK / 16; ++i) {
      // Nearest, ties to even (the default rounding, as nearbyint).
      const __m512i q =
          _mm512_min_epi32(_mm512_cvtps_epi32(_mm512_mul_ps(scale, v[i])), _mm512_set1_epi32(127));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(y[b].qs + 16 * i), _mm512_cvtsepi32_epi8(q));
      y[b].bsums[i] = static_cast<int16_t>(_mm512_reduce_add_epi32(q));
    }
    y[b].d = 1.0f / iscale;
  }
}

}  // namespace tandem::engine::cpu

#else  // not x86-64: the AVX-512 table is the portable one, without packing.

namespace tandem::engine::cpu {
void PackedGemvAvx512(const PackedGemvArgs&, int64_t, int64_t) {}
void QuantizeQ8KAvx512(const float*, int64_t, void*) {}
}  // namespace tandem::engine::cpu

#endif
