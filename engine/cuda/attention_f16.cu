// The tensor-core forms of attention.cu's tile kernel (PagedAttentionArgs::
// tiles): the same rows (runs of kMinTileRun or more inside a 32-row tile),
// the same online softmax, but the two products of each key tile on the
// tensor cores through WMMA (16 x 16 x 16, f16 in, f32 accumulate):
//
//   S = Q K^T     q pre-scaled by 1/sqrt(head_dim)
//   O = O c + P V p = exp(s - m), c the rows' corrections
//
// TileMath::kF16 rounds q, k, v and p to f16: about 1e-3 relative against
// the f32 kernel (what FlashAttention's f16 path costs). kSplitF16 writes
// each f32 operand x as hi + lo 2^-11, hi = f16(x), lo = f16((x - hi) 2^11),
// and sums hi hi' + (hi lo' + lo hi') 2^-11 (lo lo' is below f32's
// rounding): f32's accuracy for two or three products a tile. The low
// halves' products go to an accumulator of their own, scaled back when the
// product is done: unscaled, x - hi is below f16's normal range (2^-14)
// wherever |x| < 2^-3, where f16 keeps fewer of its bits (every probability
// under 1/8, queries and values of small magnitude), and the small terms
// would be summed into the large ones in each step. f16 keys and values are
// exact as hi alone, so with f16 KV only q and p are split (two products).
//
// Everything else stays f32: the scores, the row maxima and sums (of the p
// as the product sees them, so that O / l weighs each value by what it was
// multiplied by), the accumulator. A block: 32 query rows of one head, 4
// warps, a key tile of kKeys = 64. The accumulator O lives in shared memory
// as f32, so the per-row rescale is plain indexing (a WMMA accumulator's
// element layout is unspecified); each warp loads its part of O as the
// accumulator of P V and stores it back.
#include <cuda_fp16.h>
#include <mma.h>

#include <cmath>
#include <cstdint>

#include "engine/cuda/attention_f16.h"
#include "engine/cuda/attention_plan.h"
#include "engine/cuda/attention_tile.cuh"
#include "engine/cuda/launch.cuh"

