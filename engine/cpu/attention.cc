#include "engine/cpu/attention.h"

#include "engine/cpu/attention_avx2.h"
#include "engine/cpu/attention_avx512.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "common/check.h"
#include "engine/sample/fast_exp.h"

namespace tandem::engine::cpu {
namespace {

constexpr int kMaxHeadDim = 256;
constexpr int kMaxBlock = 64;  // tile width; blocks larger than this are split

// Copies `rows` rows of one head's slice ([rows][head_dim] at stride kv_dim)
// to f32, transposed for keys ([head_dim][kMaxBlock]) or straight for values.
void LoadTile(const uint8_t* src, GgmlType dtype, int32_t rows, int32_t head_offset,
              int32_t kv_dim, int32_t head_dim, bool transpose, float* dst) {
  for (int32_t r = 0; r < rows; ++r) {
    const int64_t at = static_cast<int64_t>(r) * kv_dim + head_offset;
    for (int32_t d = 0; d < head_dim; ++d) {
      const float v = dtype == GgmlType::kF32
                          ? reinterpret_cast<const float*>(src)[at + d]
                          : Fp16ToFp32(reinterpret_cast<const uint16_t*>(src)[at + d]);
      if (transpose) {
        dst[d * kMaxBlock + r] = v;
      } else {
        dst[r * head_dim + d] = v;
      }
    }
  }
}

// The per-tile math, compiled for AVX-512 and a portable baseline; the loader
// picks the best the CPU supports.
__attribute__((target_clones("arch=skylake-avx512", "avx2", "default")))
void ScoreTile(const float* q, const float* kt, int32_t head_dim, float scale,
               int32_t n_keys, float* s) {
  float acc[kMaxBlock] = {};
  for (int32_t d = 0; d < head_dim; ++d) {
    const float qd = q[d];
    const float* row = kt + d * kMaxBlock;
    for (int32_t j = 0; j < n_keys; ++j) acc[j] += qd * row[j];
  }
  for (int32_t j = 0; j < n_keys; ++j) s[j] = acc[j] * scale;
}

__attribute__((target_clones("arch=skylake-avx512", "avx2", "default")))
void AccumulateTile(const float* p, const float* v, int32_t n_keys, int32_t head_dim,
                    float correction, float* acc) {
  for (int32_t d = 0; d < head_dim; ++d) acc[d] *= correction;
  for (int32_t j = 0; j < n_keys; ++j) {
    const float pj = p[j];
    const float* row = v + j * head_dim;
    for (int32_t d = 0; d < head_dim; ++d) acc[d] += pj * row[d];
  }
}

struct RowState {
  float max;
  float sum;
};

// All query rows of one sequence for the heads sharing KV head `g`.
void AttendGroup(const AttentionArgs& a, const AttentionSequence& seq, int32_t g,
                 std::vector<float>& scratch) {
  const int32_t hd = a.head_dim;
  const int32_t group = a.n_head / a.n_head_kv;
  const int32_t q_stride = a.n_head * hd;
  const int32_t n_ctx = seq.kv_start + seq.n_rows;
  const int32_t bs = a.kv.block_size;
  const int32_t n_rows_heads = seq.n_rows * group;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));

  scratch.resize(static_cast<size_t>(2 * kMaxBlock * hd + n_rows_heads * (hd + 2) + kMaxBlock));
  float* kt = scratch.data();
  float* vt = kt + kMaxBlock * hd;
  float* acc = vt + kMaxBlock * hd;                 // [rows*group][hd]
  auto* state = reinterpret_cast<RowState*>(acc + static_cast<size_t>(n_rows_heads) * hd);
  float* s = reinterpret_cast<float*>(state + n_rows_heads);
  std::fill(acc, acc + static_cast<size_t>(n_rows_heads) * hd, 0.0f);
  for (int32_t i = 0; i < n_rows_heads; ++i) {
    state[i] = {-std::numeric_limits<float>::infinity(), 0.0f};
  }

