#include "engine/cuda/quant_gemm.h"

#include <cuda_fp16.h>
#include <mma.h>

#include <cstdint>

#include "engine/cuda/launch.cuh"
#include "engine/cuda/quant_blocks.cuh"

namespace tandem::engine::cuda {
namespace {

namespace wmma = nvcuda::wmma;

// A block is kGroups groups of four warps, each group walking every
// kGroups-th chunk of the columns with shared memory of its own, so a block
// that must cover every column of its rows (few blocks on a small matrix:
// 8 for a 512-row K product) takes half as many steps in sequence; the
// groups' sums are added in a fixed order at the end.
constexpr int kGroups = 2;
constexpr int kGroupWarps = 4;
constexpr int kGroupThreads = 32 * kGroupWarps;
constexpr int kThreads = kGroups * kGroupThreads;
constexpr int kFrag = 16;                       // WMMA's 16 x 16 x 16
constexpr int kTileRows = kGroupWarps * kFrag;  // a group's warp: 16 rows each
constexpr int kTileTokens = 2 * kFrag;          // two accumulators a warp
constexpr int kChunk = 128;                     // columns a step: half a K-quant super-block
// Halves a shared row (16-byte rows, banks staggered), and floats a token
// of the result.
constexpr int kStride = kChunk + 8;
constexpr int kOutStride = kTileRows + 4;

// A group's tiles and sums (26 KiB); the block's dynamic shared memory holds
// kGroups of them (past the 48 KiB default: opted in at launch). Every WMMA
// pointer below is 32-byte aligned: rows of 272 bytes, 16-row and 16-column
// steps, groups of a multiple of 32 bytes.
struct GroupShared {
  __half w[kTileRows][kStride];
  __half x[kTileTokens][kStride];
  float y[kTileTokens][kOutStride];  // the group's sums, a token a row
};
static_assert(sizeof(GroupShared) % 32 == 0, "each group's tiles 32-byte aligned");
constexpr size_t kSharedBytes = kGroups * sizeof(GroupShared);

// Block b of the grid takes row tile b / token_tiles and token tile
// b % token_tiles: a row tile's token tiles run side by side, so their
// reads of the weight after the first come from L2.
template <typename F>
__global__ void __launch_bounds__(kThreads)
    QuantTileGemmKernel(const uint8_t* __restrict__ w, int64_t rows, int64_t cols,
                        const float* __restrict__ x, int64_t n_tokens, float* __restrict__ y,
                        bool add, int token_tiles, bool prefetch) {
  GroupShared* shared = reinterpret_cast<GroupShared*>(DynamicSharedMemory());
  const int group = threadIdx.x / kGroupThreads;
  const int tid = threadIdx.x % kGroupThreads;  // within the group
  const int warp = tid / 32;                    // within the group
  GroupShared& s = shared[group];
  const int64_t row0 = static_cast<int64_t>(blockIdx.x / token_tiles) * kTileRows;
  const int64_t tok0 = static_cast<int64_t>(blockIdx.x % token_tiles) * kTileTokens;
  const int64_t blocks_per_row = cols / F::kElems;
  const int live_rows = static_cast<int>(rows - row0 < kTileRows ? rows - row0 : kTileRows);
  const int live_tokens =
      static_cast<int>(n_tokens - tok0 < kTileTokens ? n_tokens - tok0 : kTileTokens);
  // The tile's rows of the weight, which no kernel writes, asked of L2 by
  // its first token tile while the kernel before may still run
  // (engine/cuda/launch.h).
  if (prefetch && blockIdx.x % token_tiles == 0) {
    const int64_t row_bytes = blocks_per_row * F::kBytes;
    PrefetchL2(w + row0 * row_bytes, live_rows * row_bytes, threadIdx.x, kThreads);
  }
  // Rows and tokens past the ends are zeros throughout (their sums are
  // never stored); the steps below write only the live ones.
  for (int i = tid; i < (kTileRows - live_rows) * kStride; i += kGroupThreads) {
    s.w[live_rows + i / kStride][i % kStride] = __float2half_rn(0.0f);
  }
  for (int i = tid; i < (kTileTokens - live_tokens) * kStride; i += kGroupThreads) {
    s.x[live_tokens + i / kStride][i % kStride] = __float2half_rn(0.0f);
  }
  GridPrologue();

  wmma::fragment<wmma::accumulator, kFrag, kFrag, kFrag, float> acc[2];
  wmma::fill_fragment(acc[0], 0.0f);
  wmma::fill_fragment(acc[1], 0.0f);
  const int64_t chunks = (cols + kChunk - 1) / kChunk;
  // Every thread meets the same barriers: a group with no chunk left in the
  // last round only waits.
  for (int64_t round = 0; round < chunks; round += kGroups) {
    const int64_t c0 = (round + group) * kChunk;
    const bool mine = c0 < cols;
    // A multiple of 32 columns: every format's units fall wholly inside
    // or outside a chunk (a K-quant unit within its half super-block).
    const int n = mine ? static_cast<int>(cols - c0 < kChunk ? cols - c0 : kChunk) : 0;
    if (mine) {
      const int64_t first_unit =
          c0 / F::kElems * F::kUnits + (c0 % F::kElems) * F::kUnits / F::kElems;
      const int units = n * F::kUnits / F::kElems;
      for (int i = tid; i < live_rows * units; i += kGroupThreads) {
        const int r = i / units;
        const int64_t u = first_unit + i % units;
        const int64_t b = u / F::kUnits;
        typename F::UnitT unit;
        F::Decode(w + ((row0 + r) * blocks_per_row + b) * F::kBytes,
                  static_cast<int>(u % F::kUnits), unit);
        const int first_col = static_cast<int>(b * F::kElems - c0);
#pragma unroll
        for (int k = 0; k < F::kRuns; ++k) {
#pragma unroll
          for (int e = 0; e < F::kLen; e += 8) {
            *reinterpret_cast<uint4*>(&s.w[r][first_col + unit.offset[k] + e]) =
                quant::EightHalves(unit, k, e);
          }
        }
      }
      const int n4 = n / 4;
      for (int i = tid; i < live_tokens * n4; i += kGroupThreads) {
        const int t = i / n4;
        const int c = 4 * (i % n4);
        const float4 v = __ldg(reinterpret_cast<const float4*>(x + (tok0 + t) * cols + c0 + c));
        uint32_t* dst = reinterpret_cast<uint32_t*>(&s.x[t][c]);
        dst[0] = quant::PackHalves(v.x, v.y);
        dst[1] = quant::PackHalves(v.z, v.w);
      }
    }
    __syncthreads();
    for (int k = 0; k < n; k += kFrag) {
      wmma::fragment<wmma::matrix_a, kFrag, kFrag, kFrag, __half, wmma::row_major> a;
      wmma::load_matrix_sync(a, &s.w[kFrag * warp][k], kStride);
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        // x's tokens as B's columns: B (k, t) is s.x[t][k].
        wmma::fragment<wmma::matrix_b, kFrag, kFrag, kFrag, __half, wmma::col_major> b;
        wmma::load_matrix_sync(b, &s.x[kFrag * j][k], kStride);
        wmma::mma_sync(acc[j], a, b, acc[j]);
      }
    }
    __syncthreads();  // the round's tiles read before the next is written
  }
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    // Column-major: sum (row i, token t) at s.y[t][i].
    wmma::store_matrix_sync(&s.y[kFrag * j][kFrag * warp], acc[j], kOutStride, wmma::mem_col_major);
  }
  __syncthreads();
  for (int i = threadIdx.x; i < live_tokens * kTileRows; i += kThreads) {
    const int t = i / kTileRows;
    const int r = i % kTileRows;
    if (r < live_rows) {
      float sum = shared[0].y[t][r];
#pragma unroll
      for (int g = 1; g < kGroups; ++g) sum += shared[g].y[t][r];
      float& out = y[(tok0 + t) * rows + row0 + r];
      out = add ? out + sum : sum;
    }
  }
}

}  // namespace

