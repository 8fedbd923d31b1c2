// Paged attention (LaunchPagedAttention in kernels.h) as two kernels that
// split the rows between them:
//
// - Tile kernel: a block takes kTileRows consecutive rows and one head. Rows
//   of one sequence share table_offset and sit next to each other, so a run
//   of such rows inside the tile (kMinTileRun or more) reads each key/value
//   tile once into shared memory for all of its rows: the prefill path.
// - Row kernel: one block per (row, head, split) for every other row (decode
//   tokens, short runs at tile edges). When rows * heads are too few to fill
//   the GPU and the caller gave split_scratch, each row's slots are cut into
//   `splits` chunks (flash-decoding) whose partial softmax states the last
//   of them to finish merges.
//
// Both kernels decide which rows are whose from table_offset and kv_len alone
// (RunKey and RunAround over the same tile), so no host help or pre-pass is needed and the launch
// shape depends only on n_rows and n_head: graph-capturable and replayable.
// Everything is f32 on CUDA cores (f16 keys/values are widened on load), so
// results match the f32 CPU reference to ~1e-6. args.tiles may send the
// tile rows to a tensor-core kernel instead (attention_f16.cu).
#include <cuda_fp16.h>

#include <cfloat>
#include <cmath>
#include <cstdint>

#include "engine/cuda/attention_f16.h"
#include "engine/cuda/attention_plan.h"
#include "engine/cuda/attention_tile.cuh"
#include "engine/cuda/kernels.h"
#include "engine/cuda/launch.cuh"

