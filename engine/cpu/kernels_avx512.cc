// AVX-512 kernels (F, BW, VL, DQ, VNNI). Only the functions here are compiled
// for AVX-512, through a per-function target attribute, so the rest of the
// binary still runs on any x86-64; kernels.cc picks this table at run time.
//
// Matrix-vector products keep a tile of R weight rows x T tokens of 16-lane
// accumulators in registers, so each weight vector is loaded (and converted)
// once per T tokens and each activation vector once per R rows; decode (T = 1)
// is bound by streaming the weights, which each call reads exactly once.
// Q8_0 multiplies int8 weights by int8-quantized activations with VNNI: the
// weights enter the unsigned operand as w + 128 and the activations carry the
// matching -128 * sum(x) correction (see Q8Activations).
#include <cstring>

#include "engine/cpu/kernels.h"
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

// Tokens per register tile; a tile holds up to kRows x kTokens accumulators.
constexpr int kTokens = 4;
constexpr int kRows = 4;

enum class WKind { kF32, kF16, kBF16 };

// fp16 -> fp32 for Q8_0 block scales: one broadcast load instead of a
// conversion chain per block.
struct Fp16Table {
  float v[1 << 16];
  Fp16Table() {
    for (uint32_t h = 0; h < (1u << 16); ++h) v[h] = Fp16ToFp32(static_cast<uint16_t>(h));
  }
};
const float* Fp16ToFp32Table() {
  static const Fp16Table* table = new Fp16Table();
  return table->v;
}

inline uint16_t LoadU16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

constexpr int64_t ElemBytes(WKind k) { return k == WKind::kF32 ? 4 : 2; }

// Software prefetch of the weight stream. Decode reads each weight once from
// L3/DRAM; the hardware prefetcher alone keeps too few misses in flight, so
// each row's loads also prefetch the same offset two row blocks further
// (2R rows), capped at 32 KB. Measured on the 25.7M-model decode: +15-30%
// tokens/s for F16/BF16/Q8_0 over none; two blocks and 32 KB over one block
// and 8 KB: F32 256 -> 304, F16 350 -> 371, BF16 397 -> 436 tok/s (four
// blocks and 64 KB lost F16 8% again).
inline int64_t PrefetchDistance(int rows, int64_t row_bytes) {
  constexpr int64_t kMaxAhead = 32768;
  const int64_t ahead = 2 * rows * row_bytes;
  return ahead < kMaxAhead ? ahead : kMaxAhead;
}
TANDEM_AVX512 inline void Prefetch(const uint8_t* p) {
  _mm_prefetch(reinterpret_cast<const char*>(p), _MM_HINT_T0);
}

// 16 weights starting at element k of a row, as f32.
template <WKind K>
TANDEM_AVX512 inline __m512 LoadW(const uint8_t* row, int64_t k) {
  if constexpr (K == WKind::kF32) {
    return _mm512_loadu_ps(row + 4 * k);
  } else {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 2 * k));
    if constexpr (K == WKind::kF16) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
}

// Like LoadW for the lanes in `m`; the other lanes are zero and not read.
template <WKind K>
TANDEM_AVX512 inline __m512 LoadWMasked(const uint8_t* row, int64_t k, __mmask16 m) {
  if constexpr (K == WKind::kF32) {
    return _mm512_maskz_loadu_ps(m, row + 4 * k);
  } else {
    const __m256i h = _mm256_maskz_loadu_epi16(m, row + 2 * k);
    if constexpr (K == WKind::kF16) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
}

// Lane sums of a, b, c, d.
TANDEM_AVX512 inline __m128 Reduce4(__m512 a, __m512 b, __m512 c, __m512 d) {
  const __m256 a1 = _mm256_add_ps(_mm512_castps512_ps256(a), _mm512_extractf32x8_ps(a, 1));
  const __m256 b1 = _mm256_add_ps(_mm512_castps512_ps256(b), _mm512_extractf32x8_ps(b, 1));
  const __m256 c1 = _mm256_add_ps(_mm512_castps512_ps256(c), _mm512_extractf32x8_ps(c, 1));
  const __m256 d1 = _mm256_add_ps(_mm512_castps512_ps256(d), _mm512_extractf32x8_ps(d, 1));
  const __m256 abcd = _mm256_hadd_ps(_mm256_hadd_ps(a1, b1), _mm256_hadd_ps(c1, d1));
  return _mm_add_ps(_mm256_castps256_ps128(abcd), _mm256_extractf128_ps(abcd, 1));
}

// y[t * ldy + r] = lane sum of acc[r][t].
template <int R, int T>
TANDEM_AVX512 inline void StoreSums(const __m512 (&acc)[R][T], float* y, int64_t ldy) {
#pragma GCC unroll 8
  for (int t = 0; t < T; ++t) {
    if constexpr (R % 4 == 0) {
#pragma GCC unroll 8
      for (int r = 0; r < R; r += 4) {
        _mm_storeu_ps(y + t * ldy + r,
                      Reduce4(acc[r][t], acc[r + 1][t], acc[r + 2][t], acc[r + 3][t]));
      }
    } else {
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) y[t * ldy + r] = _mm512_reduce_add_ps(acc[r][t]);
    }
  }
}