cudaError_t LaunchQuantTileGemm(GgmlType type, const void* w, int64_t rows, int64_t cols,
                                const float* x, int64_t n_tokens, float* y, bool add,
                                cudaStream_t stream) {
  return quant::WithFormat(type, [&](auto format) -> cudaError_t {
    using F = decltype(format);
    static_assert(kChunk % F::kElems == 0 || F::kElems % kChunk == 0, "whole units a chunk");
    if (cols % F::kElems != 0) return cudaErrorInvalidValue;
    if (!quant::Aligned(w, F::kAlignment) || !quant::Aligned(x, 16)) {
      return cudaErrorMisalignedAddress;
    }
    if (rows == 0 || n_tokens == 0) return cudaSuccess;
    // Past the 48 KiB default the kernel must opt in (legal while capturing).
    const cudaError_t e =
        cudaFuncSetAttribute(QuantTileGemmKernel<F>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             static_cast<int>(kSharedBytes));
    if (e != cudaSuccess) return e;
    const int64_t token_tiles = (n_tokens + kTileTokens - 1) / kTileTokens;
    const int64_t row_tiles = (rows + kTileRows - 1) / kTileRows;
    Launch(QuantTileGemmKernel<F>, static_cast<unsigned>(row_tiles * token_tiles), kThreads,
           kSharedBytes, stream, static_cast<const uint8_t*>(w), rows, cols, x, n_tokens, y, add,
           static_cast<int>(token_tiles), ProgrammaticLaunch());
    return cudaGetLastError();
  });
}

}  // namespace tandem::engine::cuda
