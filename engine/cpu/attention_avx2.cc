#include "engine/cpu/attention_avx2.h"

#if defined(__x86_64__) && defined(__GNUC__)

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "engine/cpu/attention_tile.h"
#include "engine/cpu/kernels.h"

#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#define TANDEM_AVX2 __attribute__((target("avx2,fma,f16c")))

namespace tandem::engine::cpu {
namespace {

constexpr int kTile = kAttentionTile;  // two ymm of scores
constexpr int kMaxHeadDim = 256;  // 32 ymm per head vector

// e^x on 8 lanes: the same degree-7 polynomial on |r| <= ln2/2 as the
// AVX-512 kernel, the power of two built in the exponent bits (x clamped to
// the normal float range first; above it the result is inf, as e^x
// overflows). NaN propagates.
TANDEM_AVX2 inline __m256 Exp8(__m256 x) {
  const __m256 overflow = _mm256_cmp_ps(x, _mm256_set1_ps(88.72f), _CMP_GT_OQ);
  x = _mm256_min_ps(_mm256_set1_ps(88.0f), _mm256_max_ps(_mm256_set1_ps(-87.0f), x));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.0f / 5040.0f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 720.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  const __m256i pow2 = _mm256_slli_epi32(
      _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_blendv_ps(_mm256_mul_ps(p, _mm256_castsi256_ps(pow2)),
                          _mm256_set1_ps(std::numeric_limits<float>::infinity()), overflow);
}

TANDEM_AVX2 inline float Sum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

TANDEM_AVX2 inline float Max8(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  return _mm_cvtss_f32(m);
}

// Elements d..d+7 of one key or value row, as f32.
TANDEM_AVX2 inline __m256 Load8(const uint8_t* row, GgmlType dtype, int32_t d) {
  if (dtype == GgmlType::kF32) return _mm256_loadu_ps(reinterpret_cast<const float*>(row) + d);
  const auto* halves = reinterpret_cast<const uint16_t*>(row) + d;
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(halves)));
}

// Scores of one query against the tile's keys read in place (decode).
TANDEM_AVX2 inline void ScoresDirect(const float* q, const TileView& t, GgmlType dtype,
                                     int32_t nv, float* s) {
  for (int32_t j = 0; j < kTile; ++j) s[j] = 0.0f;
  for (int32_t j = 0; j < t.n; ++j) {
    const uint8_t* row = t.k + j * t.row_bytes;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    int32_t i = 0;
    for (; i + 1 < nv; i += 2) {
      acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + 8 * i), Load8(row, dtype, 8 * i), acc0);
      acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(q + 8 * i + 8), Load8(row, dtype, 8 * i + 8), acc1);
    }
    if (i < nv) acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + 8 * i), Load8(row, dtype, 8 * i), acc0);
    s[j] = Sum8(_mm256_add_ps(acc0, acc1));
  }
}

// Scores of one query against a transposed tile kt[d][16] (prefill).
TANDEM_AVX2 inline void ScoresTransposed(const float* q, const float* kt, int32_t hd, float* s) {
  __m256 lo0 = _mm256_setzero_ps(), hi0 = _mm256_setzero_ps();
  __m256 lo1 = _mm256_setzero_ps(), hi1 = _mm256_setzero_ps();
  for (int32_t d = 0; d < hd; d += 2) {
    const __m256 q0 = _mm256_set1_ps(q[d]), q1 = _mm256_set1_ps(q[d + 1]);
    lo0 = _mm256_fmadd_ps(q0, _mm256_load_ps(kt + d * kTile), lo0);
    hi0 = _mm256_fmadd_ps(q0, _mm256_load_ps(kt + d * kTile + 8), hi0);
    lo1 = _mm256_fmadd_ps(q1, _mm256_load_ps(kt + (d + 1) * kTile), lo1);
    hi1 = _mm256_fmadd_ps(q1, _mm256_load_ps(kt + (d + 1) * kTile + 8), hi1);
  }
  _mm256_storeu_ps(s, _mm256_add_ps(lo0, lo1));
  _mm256_storeu_ps(s + 8, _mm256_add_ps(hi0, hi1));
}

// Folds one tile's (scaled) scores into a row's running softmax and output.
TANDEM_AVX2 inline void Accumulate(const float* scores, int32_t visible, const TileView& t,
                                   GgmlType dtype, int32_t nv, RowState& st, float* acc) {
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256 neg_inf = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
  const __m256 m0 = _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(visible), lane));
  const __m256 m1 = _mm256_castsi256_ps(
      _mm256_cmpgt_epi32(_mm256_set1_epi32(visible - 8), lane));
  const __m256 s0 = _mm256_blendv_ps(neg_inf, _mm256_loadu_ps(scores), m0);
  const __m256 s1 = _mm256_blendv_ps(neg_inf, _mm256_loadu_ps(scores + 8), m1);
  const float tile_max = Max8(_mm256_max_ps(s0, s1));
  const float new_max = std::max(st.max, tile_max);
  const float correction = st.max == -std::numeric_limits<float>::infinity()
                               ? 0.0f
                               : std::exp(st.max - new_max);
  const __m256 vmax = _mm256_set1_ps(new_max);
  const __m256 p0 = _mm256_and_ps(Exp8(_mm256_sub_ps(s0, vmax)), m0);
  const __m256 p1 = _mm256_and_ps(Exp8(_mm256_sub_ps(s1, vmax)), m1);
  st.sum = st.sum * correction + Sum8(_mm256_add_ps(p0, p1));
  st.max = new_max;
  alignas(32) float pj[kTile];
  _mm256_store_ps(pj, p0);
  _mm256_store_ps(pj + 8, p1);
  const __m256 corr = _mm256_set1_ps(correction);
  // The output in chunks of 8 registers (64 floats) to stay in registers.
  for (int32_t base = 0; base < nv; base += 8) {
    const int32_t n = std::min(8, nv - base);
    __m256 out[8];
    for (int32_t i = 0; i < n; ++i) {
      out[i] = _mm256_mul_ps(_mm256_loadu_ps(acc + 8 * (base + i)), corr);
    }
    for (int32_t j = 0; j < visible; ++j) {
      const __m256 w = _mm256_set1_ps(pj[j]);
      const uint8_t* row = t.v + j * t.row_bytes;
      for (int32_t i = 0; i < n; ++i) {
        out[i] = _mm256_fmadd_ps(w, Load8(row, dtype, 8 * (base + i)), out[i]);
      }
    }
    for (int32_t i = 0; i < n; ++i) _mm256_storeu_ps(acc + 8 * (base + i), out[i]);
  }
}

}  // namespace