// Weight bytes to prefetch while a tile runs: for row r and column k,
// base + r * row_bytes + elem_bytes * k.
struct PrefetchPlan {
  const uint8_t* base;
  int64_t row_bytes;
  int64_t elem_bytes;
};

// One R x T register tile: rows at w + r * row_bytes, tokens at x + t * ldx.
template <WKind K, int R, int T>
TANDEM_AVX512 void GemvTile(const uint8_t* w, int64_t row_bytes, int64_t cols,
                            const float* x, int64_t ldx, float* y, int64_t ldy,
                            const PrefetchPlan& pf) {
  __m512 acc[R][T];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) acc[r][t] = _mm512_setzero_ps();
  }
  int64_t k = 0;
  for (; k + 16 <= cols; k += 16) {
    __m512 wv[R];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      Prefetch(pf.base + r * pf.row_bytes + pf.elem_bytes * k);
      wv[r] = LoadW<K>(w + r * row_bytes, k);
    }
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) {
      const __m512 xv = _mm512_loadu_ps(x + t * ldx + k);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) acc[r][t] = _mm512_fmadd_ps(wv[r], xv, acc[r][t]);
    }
  }
  if (k < cols) {
    const __mmask16 m = LaneMask(cols - k);
    __m512 wv[R];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) wv[r] = LoadWMasked<K>(w + r * row_bytes, k, m);
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) {
      const __m512 xv = _mm512_maskz_loadu_ps(m, x + t * ldx + k);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) acc[r][t] = _mm512_fmadd_ps(wv[r], xv, acc[r][t]);
    }
  }
  StoreSums<R, T>(acc, y, ldy);
}

// R rows starting at row `r` (pointer w) against all tokens.
template <WKind K, int R>
TANDEM_AVX512 void GemvRowBlock(const uint8_t* w, int64_t row_bytes, const GemvArgs& a,
                                int64_t r, const PrefetchPlan& pf) {
  const float* x = a.x;
  const int64_t ldx = a.cols;
  float* y = a.y + r;
  const int64_t ldy = a.ldy;
  int64_t t = 0;
  for (; t + kTokens <= a.n; t += kTokens) {
    GemvTile<K, R, kTokens>(w, row_bytes, a.cols, x + t * ldx, ldx, y + t * ldy, ldy, pf);
  }
  x += t * ldx;
  y += t * ldy;
  switch (a.n - t) {
    case 3: GemvTile<K, R, 3>(w, row_bytes, a.cols, x, ldx, y, ldy, pf); break;
    case 2: GemvTile<K, R, 2>(w, row_bytes, a.cols, x, ldx, y, ldy, pf); break;
    case 1: GemvTile<K, R, 1>(w, row_bytes, a.cols, x, ldx, y, ldy, pf); break;
    default: break;
  }
}

// Converts `rows` rows of a 16-bit float type to f32 at dst: [rows][cols].
template <WKind K>
TANDEM_AVX512 void ConvertRows(const uint8_t* src, int64_t row_bytes, int64_t rows, int64_t cols,
                               float* dst) {
  const int64_t ahead = PrefetchDistance(rows, row_bytes);
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t* row = src + r * row_bytes;
    float* out = dst + r * cols;
    int64_t k = 0;
    for (; k + 32 <= cols; k += 32) {
      Prefetch(row + ElemBytes(K) * k + ahead);
      _mm512_storeu_ps(out + k, LoadW<K>(row, k));
      _mm512_storeu_ps(out + k + 16, LoadW<K>(row, k + 16));
    }
    for (; k + 16 <= cols; k += 16) _mm512_storeu_ps(out + k, LoadW<K>(row, k));
    if (k < cols) {
      const __mmask16 m = LaneMask(cols - k);
      _mm512_mask_storeu_ps(out + k, m, LoadWMasked<K>(row, k, m));
    }
  }
}