namespace tandem::engine::cuda {
namespace {

__device__ float LoadKv(const uint8_t* p, int64_t i, bool f16) {
  return f16 ? __half2float(reinterpret_cast<const __half*>(p)[i])
             : reinterpret_cast<const float*>(p)[i];
}

// ---- Tile kernel ----

// 128 threads as 16 x 8: thread (ty, tx) owns query rows ty and ty + 16 of
// the tile, and within a key tile the keys tx, tx + 8, tx + 16, tx + 24 for
// the scores and the dimensions 32 m + 4 tx + [0, 4) for the output. The 8
// threads of a row are 8 adjacent lanes of one warp, so a row's softmax
// max/sum is 3 shuffles and its state (m, l, acc) lives in their registers.
constexpr int kTileKeys = 32;
constexpr int kTileThreads = 128;
constexpr int kRowsPerThread = 2;
constexpr int kKeysPerThread = 4;
static_assert(kTileThreads == (kTileRows / kRowsPerThread) * 8, "16 x 8 threads");
static_assert(kTileKeys == 8 * kKeysPerThread, "8 key lanes");

// Row strides in floats. +4 keeps float4 alignment and puts the 8 key rows a
// warp reads at once (rows tx + 8 j, stride HD + 4) on different banks.
template <int HD>
struct TileLayout {
  static constexpr int kQStride = HD + 4;
  static constexpr int kKStride = HD + 4;
  static constexpr int kVStride = HD;
  static constexpr int kPStride = kTileKeys + 1;  // rows ty .. ty + 3 of a warp on distinct banks
  static constexpr int kQ = 0;
  static constexpr int kK = kQ + kTileRows * kQStride;
  static constexpr int kV = kK + kTileKeys * kKStride;
  // Past 128 dimensions the probabilities take the keys' place once every
  // score is made (a barrier more a key tile), so that head_dim 256 fits
  // the 99 KiB a block of compute capability 8.6 and 8.9 (with the 640
  // bytes of static arrays: 97.6 KiB, against 101.8 KiB apart).
  static constexpr bool kPInK = HD > 128;
  static constexpr int kP = kPInK ? kK : kV + kTileKeys * kVStride;
  static constexpr int kFloats = kPInK ? kV + kTileKeys * kVStride : kP + kTileRows * kPStride;
  static constexpr size_t kBytes = kFloats * sizeof(float);
  static_assert(!kPInK || kTileRows * kPStride <= kTileKeys * kKStride, "P fits in K's place");
};

__device__ float Dot4(float4 a, float4 b) { return a.x * b.x + a.y * b.y + a.z * b.z + a.w * b.w; }

// grid (ceil(n_rows / kTileRows), n_head), kTileThreads threads,
// TileLayout<HD>::kBytes of dynamic shared memory; head_dim <= HD.
template <int HD>
__global__ void __launch_bounds__(kTileThreads) PagedAttentionTileKernel(PagedAttentionArgs a) {
  GridPrologue();
  using L = TileLayout<HD>;
  float* smem = reinterpret_cast<float*>(DynamicSharedMemory());
  float* qs = smem + L::kQ;  // [kTileRows][kQStride], pre-scaled by 1/sqrt(head_dim)
  float* ks = smem + L::kK;  // [kTileKeys][kKStride]
  float* vs = smem + L::kV;  // [kTileKeys][kVStride]
  float* ps = smem + L::kP;  // [kTileRows][kPStride], this key tile's probabilities
  __shared__ int32_t offset_s[kTileRows];
  __shared__ int32_t len_s[kTileRows];
  __shared__ int32_t key_s[kTileRows];  // RunKey
  __shared__ int64_t key_at[kTileKeys];  // key row's byte offset from kv_base, -1 past the end

  const int tid = threadIdx.x;
  const int32_t t0 = blockIdx.x * kTileRows;
  const int32_t h = blockIdx.y;
  const int tile_rows = min(kTileRows, a.n_rows - t0);
  const int32_t hd = a.head_dim;
  const int32_t g = h / (a.n_head / a.n_head_kv);
  if (!ReadTileRows(a, t0, tile_rows, len_s, offset_s, key_s)) return;  // uniform

  const float scale = rsqrtf(static_cast<float>(hd));
  for (int i = tid; i < kTileRows * HD; i += kTileThreads) {
    const int r = i / HD;
    const int d = i % HD;
    qs[r * L::kQStride + d] =
        r < tile_rows && d < hd
            ? a.q[(static_cast<int64_t>(t0 + r) * a.n_head + h) * hd + d] * scale
            : 0.0f;
  }

  const int ty = tid / 8;
  const int tx = tid % 8;
  float m[kRowsPerThread];
  float l[kRowsPerThread];
  bool mine[kRowsPerThread];  // row handled here (in a long enough run)
  float4 acc[kRowsPerThread][HD / 32];
#pragma unroll
  for (int i = 0; i < kRowsPerThread; ++i) {
    m[i] = -INFINITY;
    l[i] = 0.0f;
    mine[i] = false;
#pragma unroll
    for (int c = 0; c < HD / 32; ++c) acc[i][c] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  }

  // A tile rarely holds more than one long run (a prefill chunk's start or
  // end); rows outside the current run see no valid key (length 0), which
  // leaves their state untouched: p = 0, correction 1.
  for (int at = 0; at < tile_rows;) {
    const Run run = RunAt(key_s, tile_rows, at);
    at = run.end;
    if (run.end - run.begin < kMinTileRun) continue;
    int32_t row_len[kRowsPerThread];
#pragma unroll
    for (int i = 0; i < kRowsPerThread; ++i) {
      const int rt = ty + 16 * i;
      const bool in = rt >= run.begin && rt < run.end;
      row_len[i] = in ? len_s[rt] : 0;
      mine[i] |= in;
    }
    const int32_t run_len = RunLength(len_s, run);
    const int32_t* blocks = a.block_table + offset_s[run.begin];

    for (int32_t kb = 0; kb < run_len; kb += kTileKeys) {
      __syncthreads();  // the last tile's P.V is done with ks, vs, ps and key_at (and qs is stored)
      if (tid < kTileKeys) key_at[tid] = KeyRowAt(a, blocks, kb + tid, run_len, g);
      __syncthreads();
      for (int i = tid; i < kTileKeys * HD; i += kTileThreads) {
        const int k = i / HD;
        const int d = i % HD;
        const int64_t row_at = key_at[k];
        float kv = 0.0f;
        float vv = 0.0f;
        // Zeros past head_dim and past the run's last slot: a masked score
        // or a zero probability must not meet a NaN from stale memory.
        if (row_at >= 0 && d < hd) {
          kv = LoadKv(a.kv_base + row_at + a.k_offset, d, a.kv_f16);
          vv = LoadKv(a.kv_base + row_at + a.v_offset, d, a.kv_f16);
        }
        ks[k * L::kKStride + d] = kv;
        vs[k * L::kVStride + d] = vv;
      }
      __syncthreads();

      float sc[kRowsPerThread][kKeysPerThread];
#pragma unroll
      for (int i = 0; i < kRowsPerThread; ++i) {
#pragma unroll
        for (int j = 0; j < kKeysPerThread; ++j) sc[i][j] = 0.0f;
      }
#pragma unroll 4
      for (int d = 0; d < HD; d += 4) {
        float4 qv[kRowsPerThread];
#pragma unroll
        for (int i = 0; i < kRowsPerThread; ++i) {
          qv[i] = *reinterpret_cast<const float4*>(qs + (ty + 16 * i) * L::kQStride + d);
        }
#pragma unroll
        for (int j = 0; j < kKeysPerThread; ++j) {
          const float4 kv = *reinterpret_cast<const float4*>(ks + (tx + 8 * j) * L::kKStride + d);
#pragma unroll
          for (int i = 0; i < kRowsPerThread; ++i) sc[i][j] += Dot4(qv[i], kv);
        }
      }
      if constexpr (L::kPInK) __syncthreads();  // every score made: ps may overwrite ks

#pragma unroll
      for (int i = 0; i < kRowsPerThread; ++i) {
        float tile_max = -INFINITY;
#pragma unroll
        for (int j = 0; j < kKeysPerThread; ++j) {
          if (kb + tx + 8 * j >= row_len[i]) sc[i][j] = -INFINITY;
          tile_max = fmaxf(tile_max, sc[i][j]);
        }
        for (int o = 1; o < 8; o <<= 1) {
          tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, o));
        }
        const float m_new = fmaxf(m[i], tile_max);
        // m_new is -inf only while the row has seen no valid key: keep
        // everything at zero instead of computing exp(-inf - -inf).
        const bool live = m_new != -INFINITY;
        const float correction = live ? expf(m[i] - m_new) : 1.0f;
        float sum = 0.0f;
#pragma unroll
        for (int j = 0; j < kKeysPerThread; ++j) {
          const float p = live ? expf(sc[i][j] - m_new) : 0.0f;
          sum += p;
          ps[(ty + 16 * i) * L::kPStride + tx + 8 * j] = p;
        }
        for (int o = 1; o < 8; o <<= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
        l[i] = l[i] * correction + sum;
        m[i] = m_new;
#pragma unroll
        for (int c = 0; c < HD / 32; ++c) {
          acc[i][c].x *= correction;
          acc[i][c].y *= correction;
          acc[i][c].z *= correction;
          acc[i][c].w *= correction;
        }
      }
      __syncthreads();

      const int keys = min(kTileKeys, run_len - kb);
      for (int k = 0; k < keys; ++k) {
        float p[kRowsPerThread];
#pragma unroll
        for (int i = 0; i < kRowsPerThread; ++i) p[i] = ps[(ty + 16 * i) * L::kPStride + k];
#pragma unroll
        for (int c = 0; c < HD / 32; ++c) {
          const float4 v = *reinterpret_cast<const float4*>(vs + k * L::kVStride + 32 * c + 4 * tx);
#pragma unroll
          for (int i = 0; i < kRowsPerThread; ++i) {
            acc[i][c].x += p[i] * v.x;
            acc[i][c].y += p[i] * v.y;
            acc[i][c].z += p[i] * v.z;
            acc[i][c].w += p[i] * v.w;
          }
        }
      }
    }
  }

#pragma unroll
  for (int i = 0; i < kRowsPerThread; ++i) {
    if (!mine[i]) continue;
    const int rt = ty + 16 * i;
    const float inv = l[i] > 0.0f ? 1.0f / l[i] : 0.0f;  // kv_len 0: zeros
    float* out = a.out + (static_cast<int64_t>(t0 + rt) * a.n_head + h) * hd;
#pragma unroll
    for (int c = 0; c < HD / 32; ++c) {
      const int d = 32 * c + 4 * tx;
      const float v[4] = {acc[i][c].x, acc[i][c].y, acc[i][c].z, acc[i][c].w};
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        if (d + e < hd) out[d + e] = v[e] * inv;
      }
    }
  }
}