namespace tandem::engine::cuda {
namespace {

namespace wmma = nvcuda::wmma;

constexpr int kKeys = 64;
constexpr int kThreads = 128;
constexpr int kWarps = kThreads / 32;
constexpr int kFrag = 16;
constexpr int kChunk = 8;  // dimensions moved at once (16 bytes of f16)
static_assert(kTileRows == 2 * kFrag && kKeys == 4 * kFrag && kWarps == 4,
              "a warp takes 16 rows x 32 keys of S and 16 rows x HD/2 of O");
static_assert(kThreads == 4 * kTileRows, "4 threads per row for the softmax");

// Which operands carry a low half: none (TileMath::kF16), q and p
// (kSplitF16 with f16 KV), or all four (kSplitF16 with f32 KV).
enum class Split { kNone, kQP, kAll };

constexpr size_t Align128(size_t n) { return (n + 127) / 128 * 128; }

// Strides in elements: f16 rows padded by 8 (16 bytes), f32 rows by 4, which
// keeps WMMA's ldm rules (multiples of 8 and 4) and moves consecutive rows
// to other banks. Every section starts on 128 bytes (WMMA wants 32); a low
// half's section follows its high half's at `lo` elements, empty when the
// operand is not split.
template <int HD, Split kSplit>
struct TcLayout {
  static constexpr int kQStride = HD + 8;     // __half [kTileRows], pre-scaled
  static constexpr int kKStride = HD + 8;     // __half [kKeys]
  static constexpr int kVStride = HD + 8;     // __half [kKeys]
  static constexpr int kSStride = kKeys + 4;  // float [kTileRows], scores
  static constexpr int kPStride = kKeys + 8;  // __half [kTileRows], probabilities
  static constexpr int kOStride = HD + 4;     // float [kTileRows], accumulator
  static constexpr int kQParts = kSplit == Split::kNone ? 1 : 2;
  static constexpr int kKvParts = kSplit == Split::kAll ? 2 : 1;
  static constexpr int kQLo = kTileRows * kQStride;  // elements from qs to its low half
  static constexpr int kKvLo = kKeys * kKStride;
  static constexpr int kPLo = kTileRows * kPStride;
  static constexpr size_t kQ = 0;
  static constexpr size_t kK = kQ + Align128(kQParts * kQLo * sizeof(__half));
  static constexpr size_t kV = kK + Align128(kKvParts * kKvLo * sizeof(__half));
  static constexpr size_t kS = kV + Align128(kKvParts * kKvLo * sizeof(__half));
  static constexpr size_t kP = kS + Align128(kTileRows * kSStride * sizeof(float));
  static constexpr size_t kO = kP + Align128(kQParts * kPLo * sizeof(__half));
  static constexpr size_t kKeyAt = kO + Align128(kTileRows * kOStride * sizeof(float));
  static constexpr size_t kRows = kKeyAt + Align128(kKeys * sizeof(int64_t));
  static constexpr size_t kBytes = kRows + 3 * kTileRows * sizeof(int32_t);
};

using FragA = wmma::fragment<wmma::matrix_a, kFrag, kFrag, kFrag, __half, wmma::row_major>;
using FragBCol = wmma::fragment<wmma::matrix_b, kFrag, kFrag, kFrag, __half, wmma::col_major>;
using FragBRow = wmma::fragment<wmma::matrix_b, kFrag, kFrag, kFrag, __half, wmma::row_major>;
using FragC = wmma::fragment<wmma::accumulator, kFrag, kFrag, kFrag, float>;

// f32 to f16 without overflow: a value past f16's range is clamped rather
// than made infinite (0 x inf would turn a masked zero into a NaN).
__device__ __half ToHalf(float x) { return __float2half_rn(fminf(fmaxf(x, -65504.0f), 65504.0f)); }

// The low half's scale: x - hi is at most half of hi's last place, 2^-11
// of |x|; scaled by 2^11 it is about x's own magnitude.
constexpr float kLoScale = 2048.0f;
constexpr float kLoUnscale = 1.0f / kLoScale;

// x as hi (+ lo, scaled by kLoScale, when `split`). Within f16's range, lo
// cannot overflow: |x - hi| <= 16 there.
__device__ void Store(float x, bool split, __half* hi, __half* lo) {
  const __half h = ToHalf(x);
  *hi = h;
  if (split) *lo = ToHalf((x - __half2float(h)) * kLoScale);
}

// c += lo kLoUnscale, element by element (the two fragments' elements are
// laid out alike).
__device__ void AddLow(FragC& c, const FragC& lo) {
#pragma unroll
  for (int e = 0; e < c.num_elements; ++e) c.x[e] += lo.x[e] * kLoUnscale;
}

// Dimensions [d, d + 8) of the key or value row at p (f16 or f32 elements,
// hd of them) into hi[0, 8) (and lo[0, 8) when `split`), zeros past hd.
// 16-byte loads where aligned.
__device__ void LoadChunk(const uint8_t* p, int d, int hd, bool f16, bool split, __half* hi,
                          __half* lo) {
  __align__(16) __half h[kChunk];
  __align__(16) __half l[kChunk];
  if (f16) {
    const __half* src = reinterpret_cast<const __half*>(p) + d;
    if (d + kChunk <= hd && reinterpret_cast<uintptr_t>(src) % 16 == 0) {
      *reinterpret_cast<uint4*>(h) = *reinterpret_cast<const uint4*>(src);
    } else {
#pragma unroll
      for (int e = 0; e < kChunk; ++e) h[e] = d + e < hd ? src[e] : __float2half(0.0f);
    }
#pragma unroll
    for (int e = 0; e < kChunk; ++e) l[e] = __float2half(0.0f);  // f16 is exact as hi
  } else {
    const float* src = reinterpret_cast<const float*>(p) + d;
    float v[kChunk];
    if (d + kChunk <= hd && reinterpret_cast<uintptr_t>(src) % 16 == 0) {
      const float4 a = reinterpret_cast<const float4*>(src)[0];
      const float4 b = reinterpret_cast<const float4*>(src)[1];
      v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w;
      v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
    } else {
#pragma unroll
      for (int e = 0; e < kChunk; ++e) v[e] = d + e < hd ? src[e] : 0.0f;
    }
#pragma unroll
    for (int e = 0; e < kChunk; ++e) Store(v[e], true, &h[e], &l[e]);
  }
  *reinterpret_cast<uint4*>(hi) = *reinterpret_cast<const uint4*>(h);
  if (split) *reinterpret_cast<uint4*>(lo) = *reinterpret_cast<const uint4*>(l);
}

__device__ void ZeroChunk(bool split, __half* hi, __half* lo) {
  *reinterpret_cast<uint4*>(hi) = make_uint4(0, 0, 0, 0);
  if (split) *reinterpret_cast<uint4*>(lo) = make_uint4(0, 0, 0, 0);
}

// grid (ceil(n_rows / kTileRows), n_head), kThreads threads,
// TcLayout<HD, kSplit>::kBytes of dynamic shared memory; head_dim <= HD.
template <int HD, Split kSplit>
__global__ void __launch_bounds__(kThreads) PagedAttentionTcTileKernel(PagedAttentionArgs a) {
  GridPrologue();
  using L = TcLayout<HD, kSplit>;
  constexpr bool kSplitQ = kSplit != Split::kNone;
  constexpr bool kSplitKv = kSplit == Split::kAll;
  uint8_t* smem = DynamicSharedMemory();
  __half* qs = reinterpret_cast<__half*>(smem + L::kQ);
  __half* ks = reinterpret_cast<__half*>(smem + L::kK);
  __half* vs = reinterpret_cast<__half*>(smem + L::kV);
  float* ss = reinterpret_cast<float*>(smem + L::kS);
  __half* ps = reinterpret_cast<__half*>(smem + L::kP);
  float* os = reinterpret_cast<float*>(smem + L::kO);
  int64_t* key_at = reinterpret_cast<int64_t*>(smem + L::kKeyAt);  // -1 past the run's end
  int32_t* offset_s = reinterpret_cast<int32_t*>(smem + L::kRows);
  int32_t* len_s = offset_s + kTileRows;
  int32_t* key_s = len_s + kTileRows;  // RunKey

  const int tid = threadIdx.x;
  const int warp = tid / 32;
  const int32_t t0 = blockIdx.x * kTileRows;
  const int32_t h = blockIdx.y;
  const int tile_rows = min(kTileRows, a.n_rows - t0);
  const int32_t hd = a.head_dim;
  const int32_t g = h / (a.n_head / a.n_head_kv);
  if (!ReadTileRows(a, t0, tile_rows, len_s, offset_s, key_s)) return;  // uniform

  const float scale = rsqrtf(static_cast<float>(hd));
  for (int i = tid; i < kTileRows * HD; i += kThreads) {
    const int r = i / HD;
    const int d = i % HD;
    const float q = r < tile_rows && d < hd
                        ? a.q[(static_cast<int64_t>(t0 + r) * a.n_head + h) * hd + d]
                        : 0.0f;
    __half* at = qs + r * L::kQStride + d;
    Store(q * scale, kSplitQ, at, at + L::kQLo);
    os[r * L::kOStride + d] = 0.0f;
  }

  // The softmax's view: thread (row, quarter) takes keys quarter + 4 j of its
  // row, and dimensions quarter + 4 j of its accumulator row. The 4 threads
  // of a row are adjacent lanes and keep identical copies of its m and l.
  const int row = tid / 4;
  const int quarter = tid % 4;
  float m = -INFINITY;
  float l = 0.0f;
  bool mine = false;  // row handled here (in a long enough run)
  // The products' view: warp w takes rows r0 + [0, 16) with keys
  // 32 (w % 2) + [0, 32) of S and dimensions (HD / 2)(w % 2) + [0, HD / 2) of O.
  const int r0 = kFrag * (warp / 2);
  const int s0 = 2 * kFrag * (warp % 2);
  constexpr int kOFrags = HD / (2 * kFrag);
  const int o0 = (HD / 2) * (warp % 2);

  for (int at = 0; at < tile_rows;) {
    const Run run = RunAt(key_s, tile_rows, at);
    at = run.end;
    if (run.end - run.begin < kMinTileRun) continue;
    const bool in = row >= run.begin && row < run.end;
    const int32_t row_len = in ? len_s[row] : 0;
    mine |= in;
    const int32_t run_len = RunLength(len_s, run);
    const int32_t* blocks = a.block_table + offset_s[run.begin];

    for (int32_t kb = 0; kb < run_len; kb += kKeys) {
      __syncthreads();  // the last tile's P V is done with ks, vs, ps, os (and qs, os are stored)
      if (tid < kKeys) key_at[tid] = KeyRowAt(a, blocks, kb + tid, run_len, g);
      __syncthreads();
      // Zeros past head_dim and past the run's last slot: a masked score or
      // a zero probability must not meet a NaN from stale memory.
      for (int i = tid; i < kKeys * (HD / kChunk); i += kThreads) {
        const int k = i / (HD / kChunk);
        const int d = kChunk * (i % (HD / kChunk));
        const int64_t row_at = key_at[k];
        __half* kat = ks + k * L::kKStride + d;
        __half* vat = vs + k * L::kVStride + d;
        if (row_at >= 0 && d < hd) {
          LoadChunk(a.kv_base + row_at + a.k_offset, d, hd, a.kv_f16, kSplitKv, kat,
                    kat + L::kKvLo);
          LoadChunk(a.kv_base + row_at + a.v_offset, d, hd, a.kv_f16, kSplitKv, vat,
                    vat + L::kKvLo);
        } else {
          ZeroChunk(kSplitKv, kat, kat + L::kKvLo);
          ZeroChunk(kSplitKv, vat, vat + L::kKvLo);
        }
      }
      __syncthreads();

      {  // S = Q K^T; K stored [key][dim] is K^T column-major.
        FragA q_hi, q_lo;
        FragBCol kt;
        FragC sf[2], sl[2];  // sl: the low halves' products, scaled by kLoScale
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          wmma::fill_fragment(sf[j], 0.0f);
          if constexpr (kSplitQ) wmma::fill_fragment(sl[j], 0.0f);
        }
#pragma unroll
        for (int d = 0; d < HD; d += kFrag) {
          wmma::load_matrix_sync(q_hi, qs + r0 * L::kQStride + d, L::kQStride);
          if constexpr (kSplitQ) {
            wmma::load_matrix_sync(q_lo, qs + L::kQLo + r0 * L::kQStride + d, L::kQStride);
          }
#pragma unroll
          for (int j = 0; j < 2; ++j) {
            const __half* k_at = ks + (s0 + kFrag * j) * L::kKStride + d;
            wmma::load_matrix_sync(kt, k_at, L::kKStride);
            wmma::mma_sync(sf[j], q_hi, kt, sf[j]);
            if constexpr (kSplitQ) wmma::mma_sync(sl[j], q_lo, kt, sl[j]);
            if constexpr (kSplitKv) {
              wmma::load_matrix_sync(kt, k_at + L::kKvLo, L::kKStride);
              wmma::mma_sync(sl[j], q_hi, kt, sl[j]);
            }
          }
        }
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          if constexpr (kSplitQ) AddLow(sf[j], sl[j]);
          wmma::store_matrix_sync(ss + r0 * L::kSStride + s0 + kFrag * j, sf[j], L::kSStride,
                                  wmma::mem_row_major);
        }
      }
      __syncthreads();

      {  // Online softmax over the tile, and the accumulator row rescaled.
        constexpr int kMine = kKeys / 4;
        float sc[kMine];
        float tile_max = -INFINITY;
#pragma unroll
        for (int j = 0; j < kMine; ++j) {
          const int k = quarter + 4 * j;
          sc[j] = kb + k < row_len ? ss[row * L::kSStride + k] : -INFINITY;
          tile_max = fmaxf(tile_max, sc[j]);
        }
        tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1));
        tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 2));
        const float m_new = fmaxf(m, tile_max);
        // -inf only while the row has seen no valid key: all zeros then.
        const bool live = m_new != -INFINITY;
        const float correction = live ? expf(m - m_new) : 1.0f;
        float sum = 0.0f;