template <WKind K>
TANDEM_AVX512 void GemvFloatRows(const GemvArgs& a, int64_t row_begin, int64_t row_end) {
  // With several token tiles a 16-bit row block is converted once into the
  // scratch (L1-resident) rather than once per tile. Either way the next row
  // block's weights are prefetched while this one computes (ConvertRows
  // prefetches too: 2.75k -> 3.3k tokens/s at n = 8 on the 25.7M F16 model).
  const bool stage = K != WKind::kF32 && a.n > kTokens;
  const PrefetchPlan pf_direct = {nullptr, a.row_bytes, ElemBytes(K)};
  const int64_t ahead = PrefetchDistance(kRows, a.row_bytes);
  int64_t r = row_begin;
  if (a.n == 1) {
    // Decode: 8-row tiles, twice the weight streams in flight.
    const int64_t ahead8 = PrefetchDistance(2 * kRows, a.row_bytes);
    for (; r + 2 * kRows <= row_end; r += 2 * kRows) {
      const uint8_t* w = a.w + r * a.row_bytes;
      PrefetchPlan pf = pf_direct;
      pf.base = w + ahead8;
      GemvRowBlock<K, 2 * kRows>(w, a.row_bytes, a, r, pf);
    }
  }
  for (; r + kRows <= row_end; r += kRows) {
    const uint8_t* w = a.w + r * a.row_bytes;
    PrefetchPlan pf = pf_direct;
    pf.base = w + ahead;
    if (stage) {
      ConvertRows<K>(w, a.row_bytes, kRows, a.cols, a.scratch);
      // Tile columns are f32 but the prefetched rows are 16-bit.
      GemvRowBlock<WKind::kF32, kRows>(reinterpret_cast<const uint8_t*>(a.scratch),
                                       a.cols * 4, a, r, pf);
    } else {
      GemvRowBlock<K, kRows>(w, a.row_bytes, a, r, pf);
    }
  }
  for (; r < row_end; ++r) {
    const uint8_t* w = a.w + r * a.row_bytes;
    PrefetchPlan pf = pf_direct;
    pf.base = w + PrefetchDistance(1, a.row_bytes);
    GemvRowBlock<K, 1>(w, a.row_bytes, a, r, pf);
  }
}

// Bytes of one block of the int8-dot types: fp16 scale, then the quants.
template <GgmlType kType>
constexpr int64_t BlockBytes() {
  return kType == GgmlType::kQ8_0 ? sizeof(BlockQ8_0) : sizeof(BlockQ4_0);
}

// Q4_0's quants of the block pair at b as the dot's unsigned operand, in the
// activations' order (block 0's 32 weights, then block 1's): 16 q, q the
// nibble (0..15, the weight q - 8), so that with the activations' -128 *
// sum(x) correction a block sums to 16 * sum((q - 8) x) exactly; the tile
// scales its sums by 1/16. The low nibbles (weights 0..15 of a block) go to
// 128-bit lanes 0 and 2, shifted up; the high ones (16..31) to lanes 1 and 3.
// Without kWhole the second block reads as 0.
template <bool kWhole>
TANDEM_AVX512 inline __m512i Q4Quants(const uint8_t* b) {
  __m512i v = _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 2)));
  if constexpr (kWhole) {
    v = _mm512_mask_broadcast_i32x4(
        v, 0xFF00,
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 2 + sizeof(BlockQ4_0))));
  } else {
    v = _mm512_maskz_mov_epi32(0x00FF, v);
  }
  constexpr int64_t kBy4 = 0x0004000400040004;
  const __m512i shifts = _mm512_setr_epi64(kBy4, kBy4, 0, 0, kBy4, kBy4, 0, 0);
  return _mm512_and_si512(_mm512_sllv_epi16(v, shifts), _mm512_set1_epi8(static_cast<char>(0xF0)));
}