bool CanUseAvx2Attention(int32_t head_dim) {
  static const bool cpu = IsaSupported(Isa::kAvx2);
  return cpu && head_dim % 8 == 0 && head_dim <= kMaxHeadDim;
}

TANDEM_AVX2 void AttendGroupAvx2(const AttentionArgs& a, const AttentionSequence& seq, int32_t g,
                                 std::vector<float>& scratch) {
  const int32_t hd = a.head_dim;
  const int32_t nv = hd / 8;
  const int32_t group = a.n_head / a.n_head_kv;
  const int32_t q_stride = a.n_head * hd;
  const int32_t n_ctx = seq.kv_start + seq.n_rows;
  const int32_t bs = a.kv.block_size;
  const int32_t n_rows_heads = seq.n_rows * group;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const bool transpose = n_rows_heads >= 16;

  const GroupScratch scr = PrepareGroupScratch(scratch, hd, n_rows_heads);
  float* kt = scr.kt;
  float* acc = scr.acc;
  RowState* state = scr.state;
  int32_t tile_n = 0;
  for (int32_t start = 0; start < n_ctx; start += tile_n) {
    tile_n = TileKeys(bs, start, n_ctx);
    const TileView t = TileAt(a, seq, g, start, tile_n);
    if (transpose) {
      alignas(32) float row[kMaxHeadDim];
      for (int32_t j = 0; j < kTile; ++j) {
        if (j < tile_n) {
          for (int32_t i = 0; i < nv; ++i) {
            _mm256_store_ps(row + 8 * i, Load8(t.k + j * t.row_bytes, a.kv.dtype, 8 * i));
          }
        } else {
          std::fill(row, row + hd, 0.0f);
        }
        for (int32_t d = 0; d < hd; ++d) kt[d * kTile + j] = row[d];
      }
    }
    const int32_t first = std::max(0, start - seq.kv_start);
    alignas(32) float s[kTile];
    for (int32_t r = first; r < seq.n_rows; ++r) {
      const int32_t visible = std::min(tile_n, seq.kv_start + r - start + 1);
      for (int32_t j = 0; j < group; ++j) {
        const float* q =
            a.q + static_cast<int64_t>(seq.first_row + r) * q_stride + (g * group + j) * hd;
        if (transpose) {
          ScoresTransposed(q, kt, hd, s);
        } else {
          ScoresDirect(q, t, a.kv.dtype, nv, s);
        }
        for (int32_t k = 0; k < kTile; ++k) s[k] *= scale;
        const size_t idx = static_cast<size_t>(r) * group + j;
        Accumulate(s, visible, t, a.kv.dtype, nv, state[idx], acc + idx * hd);
      }
    }
  }
  for (int32_t r = 0; r < seq.n_rows; ++r) {
    for (int32_t j = 0; j < group; ++j) {
      const size_t idx = static_cast<size_t>(r) * group + j;
      const __m256 inv = _mm256_set1_ps(1.0f / state[idx].sum);
      float* dst =
          a.out + static_cast<int64_t>(seq.first_row + r) * q_stride + (g * group + j) * hd;
      for (int32_t i = 0; i < nv; ++i) {
        _mm256_storeu_ps(dst + 8 * i, _mm256_mul_ps(_mm256_loadu_ps(acc + idx * hd + 8 * i), inv));
      }
    }
  }
}

// SiLU(gate) * up on 8 lanes (the AVX2 table's SwiGLU).
TANDEM_AVX2 void SwiGluAvx2(const float* gate, const float* up, int64_t n, float* out) {
  const __m256 one = _mm256_set1_ps(1.0f);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 g = _mm256_loadu_ps(gate + i);
    const __m256 e = Exp8(_mm256_sub_ps(_mm256_setzero_ps(), g));
    const __m256 silu = _mm256_div_ps(g, _mm256_add_ps(one, e));
    _mm256_storeu_ps(out + i, _mm256_mul_ps(silu, _mm256_loadu_ps(up + i)));
  }
  for (; i < n; ++i) out[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

}  // namespace tandem::engine::cpu

#else

namespace tandem::engine::cpu {
bool CanUseAvx2Attention(int32_t) { return false; }
void AttendGroupAvx2(const AttentionArgs&, const AttentionSequence&, int32_t,
                     std::vector<float>&) {}
void SwiGluAvx2(const float* gate, const float* up, int64_t n, float* out) {
  PortableKernels().swiglu(gate, up, n, out);
}
}  // namespace tandem::engine::cpu

#endif