// ---- Row kernel and combine ----

// Whether the tile kernel owns `row`; called by whole warps. Lane i looks at
// row t0 + i of the row's tile (kTileRows == 32 == warpSize).
__device__ bool OwnedByTiles(const int32_t* table_offset, const int32_t* kv_len, int32_t n_rows,
                             int32_t row) {
  static_assert(kTileRows == 32, "one lane per row of a tile");
  const int32_t t0 = row / kTileRows * kTileRows;
  const int32_t r = t0 + static_cast<int32_t>(threadIdx.x % 32);
  const int32_t own = RunKey(table_offset[row], kv_len[row], row);
  const uint32_t same =
      __ballot_sync(0xffffffffu, r < n_rows && RunKey(table_offset[r], kv_len[r], r) == own);
  const Run run = RunAround(same, row - t0);
  return run.end - run.begin >= kMinTileRun;
}

constexpr int kRowWarps = 4;
constexpr int kPerLane = kMaxAttentionHeadDim / 32;

// Merges the `used` partials of one row and head (parts[z * (hd + 2)]: max,
// sum, acc[hd]) into out: warp 0 finds the common max and each split's
// weight, then every thread sums its dimensions. The partials are read
// through L2 (__ldcg): other blocks wrote them, which this SM's L1 never saw.
static_assert(kMaxSplits <= 32, "one lane per split");
__device__ void MergeSplits(const float* parts, int32_t used, int32_t hd, float* out) {
  __shared__ float weight[kMaxSplits];
  __shared__ float total;
  if (threadIdx.x < 32) {
    const int32_t z = static_cast<int32_t>(threadIdx.x);
    const float pm = z < used ? __ldcg(parts + z * (hd + 2)) : -FLT_MAX;
    const float pl = z < used ? __ldcg(parts + z * (hd + 2) + 1) : 0.0f;
    float big_m = pl > 0.0f ? pm : -FLT_MAX;
    for (int o = 16; o > 0; o >>= 1) big_m = fmaxf(big_m, __shfl_xor_sync(0xffffffffu, big_m, o));
    const float w = pl > 0.0f ? expf(pm - big_m) : 0.0f;
    float big_l = pl * w;
    for (int o = 16; o > 0; o >>= 1) big_l += __shfl_xor_sync(0xffffffffu, big_l, o);
    if (z < kMaxSplits) weight[z] = w;
    if (z == 0) total = big_l;
  }
  __syncthreads();
  for (int32_t d = threadIdx.x; d < hd; d += blockDim.x) {
    float sum = 0.0f;
    for (int32_t z = 0; z < used; ++z) sum += __ldcg(parts + z * (hd + 2) + 2 + d) * weight[z];
    out[d] = total > 0.0f ? sum / total : 0.0f;
  }
}