// Q8_0 / Q4_0: accumulates block pair p of R rows against T tokens. Without
// kWhole, the pair has only its first block: the second reads as 0 (+128
// after Q8_0's flip) and meets zero activations, bias and scale.
template <GgmlType kType, int R, int T, bool kWhole>
TANDEM_AVX512 inline void Q8Pair(const uint8_t* w, int64_t row_bytes, int64_t ahead,
                                 const Q8Activations& xq, int64_t t0, int64_t p,
                                 const float* f16, __m512 (&acc)[R][T]) {
  constexpr int64_t kBlock = BlockBytes<kType>();
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
  __m512i wq[R];
  __m512 dw[R];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    const uint8_t* b = w + r * row_bytes + p * 2 * kBlock;
    Prefetch(b + ahead);
    const __m512 d0 = _mm512_set1_ps(f16[LoadU16(b)]);
    dw[r] = kWhole ? _mm512_mask_blend_ps(0xff00, d0, _mm512_set1_ps(f16[LoadU16(b + kBlock)]))
                   : d0;
    if constexpr (kType == GgmlType::kQ4_0) {
      wq[r] = Q4Quants<kWhole>(b);
    } else {
      const __m256i q0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 2));
      if constexpr (kWhole) {
        const __m256i q1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 36));
        wq[r] = _mm512_xor_si512(_mm512_inserti64x4(_mm512_castsi256_si512(q0), q1, 1), flip);
      } else {
        wq[r] = _mm512_xor_si512(_mm512_zextsi256_si512(q0), flip);
      }
    }
  }
  const int64_t pairs = xq.pairs;
#pragma GCC unroll 8
  for (int t = 0; t < T; ++t) {
    const int64_t at = (t0 + t) * pairs + p;
    const __m512i xv = _mm512_load_si512(xq.qs + at * 64);
    const __m512i bias = _mm512_load_si512(xq.bias + at * 16);
    const __m512 sc = _mm512_load_ps(xq.scale + at * 16);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m512i dot = _mm512_dpbusd_epi32(bias, wq[r], xv);
      acc[r][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_mul_ps(dw[r], sc), acc[r][t]);
    }
  }
}

// Q8_0 / Q4_0: one R x T tile over all blocks of R rows.
template <GgmlType kType, int R, int T>
TANDEM_AVX512 void GemvQ8Tile(const uint8_t* w, int64_t row_bytes, int64_t nblocks,
                              const Q8Activations& xq, int64_t t0, float* y, int64_t ldy) {
  const float* f16 = Fp16ToFp32Table();
  __m512 acc[R][T];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) acc[r][t] = _mm512_setzero_ps();
  }
  const int64_t ahead = PrefetchDistance(R, row_bytes);
  int64_t p = 0;
  for (; 2 * p + 1 < nblocks; ++p) {
    Q8Pair<kType, R, T, true>(w, row_bytes, ahead, xq, t0, p, f16, acc);
  }
  if (2 * p < nblocks) Q8Pair<kType, R, T, false>(w, row_bytes, ahead, xq, t0, p, f16, acc);
  if constexpr (kType == GgmlType::kQ4_0) {
    const __m512 sixteenth = _mm512_set1_ps(1.0f / 16);  // exact: Q4Quants' factor
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
      for (int t = 0; t < T; ++t) acc[r][t] = _mm512_mul_ps(acc[r][t], sixteenth);
    }
  }
  StoreSums<R, T>(acc, y, ldy);
}

template <GgmlType kType, int R>
TANDEM_AVX512 void GemvQ8RowBlock(const uint8_t* w, const GemvArgs& a, int64_t r) {
  const int64_t nblocks = a.cols / kQ8_0BlockSize;
  const Q8Activations& xq = *a.xq;
  float* y = a.y + r;
  int64_t t = 0;
  for (; t + kTokens <= a.n; t += kTokens) {
    GemvQ8Tile<kType, R, kTokens>(w, a.row_bytes, nblocks, xq, t, y + t * a.ldy, a.ldy);
  }
  switch (a.n - t) {
    case 3: GemvQ8Tile<kType, R, 3>(w, a.row_bytes, nblocks, xq, t, y + t * a.ldy, a.ldy); break;
    case 2: GemvQ8Tile<kType, R, 2>(w, a.row_bytes, nblocks, xq, t, y + t * a.ldy, a.ldy); break;
    case 1: GemvQ8Tile<kType, R, 1>(w, a.row_bytes, nblocks, xq, t, y + t * a.ldy, a.ldy); break;
    default: break;
  }
}

