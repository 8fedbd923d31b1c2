#include "engine/cpu/attention_avx512.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "engine/cpu/avx512_math.h"
#include "engine/cpu/attention_tile.h"
#include "engine/cpu/kernels.h"

// GCC 12's _mm512_cvtph_ps starts from _mm512_undefined_ps(), which its
// flow analysis reports as uninitialized; the value is fully overwritten.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace tandem::engine::cpu {
namespace {

constexpr int kTile = kAttentionTile;  // one zmm of scores
constexpr int kMaxHeadDim = 256;  // 16 zmm per head vector

// 16 keys' or values' `d`-th..`d+15`-th elements of one row (f16 when kF16,
// else f32), as f32.
template <bool kF16>
TANDEM_AVX512 inline __m512 Load16(const uint8_t* row, int32_t d) {
  if constexpr (!kF16) return _mm512_loadu_ps(reinterpret_cast<const float*>(row) + d);
  return _mm512_cvtph_ps(
      _mm256_loadu_si256(reinterpret_cast<const __m256i*>(reinterpret_cast<const uint16_t*>(row) + d)));
}

// Lane j of the result is the sum of v[j]'s 16 lanes (16 horizontal sums in
// 45 shuffles and adds rather than 16 reductions of ~8 each).
TANDEM_AVX512 inline __m512 SumLanes16(const __m512* v) {
  // Per 128-bit lane: [v[2i] (0+2), v[2i+1] (0+2), v[2i] (1+3), v[2i+1] (1+3)].
  __m512 a[8];
  for (int i = 0; i < 8; ++i) {
    a[i] = _mm512_add_ps(_mm512_unpacklo_ps(v[2 * i], v[2 * i + 1]),
                         _mm512_unpackhi_ps(v[2 * i], v[2 * i + 1]));
  }
  // Per 128-bit lane: that lane's sums of v[4i], v[4i+1], v[4i+2], v[4i+3].
  __m512 b[4];
  for (int i = 0; i < 4; ++i) {
    b[i] = _mm512_add_ps(_mm512_shuffle_ps(a[2 * i], a[2 * i + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                         _mm512_shuffle_ps(a[2 * i], a[2 * i + 1], _MM_SHUFFLE(3, 2, 3, 2)));
  }
  // Then the four 128-bit lanes summed: b[i]'s total lands in 128-bit lane i.
  const __m512 d01 = _mm512_add_ps(_mm512_shuffle_f32x4(b[0], b[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                   _mm512_shuffle_f32x4(b[0], b[1], _MM_SHUFFLE(3, 1, 3, 1)));
  const __m512 d23 = _mm512_add_ps(_mm512_shuffle_f32x4(b[2], b[3], _MM_SHUFFLE(2, 0, 2, 0)),
                                   _mm512_shuffle_f32x4(b[2], b[3], _MM_SHUFFLE(3, 1, 3, 1)));
  return _mm512_add_ps(_mm512_shuffle_f32x4(d01, d23, _MM_SHUFFLE(2, 0, 2, 0)),
                       _mm512_shuffle_f32x4(d01, d23, _MM_SHUFFLE(3, 1, 3, 1)));
}

// Scores of `n_q` (< 16) queries against the tile's keys, reading key rows in
// place (decode: one or few rows per sequence, no transpose worth its cost).
// Each key row is loaded once for every query of the group; per query, the
// 16 keys' partial products are summed together (SumLanes16).
// kNv: the head's zmm count when known at compile time (0: `nv_rt`), so the
// head's vectors stay in registers.
template <int kNv, bool kF16>
TANDEM_AVX512 inline void ScoresDirect(const float* const* q, int32_t n_q, const TileView& t,
                                       int32_t nv_rt, __m512* scores) {
  const int32_t nv = kNv > 0 ? kNv : nv_rt;
  alignas(64) __m512 part[kTile - 1][kTile];
  for (int32_t j = 0; j < t.n; ++j) {
    const uint8_t* row = t.k + j * t.row_bytes;
    __m512 k[kMaxHeadDim / 16];
    for (int32_t i = 0; i < nv; ++i) k[i] = Load16<kF16>(row, 16 * i);
    for (int32_t h = 0; h < n_q; ++h) {
      __m512 acc0 = _mm512_mul_ps(_mm512_loadu_ps(q[h]), k[0]);
      __m512 acc1 = _mm512_setzero_ps();
      for (int32_t i = 1; i < nv; i += 2) {
        acc1 = _mm512_fmadd_ps(_mm512_loadu_ps(q[h] + 16 * i), k[i], acc1);
        if (i + 1 < nv)
          acc0 = _mm512_fmadd_ps(_mm512_loadu_ps(q[h] + 16 * (i + 1)), k[i + 1], acc0);
      }
      part[h][j] = _mm512_add_ps(acc0, acc1);
    }
  }
  for (int32_t h = 0; h < n_q; ++h) {
    for (int32_t j = t.n; j < kTile; ++j) part[h][j] = _mm512_setzero_ps();
    scores[h] = SumLanes16(part[h]);
  }
}

// Scores of one query against a transposed tile kt[d][16] (prefill: the
// transpose is shared by many query rows).
TANDEM_AVX512 inline __m512 ScoresTransposed(const float* q, const float* kt, int32_t hd) {
  __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
  __m512 a2 = _mm512_setzero_ps(), a3 = _mm512_setzero_ps();
  for (int32_t d = 0; d < hd; d += 4) {
    a0 = _mm512_fmadd_ps(_mm512_set1_ps(q[d]), _mm512_load_ps(kt + d * kTile), a0);
    a1 = _mm512_fmadd_ps(_mm512_set1_ps(q[d + 1]), _mm512_load_ps(kt + (d + 1) * kTile), a1);
    a2 = _mm512_fmadd_ps(_mm512_set1_ps(q[d + 2]), _mm512_load_ps(kt + (d + 2) * kTile), a2);
    a3 = _mm512_fmadd_ps(_mm512_set1_ps(q[d + 3]), _mm512_load_ps(kt + (d + 3) * kTile), a3);
  }
  return _mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3));
}

// Folds one tile's scores into a row's running softmax and output.
template <int kNv, bool kF16>
TANDEM_AVX512 inline void Accumulate(__m512 s, int32_t visible, const TileView& t, int32_t nv_rt,
                                     RowState& st, float* acc) {
  const int32_t nv = kNv > 0 ? kNv : nv_rt;
  const __mmask16 mask = static_cast<__mmask16>((1u << visible) - 1);
  const float tile_max = _mm512_mask_reduce_max_ps(mask, s);
  const float new_max = std::max(st.max, tile_max);
  const float correction = st.max == -std::numeric_limits<float>::infinity()
                               ? 0.0f
                               : std::exp(st.max - new_max);
  const __m512 p = _mm512_maskz_mov_ps(mask, Exp16(_mm512_sub_ps(s, _mm512_set1_ps(new_max))));
  st.sum = st.sum * correction + _mm512_reduce_add_ps(p);
  st.max = new_max;
  alignas(64) float pj[kTile];
  _mm512_store_ps(pj, p);
  __m512 out[kMaxHeadDim / 16];
  const __m512 corr = _mm512_set1_ps(correction);
  for (int32_t i = 0; i < nv; ++i) out[i] = _mm512_mul_ps(_mm512_loadu_ps(acc + 16 * i), corr);
  for (int32_t j = 0; j < visible; ++j) {
    const __m512 w = _mm512_set1_ps(pj[j]);
    const uint8_t* row = t.v + j * t.row_bytes;
    for (int32_t i = 0; i < nv; ++i) out[i] = _mm512_fmadd_ps(w, Load16<kF16>(row, 16 * i), out[i]);
  }
  for (int32_t i = 0; i < nv; ++i) _mm512_storeu_ps(acc + 16 * i, out[i]);
}

}  // namespace

bool CanUseAvx512Attention(int32_t head_dim) {
  static const bool cpu = IsaSupported(Isa::kAvx512);
  return cpu && head_dim % 16 == 0 && head_dim <= kMaxHeadDim;
}

namespace {

template <int kNv, bool kF16>
TANDEM_AVX512 void AttendGroup(const AttentionArgs& a, const AttentionSequence& seq, int32_t g,
                               std::vector<float>& scratch) {
  const int32_t hd = a.head_dim;
  const int32_t nv = kNv > 0 ? kNv : hd / 16;
  const int32_t group = a.n_head / a.n_head_kv;
  const int32_t q_stride = a.n_head * hd;
  const int32_t n_ctx = seq.kv_start + seq.n_rows;
  const int32_t bs = a.kv.block_size;
  const int32_t n_rows_heads = seq.n_rows * group;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  // Transposing a tile costs about as much as scoring 16 rows against it.
  const bool transpose = n_rows_heads >= 16;

  const GroupScratch scr = PrepareGroupScratch(scratch, hd, n_rows_heads);
  float* kt = scr.kt;
  float* acc = scr.acc;
  RowState* state = scr.state;
  // Queries scaled once, so scores come out scaled.
  const __m512 vscale = _mm512_set1_ps(scale);

  int32_t tile_n = 0;
  for (int32_t start = 0; start < n_ctx; start += tile_n) {
    tile_n = TileKeys(bs, start, n_ctx);
    const TileView t = TileAt(a, seq, g, start, tile_n);
    if (transpose) {
      alignas(64) float row[kMaxHeadDim];
      for (int32_t j = 0; j < kTile; ++j) {
        if (j < tile_n) {
          for (int32_t i = 0; i < nv; ++i) {
            _mm512_store_ps(row + 16 * i, Load16<kF16>(t.k + j * t.row_bytes, 16 * i));
          }
        } else {
          std::fill(row, row + hd, 0.0f);
        }
        for (int32_t d = 0; d < hd; ++d) kt[d * kTile + j] = row[d];
      }
    }
    const int32_t first = std::max(0, start - seq.kv_start);
    if (!transpose) {
      // Every (row, head) query that sees this tile, scored together.
      const float* qs[kTile - 1];
      __m512 scores[kTile - 1];
      int32_t n_q = 0;
      for (int32_t r = first; r < seq.n_rows; ++r) {
        for (int32_t j = 0; j < group; ++j) {
          qs[n_q++] =
              a.q + static_cast<int64_t>(seq.first_row + r) * q_stride + (g * group + j) * hd;
        }
      }
      ScoresDirect<kNv, kF16>(qs, n_q, t, nv, scores);
      for (int32_t r = first, h = 0; r < seq.n_rows; ++r) {
        const int32_t visible = std::min(tile_n, seq.kv_start + r - start + 1);
        for (int32_t j = 0; j < group; ++j, ++h) {
          const size_t idx = static_cast<size_t>(r) * group + j;
          Accumulate<kNv, kF16>(_mm512_mul_ps(scores[h], vscale), visible, t, nv, state[idx],
                                acc + idx * hd);
        }
      }
      continue;
    }
    for (int32_t r = first; r < seq.n_rows; ++r) {
      const int32_t visible = std::min(tile_n, seq.kv_start + r - start + 1);
      for (int32_t j = 0; j < group; ++j) {
        const float* q =
            a.q + static_cast<int64_t>(seq.first_row + r) * q_stride + (g * group + j) * hd;
        const size_t idx = static_cast<size_t>(r) * group + j;
        Accumulate<kNv, kF16>(_mm512_mul_ps(ScoresTransposed(q, kt, hd), vscale), visible, t, nv,
                              state[idx], acc + idx * hd);
      }
    }
  }
  for (int32_t r = 0; r < seq.n_rows; ++r) {
    for (int32_t j = 0; j < group; ++j) {
      const size_t idx = static_cast<size_t>(r) * group + j;
      const __m512 inv = _mm512_set1_ps(1.0f / state[idx].sum);
      float* dst = a.out + static_cast<int64_t>(seq.first_row + r) * q_stride + (g * group + j) * hd;
      for (int32_t i = 0; i < nv; ++i) {
        _mm512_storeu_ps(dst + 16 * i, _mm512_mul_ps(_mm512_loadu_ps(acc + idx * hd + 16 * i), inv));
      }
    }
  }
}

}  // namespace

TANDEM_AVX512 void AttendGroupAvx512(const AttentionArgs& a, const AttentionSequence& seq,
                                     int32_t g, std::vector<float>& scratch) {
  const bool f16 = a.kv.dtype == GgmlType::kF16;
  // Head dims 64 and 128 (most models) get kernels with the head in registers.
  switch (a.head_dim) {
    case 64:
      return f16 ? AttendGroup<4, true>(a, seq, g, scratch)
                 : AttendGroup<4, false>(a, seq, g, scratch);
    case 128:
      return f16 ? AttendGroup<8, true>(a, seq, g, scratch)
                 : AttendGroup<8, false>(a, seq, g, scratch);
    default:
      return f16 ? AttendGroup<0, true>(a, seq, g, scratch)
                 : AttendGroup<0, false>(a, seq, g, scratch);
  }
}

}  // namespace tandem::engine::cpu