  const int64_t elem = GgmlBlockBytes(a.kv.dtype);
  int32_t tile = 0;
  for (int32_t start = 0; start < n_ctx; start += tile) {
    tile = std::min({bs - start % bs, kMaxBlock, n_ctx - start});
    const BlockId block = seq.blocks[start / bs];
    const uint8_t* block_base = a.kv.base.backend_address() + block * a.kv.block_bytes;
    const int64_t slot_off = static_cast<int64_t>(start % bs) * a.kv.kv_dim * elem;
    LoadTile(block_base + a.kv.k_offset + slot_off, a.kv.dtype, tile, g * hd, a.kv.kv_dim,
             hd, /*transpose=*/true, kt);
    LoadTile(block_base + a.kv.v_offset + slot_off, a.kv.dtype, tile, g * hd, a.kv.kv_dim,
             hd, /*transpose=*/false, vt);
    // Rows before `first` cannot see any key of this tile.
    const int32_t first = std::max(0, start - seq.kv_start);
    for (int32_t r = first; r < seq.n_rows; ++r) {
      const int32_t pos = seq.kv_start + r;
      const int32_t visible = std::min(tile, pos - start + 1);
      for (int32_t j = 0; j < group; ++j) {
        const int32_t h = g * group + j;
        const float* q = a.q + static_cast<int64_t>(seq.first_row + r) * q_stride + h * hd;
        ScoreTile(q, kt, hd, scale, visible, s);
        RowState& st = state[r * group + j];
        float tile_max = s[0];
        for (int32_t k = 1; k < visible; ++k) tile_max = std::max(tile_max, s[k]);
        const float new_max = std::max(st.max, tile_max);
        const float correction = ExpNonPositive(st.max - new_max);
        float sum = 0.0f;
        for (int32_t k = 0; k < visible; ++k) {
          s[k] = ExpNonPositive(s[k] - new_max);
          sum += s[k];
        }
        st.sum = st.sum * correction + sum;
        st.max = new_max;
        AccumulateTile(s, vt, visible, hd, correction, acc + static_cast<size_t>(r * group + j) * hd);
      }
    }
  }
  for (int32_t r = 0; r < seq.n_rows; ++r) {
    for (int32_t j = 0; j < group; ++j) {
      const int32_t h = g * group + j;
      const float inv = 1.0f / state[r * group + j].sum;
      const float* src = acc + static_cast<size_t>(r * group + j) * hd;
      float* dst = a.out + static_cast<int64_t>(seq.first_row + r) * q_stride + h * hd;
      for (int32_t d = 0; d < hd; ++d) dst[d] = src[d] * inv;
    }
  }
}

}  // namespace

void PagedAttention(const AttentionArgs& a, const CpuAttentionOptions& options) {
  TANDEM_CHECK(a.head_dim <= kMaxHeadDim, "head_dim within kernel limit");
  TANDEM_CHECK(a.n_head % a.n_head_kv == 0, "query heads grouped evenly over KV heads");
  const int32_t n_tasks = static_cast<int32_t>(a.seqs.size()) * a.n_head_kv;
  int64_t work = 0;
  for (const AttentionSequence& s : a.seqs) {
    work += static_cast<int64_t>(s.n_rows) * (s.kv_start + s.n_rows);
  }
  work *= static_cast<int64_t>(a.n_head) * a.head_dim;
  // Below this much work a parallel region costs more than it saves.
  const bool avx512 = options.isa == Isa::kAvx512 && CanUseAvx512Attention(a.head_dim);
  const bool avx2 = !avx512 && options.isa != Isa::kPortable && CanUseAvx2Attention(a.head_dim);
  const bool parallel = options.threads > 1 && n_tasks > 1 && work > (1 << 16);
#pragma omp parallel num_threads(options.threads) if (parallel)
  {
    std::vector<float> scratch;
#pragma omp for schedule(dynamic, 1)
    for (int32_t t = 0; t < n_tasks; ++t) {
      if (avx512) {
        AttendGroupAvx512(a, a.seqs[t / a.n_head_kv], t % a.n_head_kv, scratch);
      } else if (avx2) {
        AttendGroupAvx2(a, a.seqs[t / a.n_head_kv], t % a.n_head_kv, scratch);
      } else {
        AttendGroup(a, a.seqs[t / a.n_head_kv], t % a.n_head_kv, scratch);
      }
    }
  }
}

void PagedAttentionReference(const AttentionArgs& a) {
  const int32_t hd = a.head_dim;
  const int32_t group = a.n_head / a.n_head_kv;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const int64_t elem = GgmlBlockBytes(a.kv.dtype);
  auto load = [&](const AttentionSequence& seq, int32_t pos, int64_t part_offset,
                  int32_t g, int32_t d) {
    const int32_t bs = a.kv.block_size;
    const uint8_t* p = a.kv.base.backend_address() + seq.blocks[pos / bs] * a.kv.block_bytes +
                       part_offset +
                       (static_cast<int64_t>(pos % bs) * a.kv.kv_dim + g * hd + d) * elem;
    return a.kv.dtype == GgmlType::kF32 ? *reinterpret_cast<const float*>(p)
                                        : Fp16ToFp32(*reinterpret_cast<const uint16_t*>(p));
  };
  for (const AttentionSequence& seq : a.seqs) {
    for (int32_t r = 0; r < seq.n_rows; ++r) {
      const int32_t pos = seq.kv_start + r;
      for (int32_t h = 0; h < a.n_head; ++h) {
        const int32_t g = h / group;
        const float* q = a.q + static_cast<int64_t>(seq.first_row + r) * a.n_head * hd + h * hd;
        std::vector<double> s(pos + 1);
        double mx = -1e300;
        for (int32_t j = 0; j <= pos; ++j) {
          double dot = 0;
          for (int32_t d = 0; d < hd; ++d) dot += q[d] * load(seq, j, a.kv.k_offset, g, d);
          s[j] = dot * scale;
          mx = std::max(mx, s[j]);
        }
        double sum = 0;
        for (double& v : s) sum += (v = std::exp(v - mx));
        float* out = a.out + static_cast<int64_t>(seq.first_row + r) * a.n_head * hd + h * hd;
        for (int32_t d = 0; d < hd; ++d) {
          double o = 0;
          for (int32_t j = 0; j <= pos; ++j) o += s[j] * load(seq, j, a.kv.v_offset, g, d);
          out[d] = static_cast<float>(o / sum);
        }
      }
    }
  }
}

}  // namespace tandem::engine::cpu