template <GgmlType kType>
TANDEM_AVX512 void GemvQ8Rows(const GemvArgs& a, int64_t row_begin, int64_t row_end) {
  int64_t r = row_begin;
  if (a.n == 1) {
    for (; r + 2 * kRows <= row_end; r += 2 * kRows) {
      GemvQ8RowBlock<kType, 2 * kRows>(a.w + r * a.row_bytes, a, r);
    }
  }
  for (; r + kRows <= row_end; r += kRows) {
    GemvQ8RowBlock<kType, kRows>(a.w + r * a.row_bytes, a, r);
  }
  for (; r < row_end; ++r) GemvQ8RowBlock<kType, 1>(a.w + r * a.row_bytes, a, r);
}

TANDEM_AVX512 void GemvAvx512(const GemvArgs& a, int64_t row_begin, int64_t row_end) {
  switch (a.type) {
    case GgmlType::kF32: GemvFloatRows<WKind::kF32>(a, row_begin, row_end); return;
    case GgmlType::kF16: GemvFloatRows<WKind::kF16>(a, row_begin, row_end); return;
    case GgmlType::kBF16: GemvFloatRows<WKind::kBF16>(a, row_begin, row_end); return;
    case GgmlType::kQ8_0: GemvQ8Rows<GgmlType::kQ8_0>(a, row_begin, row_end); return;
    case GgmlType::kQ4_0: GemvQ8Rows<GgmlType::kQ4_0>(a, row_begin, row_end); return;
    default: break;
  }
  // The other block formats (matmul.cc sends them to quant_dot.h; this is
  // the table's contract for any type): dequantized row by row.
  PortableKernels().gemv(a, row_begin, row_end);
}

TANDEM_AVX512 void QuantizeQ8Avx512(const float* x, int64_t n, int64_t cols,
                                    const Q8Activations& out) {
  const int64_t nblocks = cols / kQ8_0BlockSize;
  for (int64_t t = 0; t < n; ++t) {
    const float* xt = x + t * cols;
    int8_t* qs = out.qs + t * out.pairs * 64;
    int32_t* bias = out.bias + t * out.pairs * 16;
    float* scale = out.scale + t * out.pairs * 16;
    for (int64_t b = 0; b < 2 * out.pairs; ++b) {
      int8_t* q = qs + b * kQ8_0BlockSize;
      if (b >= nblocks) {  // padding block of an odd count
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(q), _mm256_setzero_si256());
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(bias + b * 8), _mm256_setzero_si256());
        _mm256_storeu_ps(scale + b * 8, _mm256_setzero_ps());
        continue;
      }
      const __m512 v0 = _mm512_loadu_ps(xt + b * kQ8_0BlockSize);
      const __m512 v1 = _mm512_loadu_ps(xt + b * kQ8_0BlockSize + 16);
      const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
      // Same IEEE operations as the portable quantizer; cvtps rounds to
      // nearest even like nearbyint in the default mode.
      const float d = amax / 127.0f;
      const __m512 id = _mm512_set1_ps(amax != 0.0f ? 127.0f / amax : 0.0f);
      const __m512i q0 = _mm512_cvtps_epi32(_mm512_mul_ps(v0, id));
      const __m512i q1 = _mm512_cvtps_epi32(_mm512_mul_ps(v1, id));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(q), _mm512_cvtsepi32_epi8(q0));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(q + 16), _mm512_cvtsepi32_epi8(q1));
      const int32_t sum = _mm512_reduce_add_epi32(_mm512_add_epi32(q0, q1));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(bias + b * 8), _mm256_set1_epi32(-16 * sum));
      _mm256_storeu_ps(scale + b * 8, _mm256_set1_ps(d));
    }
  }
}

