// The AVX-512 VNNI kernel for packed matrices (engine/cpu/packed_weights.h).
// Compiled for AVX-512 per function, like kernels_avx512.cc; the AVX-512
// table hands it out only where the CPU has it.
//
// Q4_0x16 against Q8Activations: for each block of 32 columns, a group of 16
// rows is 4 vectors of quant bytes; their low and high nibbles (the unsigned
// operand, 0..15) meet 4 activation bytes broadcast to every lane, so 8 VNNI
// dots sum a block for all 16 rows, starting from the block's -8 * sum(x)
// (the weights are q - 8). One conversion and one fused multiply-add per
// block then scale the 16 integer sums by the rows' scales times the block's
// activation scale.
#include "engine/cpu/packed_weights.h"

#include <cstring>

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

// G groups of 16 rows (w: the first group's start) x T tokens from t0, all
// blocks; y: row 0 of the first group for token t0. Rows from `rows` on are
// not stored.
template <int G, int T>
TANDEM_AVX512 void PackedQ4Tile(const uint8_t* w, int64_t group_bytes, int64_t blocks,
                                const Q8Activations& xq, int64_t t0, float* y, int64_t ldy,
                                int64_t rows) {
  const __m512i low4 = _mm512_set1_epi8(0x0F);
  const int64_t qs_stride = xq.pairs * 64;  // a token's quantized bytes
  const int64_t lane_stride = xq.pairs * 16;  // a token's bias and scale lanes
  __m512 acc[G][T];
#pragma GCC unroll 8
  for (int g = 0; g < G; ++g) {
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) acc[g][t] = _mm512_setzero_ps();
  }
  for (int64_t b = 0; b < blocks; ++b) {
    __m512i lo[G][4], hi[G][4];
    __m512 dw[G];
#pragma GCC unroll 8
    for (int g = 0; g < G; ++g) {
      const uint8_t* block = w + g * group_bytes + b * kPackedQ4BlockBytes;
      dw[g] = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(block)));
#pragma GCC unroll 4
      for (int v = 0; v < 4; ++v) {
        const __m512i q = _mm512_loadu_si512(block + 2 * kPackRows + 64 * v);
        lo[g][v] = _mm512_and_si512(q, low4);
        hi[g][v] = _mm512_and_si512(_mm512_srli_epi16(q, 4), low4);
      }
    }
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) {
      const int64_t token = t0 + t;
      const int8_t* x = xq.qs + token * qs_stride + b * 32;
      // Q8Activations' bias lanes hold -16 * sum(x) (Q8_0's correction);
      // Q4_0's is -8 * sum(x).
      const __m512i bias = _mm512_set1_epi32(xq.bias[token * lane_stride + b * 8] / 2);
      const __m512 dx = _mm512_set1_ps(xq.scale[token * lane_stride + b * 8]);
#pragma GCC unroll 8
      for (int g = 0; g < G; ++g) {
        __m512i low_sum = bias;
        __m512i high_sum = _mm512_setzero_si512();
#pragma GCC unroll 4
        for (int v = 0; v < 4; ++v) {
          low_sum = _mm512_dpbusd_epi32(low_sum, lo[g][v], Broadcast4(x + 4 * v));
          high_sum = _mm512_dpbusd_epi32(high_sum, hi[g][v], Broadcast4(x + 16 + 4 * v));
        }
        acc[g][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(low_sum, high_sum)),
                                    _mm512_mul_ps(dw[g], dx), acc[g][t]);
      }
    }
  }
#pragma GCC unroll 8
  for (int g = 0; g < G; ++g) {
    const int64_t valid = rows - g * kPackRows;
    const __mmask16 m =
        valid >= kPackRows ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << valid) - 1);
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) _mm512_mask_storeu_ps(y + t * ldy + g * kPackRows, m, acc[g][t]);
  }
}

// G groups against every token.
template <int G>
TANDEM_AVX512 void PackedQ4Groups(const PackedGemvArgs& a, const uint8_t* w, int64_t r,
                                  int64_t rows) {
  const PackedMatrix& m = *a.w;
  float* y = a.y + r;
  int64_t t = 0;
  for (; t + kTileTokens <= a.n; t += kTileTokens) {
    PackedQ4Tile<G, kTileTokens>(w, m.group_bytes(), m.blocks(), *a.xq, t, y + t * a.ldy, a.ldy,
                                 rows);
  }
  switch (a.n - t) {
    case 3: PackedQ4Tile<G, 3>(w, m.group_bytes(), m.blocks(), *a.xq, t, y + t * a.ldy, a.ldy, rows); break;
    case 2: PackedQ4Tile<G, 2>(w, m.group_bytes(), m.blocks(), *a.xq, t, y + t * a.ldy, a.ldy, rows); break;
    case 1: PackedQ4Tile<G, 1>(w, m.group_bytes(), m.blocks(), *a.xq, t, y + t * a.ldy, a.ldy, rows); break;
    default: break;
  }
}

}  // namespace

TANDEM_AVX512 void PackedGemvAvx512(const PackedGemvArgs& a, int64_t row_begin, int64_t row_end) {
  const PackedMatrix& m = *a.w;
  int64_t r = row_begin;
  // Decode: two groups a tile, so two independent dot chains hide each
  // other's latency.
  if (a.n == 1) {
    for (; r + kPackRows < row_end; r += 2 * kPackRows) {
      PackedQ4Groups<2>(a, m.data() + r / kPackRows * m.group_bytes(), r, row_end - r);
    }
  }
  for (; r < row_end; r += kPackRows) {
    PackedQ4Groups<1>(a, m.data() + r / kPackRows * m.group_bytes(), r, row_end - r);
  }
}

}  // namespace tandem::engine::cpu

#else  // not x86-64: the AVX-512 table is the portable one, without packing.

namespace tandem::engine::cpu {
void PackedGemvAvx512(const PackedGemvArgs&, int64_t, int64_t) {}
}  // namespace tandem::engine::cpu

#endif