// grid (n_rows, n_head, splits), kRowWarps warps. Split z takes the row's
// slots [z c, (z + 1) c), c = SplitChunk(kv_len, splits); warp w takes slots
// w, w + 4, ... of it, its lanes splitting head_dim for the dot product (a
// warp sum) and for the value accumulator, each warp keeping its own online
// softmax state; the warps' states are merged at the end. With one split the
// result goes to out, else (max, sum, acc[head_dim]) to the split's partial,
// and the last of the row's splits to finish merges them all into out (the
// threadfence reduction): each split makes its partial visible device-wide,
// then counts itself in counts[row * n_head + h]; the one whose count makes
// `used` knows every partial is written, merges, and sets the count back to
// 0 for the next launch. No second launch.
__global__ void PagedAttentionRowKernel(PagedAttentionArgs a, int32_t splits, unsigned* counts) {
  GridPrologue();
  __shared__ float q[kMaxAttentionHeadDim];
  __shared__ float warp_m[kRowWarps];
  __shared__ float warp_l[kRowWarps];
  __shared__ float warp_acc[kRowWarps][kMaxAttentionHeadDim];
  const int32_t row = blockIdx.x;
  const int32_t h = blockIdx.y;
  const int32_t z = blockIdx.z;
  if (OwnedByTiles(a.table_offset, a.kv_len, a.n_rows, row)) return;  // uniform over the block
  const int32_t hd = a.head_dim;
  const int32_t kv_dim = a.n_head_kv * hd;
  const int32_t g = h / (a.n_head / a.n_head_kv);
  const float scale = rsqrtf(static_cast<float>(hd));
  const float* q_row = a.q + (static_cast<int64_t>(row) * a.n_head + h) * hd;
  for (int32_t d = threadIdx.x; d < hd; d += blockDim.x) q[d] = q_row[d] * scale;
  __syncthreads();
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int32_t* blocks = a.block_table + a.table_offset[row];
  const int32_t n = a.kv_len[row];
  const int32_t chunk = SplitChunk(n, splits);
  const int32_t used = UsedSplits(n, splits);
  if (z >= used) return;  // uniform over the block; the combine reads [0, used)
  const int32_t begin = z * chunk;
  const int32_t end = min(n, begin + chunk);
  const int64_t elem = a.kv_f16 ? 2 : 4;
  float m = -FLT_MAX;
  float l = 0.0f;
  float acc[kPerLane];
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) acc[i] = 0.0f;
  for (int32_t s = begin + warp; s < end; s += kRowWarps) {
    const uint8_t* block =
        a.kv_base + static_cast<int64_t>(blocks[s / a.block_size]) * a.block_bytes;
    const int64_t at = static_cast<int64_t>(s % a.block_size) * kv_dim + g * hd;
    const uint8_t* keys = block + a.k_offset + at * elem;
    const uint8_t* values = block + a.v_offset + at * elem;
    float dot = 0.0f;
    for (int32_t d = lane; d < hd; d += 32) dot += q[d] * LoadKv(keys, d, a.kv_f16);
    for (int o = 16; o > 0; o >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, o);
    const float m_new = fmaxf(m, dot);
    const float keep = expf(m - m_new);
    const float p = expf(dot - m_new);
    l = l * keep + p;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      const int32_t d = lane + 32 * i;
      if (d < hd) acc[i] = acc[i] * keep + p * LoadKv(values, d, a.kv_f16);
    }
    m = m_new;
  }
  if (lane == 0) {
    warp_m[warp] = m;
    warp_l[warp] = l;
  }
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int32_t d = lane + 32 * i;
    if (d < hd) warp_acc[warp][d] = acc[i];
  }
  __syncthreads();
  float big_m = -FLT_MAX;
  for (int w = 0; w < kRowWarps; ++w) {
    if (warp_l[w] > 0.0f) big_m = fmaxf(big_m, warp_m[w]);
  }
  float big_l = 0.0f;
  for (int w = 0; w < kRowWarps; ++w) {
    if (warp_l[w] > 0.0f) big_l += warp_l[w] * expf(warp_m[w] - big_m);
  }
  const int64_t head_row = static_cast<int64_t>(row) * a.n_head + h;
  if (used == 1) {  // a row short enough for one split needs no combine
    float* out = a.out + head_row * hd;
    for (int32_t d = threadIdx.x; d < hd; d += blockDim.x) {
      float sum = 0.0f;
      for (int w = 0; w < kRowWarps; ++w) {
        if (warp_l[w] > 0.0f) sum += warp_acc[w][d] * expf(warp_m[w] - big_m);
      }
      out[d] = big_l > 0.0f ? sum / big_l : 0.0f;
    }
    return;
  }
  // Every used split holds at least one slot, so its sum is positive.
  float* part = a.split_scratch + (head_row * splits + z) * (hd + 2);
  if (threadIdx.x == 0) {
    part[0] = big_m;
    part[1] = big_l;
  }
  for (int32_t d = threadIdx.x; d < hd; d += blockDim.x) {
    float sum = 0.0f;
    for (int w = 0; w < kRowWarps; ++w) {
      if (warp_l[w] > 0.0f) sum += warp_acc[w][d] * expf(warp_m[w] - big_m);
    }
    part[2 + d] = sum;
  }
  __shared__ bool last;
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) {
    last = atomicAdd(counts + head_row, 1u) == static_cast<unsigned>(used - 1);
    if (last) counts[head_row] = 0;
  }
  __syncthreads();
  if (!last) return;  // uniform over the block
  __threadfence();
  MergeSplits(a.split_scratch + head_row * splits * (hd + 2), used, hd, a.out + head_row * hd);
}