TANDEM_AVX512 void DequantizeRowsAvx512(GgmlType type, const uint8_t* src, int64_t row_bytes,
                                        int64_t rows, int64_t cols, float* dst) {
  switch (type) {
    case GgmlType::kF32:
      for (int64_t r = 0; r < rows; ++r) {
        std::memcpy(dst + r * cols, src + r * row_bytes, cols * sizeof(float));
      }
      return;
    case GgmlType::kF16: ConvertRows<WKind::kF16>(src, row_bytes, rows, cols, dst); return;
    case GgmlType::kBF16: ConvertRows<WKind::kBF16>(src, row_bytes, rows, cols, dst); return;
    case GgmlType::kQ8_0: break;
    default:
      for (int64_t r = 0; r < rows; ++r) {
        DequantizeRow(type, src + r * row_bytes, dst + r * cols, cols);
      }
      return;
  }
  const float* f16 = Fp16ToFp32Table();
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t* row = src + r * row_bytes;
    float* out = dst + r * cols;
    for (int64_t b = 0; b < cols / kQ8_0BlockSize; ++b) {
      const uint8_t* block = row + b * sizeof(BlockQ8_0);
      const __m512 d = _mm512_set1_ps(f16[LoadU16(block)]);
      const __m128i q0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(block + 2));
      const __m128i q1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(block + 18));
      _mm512_storeu_ps(out + 32 * b, _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q0)), d));
      _mm512_storeu_ps(out + 32 * b + 16,
                       _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q1)), d));
    }
  }
}

TANDEM_AVX512 void RmsNormAvx512(const float* x, const float* weight, int64_t n_tokens,
                                 int64_t dim, float eps, float* y) {
  for (int64_t t = 0; t < n_tokens; ++t) {
    const float* xt = x + t * dim;
    float* yt = y + t * dim;
    __m512 acc0 = _mm512_setzero_ps();
    __m512 acc1 = _mm512_setzero_ps();
    int64_t k = 0;
    for (; k + 32 <= dim; k += 32) {
      const __m512 v0 = _mm512_loadu_ps(xt + k);
      const __m512 v1 = _mm512_loadu_ps(xt + k + 16);
      acc0 = _mm512_fmadd_ps(v0, v0, acc0);
      acc1 = _mm512_fmadd_ps(v1, v1, acc1);
    }
    for (; k < dim; k += 16) {
      const __m512 v = _mm512_maskz_loadu_ps(LaneMask(dim - k), xt + k);
      acc0 = _mm512_fmadd_ps(v, v, acc0);
    }
    const float ss = _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
    const __m512 scale = _mm512_set1_ps(1.0f / __builtin_sqrtf(ss / static_cast<float>(dim) + eps));
    for (k = 0; k < dim; k += 16) {
      const __mmask16 m = LaneMask(dim - k);
      const __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, xt + k), scale);
      _mm512_mask_storeu_ps(yt + k, m, _mm512_mul_ps(v, _mm512_maskz_loadu_ps(m, weight + k)));
    }
  }
}

TANDEM_AVX512 void SwiGluAvx512(const float* gate, const float* up, int64_t n, float* out) {
  const __m512 one = _mm512_set1_ps(1.0f);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = LaneMask(n - i);
    const __m512 g = _mm512_maskz_loadu_ps(m, gate + i);
    const __m512 e = Exp16(_mm512_sub_ps(_mm512_setzero_ps(), g));
    const __m512 silu = _mm512_div_ps(g, _mm512_add_ps(one, e));
    _mm512_mask_storeu_ps(out + i, m, _mm512_mul_ps(silu, _mm512_maskz_loadu_ps(m, up + i)));
  }
}

TANDEM_AVX512 void AddAvx512(float* x, const float* y, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = LaneMask(n - i);
    const __m512 s = _mm512_add_ps(_mm512_maskz_loadu_ps(m, x + i), _mm512_maskz_loadu_ps(m, y + i));
    _mm512_mask_storeu_ps(x + i, m, s);
  }
}

}  // namespace

const KernelTable& Avx512Kernels() {
  Fp16ToFp32Table();  // build it before any kernel runs on worker threads
  static const KernelTable table = {
      .isa = Isa::kAvx512,
      .gemv = GemvAvx512,
      .quantize_q8 = QuantizeQ8Avx512,
      .dequantize_rows = DequantizeRowsAvx512,
      .rms_norm = RmsNormAvx512,
      .swiglu = SwiGluAvx512,
      .add = AddAvx512,
      .quant_dot = VecDotRowsAvx2,  // AVX-512 machines run the AVX2 kernels
      .vnni_gemv = true,
      .packed_gemv = PackedGemvAvx512,
  };
  return table;
}

}  // namespace tandem::engine::cpu

#else  // not x86-64: no AVX-512 kernels; IsaSupported(kAvx512) is false.

namespace tandem::engine::cpu {
const KernelTable& Avx512Kernels() { return PortableKernels(); }
}  // namespace tandem::engine::cpu

#endif