#pragma unroll
        for (int j = 0; j < kMine; ++j) {
          const float p = live ? expf(sc[j] - m_new) : 0.0f;
          __half* p_at = ps + row * L::kPStride + quarter + 4 * j;
          Store(p, kSplitQ, p_at, p_at + L::kPLo);
          // Unsplit, the product sees p rounded: sum that.
          sum += kSplitQ ? p : __half2float(*p_at);
        }
        sum += __shfl_xor_sync(0xffffffffu, sum, 1);
        sum += __shfl_xor_sync(0xffffffffu, sum, 2);
        l = l * correction + sum;
        m = m_new;
        if (correction != 1.0f) {
          for (int d = quarter; d < HD; d += 4) os[row * L::kOStride + d] *= correction;
        }
      }
      __syncthreads();

      {  // O += P V; V stored [key][dim] is row-major.
        FragC of[kOFrags];
        FragC ol[kSplitQ ? kOFrags : 1];  // the low halves' products, scaled by kLoScale
#pragma unroll
        for (int c = 0; c < kOFrags; ++c) {
          wmma::load_matrix_sync(of[c], os + r0 * L::kOStride + o0 + kFrag * c, L::kOStride,
                                 wmma::mem_row_major);
          if constexpr (kSplitQ) wmma::fill_fragment(ol[c], 0.0f);
        }
        FragA p_hi, p_lo;
        FragBRow vb;
#pragma unroll
        for (int k = 0; k < kKeys; k += kFrag) {
          wmma::load_matrix_sync(p_hi, ps + r0 * L::kPStride + k, L::kPStride);
          if constexpr (kSplitQ) {
            wmma::load_matrix_sync(p_lo, ps + L::kPLo + r0 * L::kPStride + k, L::kPStride);
          }
#pragma unroll
          for (int c = 0; c < kOFrags; ++c) {
            const __half* v_at = vs + k * L::kVStride + o0 + kFrag * c;
            wmma::load_matrix_sync(vb, v_at, L::kVStride);
            wmma::mma_sync(of[c], p_hi, vb, of[c]);
            if constexpr (kSplitQ) wmma::mma_sync(ol[c], p_lo, vb, ol[c]);
            if constexpr (kSplitKv) {
              wmma::load_matrix_sync(vb, v_at + L::kKvLo, L::kVStride);
              wmma::mma_sync(ol[c], p_hi, vb, ol[c]);
            }
          }
        }
#pragma unroll
        for (int c = 0; c < kOFrags; ++c) {
          if constexpr (kSplitQ) AddLow(of[c], ol[c]);
          wmma::store_matrix_sync(os + r0 * L::kOStride + o0 + kFrag * c, of[c], L::kOStride,
                                  wmma::mem_row_major);
        }
      }
    }
  }
  __syncthreads();  // the last P V's stores are seen by every row's threads

  if (!mine) return;
  const float inv = l > 0.0f ? 1.0f / l : 0.0f;  // kv_len 0: zeros
  float* out = a.out + (static_cast<int64_t>(t0 + row) * a.n_head + h) * hd;
  for (int d = quarter; d < hd; d += 4) out[d] = os[row * L::kOStride + d] * inv;
}