template <int HD>
cudaError_t LaunchTiles(const PagedAttentionArgs& args, cudaStream_t stream) {
  constexpr size_t bytes = TileLayout<HD>::kBytes;
  // Past the 48 KiB default (HD 128 and 256) the kernel must opt in; a
  // host-side attribute, legal while the stream is being captured.
  if (bytes > 48 * 1024) {
    const cudaError_t e = cudaFuncSetAttribute(
        PagedAttentionTileKernel<HD>, cudaFuncAttributeMaxDynamicSharedMemorySize,
        static_cast<int>(bytes));
    if (e != cudaSuccess) return e;
  }
  const dim3 grid(static_cast<unsigned>((args.n_rows + kTileRows - 1) / kTileRows),
                  static_cast<unsigned>(args.n_head));
  Launch(PagedAttentionTileKernel<HD>, grid, kTileThreads, bytes, stream, args);
  return cudaGetLastError();
}

}  // namespace

// The split scratch: the partials, then a count of splits done for each
// row and head that splits (fewer than kSplitTargetBlocks of them).
constexpr int64_t kPartialFloats = MaxSplitPartials() * (int64_t{kMaxAttentionHeadDim} + 2);

int64_t PagedAttentionScratchBytes() {
  return kPartialFloats * int64_t{sizeof(float)} + kSplitTargetBlocks * int64_t{sizeof(unsigned)};
}