template <int HD, Split kSplit>
cudaError_t LaunchTc(const PagedAttentionArgs& args, cudaStream_t stream) {
  constexpr size_t bytes = TcLayout<HD, kSplit>::kBytes;
  if (bytes > 48 * 1024) {  // past the default, the kernel must opt in (legal while capturing)
    const cudaError_t e =
        cudaFuncSetAttribute(PagedAttentionTcTileKernel<HD, kSplit>,
                             cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes));
    if (e != cudaSuccess) return e;
  }
  const dim3 grid(static_cast<unsigned>((args.n_rows + kTileRows - 1) / kTileRows),
                  static_cast<unsigned>(args.n_head));
  Launch(PagedAttentionTcTileKernel<HD, kSplit>, grid, kThreads, bytes, stream, args);
  return cudaGetLastError();
}

template <int HD>
cudaError_t LaunchTcFor(const PagedAttentionArgs& args, cudaStream_t stream) {
  if (args.tiles == TileMath::kF16) return LaunchTc<HD, Split::kNone>(args, stream);
  if (args.kv_f16) return LaunchTc<HD, Split::kQP>(args, stream);
  return LaunchTc<HD, Split::kAll>(args, stream);
}

template <int HD>
size_t BytesFor(const PagedAttentionArgs& args) {
  if (args.tiles == TileMath::kF16) return TcLayout<HD, Split::kNone>::kBytes;
  return args.kv_f16 ? TcLayout<HD, Split::kQP>::kBytes : TcLayout<HD, Split::kAll>::kBytes;
}

}  // namespace

bool TensorCoreTilesFit(const PagedAttentionArgs& args) {
  const size_t bytes = args.head_dim <= 64    ? BytesFor<64>(args)
                       : args.head_dim <= 128 ? BytesFor<128>(args)
                                              : BytesFor<256>(args);
  return args.shared_bytes_per_block >= 0 &&
         bytes <= static_cast<size_t>(args.shared_bytes_per_block);
}

cudaError_t LaunchTensorCoreAttentionTiles(const PagedAttentionArgs& args, cudaStream_t stream) {
  if (args.head_dim <= 64) return LaunchTcFor<64>(args, stream);
  if (args.head_dim <= 128) return LaunchTcFor<128>(args, stream);
  return LaunchTcFor<256>(args, stream);
}

}  // namespace tandem::engine::cuda