cudaError_t LaunchPagedAttention(const PagedAttentionArgs& args, cudaStream_t stream) {
  if (args.n_rows == 0 || args.n_head == 0) return cudaSuccess;
  if (args.head_dim <= 0 || args.head_dim > kMaxAttentionHeadDim || args.n_head_kv <= 0 ||
      args.n_head % args.n_head_kv != 0 || args.block_size <= 0) {
    return cudaErrorInvalidValue;
  }
  // With fewer rows than kMinTileRun no run can reach it: the tile kernel
  // would find nothing to do.
  if (args.n_rows >= kMinTileRun) {
    cudaError_t e;
    if (args.tiles != TileMath::kF32 && TensorCoreTilesFit(args)) {
      e = LaunchTensorCoreAttentionTiles(args, stream);
    } else if (args.head_dim <= 64) {
      e = LaunchTiles<64>(args, stream);
    } else if (args.head_dim <= 128) {
      e = LaunchTiles<128>(args, stream);
    } else {
      e = LaunchTiles<256>(args, stream);
    }
    if (e != cudaSuccess) return e;
  }
  const int32_t splits =
      args.split_scratch != nullptr ? SplitCount(int64_t{args.n_rows} * args.n_head) : 1;
  const dim3 grid(static_cast<unsigned>(args.n_rows), static_cast<unsigned>(args.n_head),
                  static_cast<unsigned>(splits));
  auto* counts = args.split_scratch != nullptr
                     ? reinterpret_cast<unsigned*>(args.split_scratch + kPartialFloats)
                     : nullptr;
  Launch(PagedAttentionRowKernel, grid, 32 * kRowWarps, 0, stream, args, splits, counts);
  return cudaGetLastError();
}

}  // namespace tandem::engine::cuda
