#include "engine/cuda/quant_kernels.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>

#include "engine/cuda/gemv_rows.cuh"
#include "engine/cuda/kernels.h"
#include "engine/cuda/launch.cuh"
#include "engine/cuda/quant_blocks.cuh"

namespace tandem::engine::cuda {
namespace {

// The GEMV gives each row `split` warps (1, 2 or 4: GemvRowSplit) taking its
// units 32 at a time in turn: a row of a 4096-wide Q4_K matrix is 16
// super-blocks, 128 units, and a warp's 32 lanes decode 4 whole super-blocks
// (576 contiguous bytes) per step, so every byte of a sector fetched is
// used. A matrix of few rows (2048 at decode's attention products) as one
// warp a row kept too few loads in flight to reach the bandwidth.
constexpr int kGemvWarps = 4;
constexpr int kGemvThreads = kGemvWarps * 32;
// Register caps (65536 / (threads * blocks)): 64 per thread for one token,
// so 32 warps per SM keep enough weight loads in flight to stream at full
// bandwidth; 128 for more tokens, whose x loads and sums would otherwise
// take all 255 registers and spill (ptxas -v; two tokens spill at 64).
// A fused SwiGLU's two rows at one token take the 128 too (at 64, Q5_K
// and Q6_K spill).
constexpr int GemvMinBlocksPerSm(int tokens, bool pair) { return tokens == 1 && !pair ? 8 : 4; }
// Tokens one fused SwiGLU launch takes: at 16 its K-quant sums spill.
constexpr int64_t kSwiGluTokensPerLaunch = 8;

constexpr int kThreads = 256;  // the dequantizer's and the gather's blocks

// Rows of y[t, r] for t < n_tokens <= kTokens, kGemvWarps / split of them
// per block: each lane decodes its units of the row once and multiplies
// them into all the tokens' x, so a launch reads the weight once. x is read
// through the read-only cache in 16-byte loads: every warp of the grid
// reads the same x, which stays in L1 / L2 while the weight streams past.
// The row's warps' sums meet in shared memory, added in a fixed order. A
// row is one product's (p.Locate), or with kSwiGlu the same row of the gate
// and the up matrix, decoded side by side and written as silu(gate) * up.
//
// With kNorm the products take RmsNorm(x) with `norm_w` (GemvNorm), folded
// in as in gemv16.cu: x is taken times the norm's weight as it is read,
// the warps of the block's first row (always live) also sum each token's
// squares of x (a row's warps read every column once), and every row
// scales its sums by that token's 1 / rms.
template <typename F, int kTokens, bool kSwiGlu, bool kNorm>
__global__ void __launch_bounds__(kGemvThreads, GemvMinBlocksPerSm(kTokens, kSwiGlu))
    QuantGemvKernel(GemvRows p, int64_t cols, int split, bool prefetch, const float* __restrict__ x,
                    int n_tokens, const float* __restrict__ norm_w, float eps) {
  constexpr int kMats = kSwiGlu ? 2 : 1;
  __shared__ float partial[kMats][kGemvWarps][kTokens];
  __shared__ float squares[kNorm ? kGemvWarps : 1][kTokens];
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  int64_t row = static_cast<int64_t>(blockIdx.x) * (kGemvWarps / split) + warp / split;
  const bool live = row < p.total;
  const int which = kSwiGlu || !live ? 0 : p.Locate(row);
  const int part = warp % split;
  const int64_t n_blocks = cols / F::kElems;
  const uint8_t* w_row[kMats];
#pragma unroll
  for (int m = 0; m < kMats; ++m) {
    w_row[m] = static_cast<const uint8_t*>(GemvRows::Pick(p.w, which + m)) +
               (live ? row : 0) * n_blocks * F::kBytes;
  }
  const int n_units = live ? static_cast<int>(n_blocks * F::kUnits) : 0;
  // The row's blocks, which no kernel writes, asked of L2 while the kernel
  // before may still run (engine/cuda/launch.h).
  if (live && prefetch) {
#pragma unroll
    for (int m = 0; m < kMats; ++m) {
      PrefetchL2(w_row[m], n_blocks * F::kBytes, 32 * part + lane, 32 * split);
    }
  }
  GridPrologue();

  float acc[kMats][kTokens];
  float sq[kTokens];
#pragma unroll
  for (int t = 0; t < kTokens; ++t) {
    sq[t] = 0.0f;
#pragma unroll
    for (int m = 0; m < kMats; ++m) acc[m][t] = 0.0f;
  }
  const bool squaring = kNorm && warp < split;

  for (int u = 32 * part + lane; u < n_units; u += 32 * split) {
    const int b = u / F::kUnits;
    typename F::UnitT unit[kMats];
#pragma unroll
    for (int m = 0; m < kMats; ++m) {
      F::Decode(w_row[m] + static_cast<int64_t>(b) * F::kBytes, u % F::kUnits, unit[m]);
    }
    const float* x_block = x + static_cast<int64_t>(b) * F::kElems;
#pragma unroll
    for (int t = 0; t < kTokens; ++t) {
      if (t < n_tokens) {
        const float* xt = x_block + t * cols;
#pragma unroll
        for (int r = 0; r < F::kRuns; ++r) {
          // Both matrices' runs sit at the same offsets: one format.
          const float4* xr = reinterpret_cast<const float4*>(xt + unit[0].offset[r]);
          // The norm's weight at the run (no pointer made from a null one).
          const float4* gr = nullptr;
          if constexpr (kNorm) {
            gr = reinterpret_cast<const float4*>(norm_w + static_cast<int64_t>(b) * F::kElems +
                                                 unit[0].offset[r]);
          }
          // sum_i (scale q_i - min) x_i = scale sum_i q_i x_i - min sum_i x_i:
          // the scale and min once per run, in f32 throughout.
          float dot[kMats];
#pragma unroll
          for (int m = 0; m < kMats; ++m) dot[m] = 0.0f;
          float sum = 0.0f;
#pragma unroll
          for (int i = 0; i < F::kLen / 4; ++i) {
            float4 v = __ldg(xr + i);
            if constexpr (kNorm) {
              if (squaring) sq[t] += SumSquares(v);
              const float4 g = __ldg(gr + i);
              v = make_float4(v.x * g.x, v.y * g.y, v.z * g.z, v.w * g.w);
            }
#pragma unroll
            for (int m = 0; m < kMats; ++m) {
              dot[m] = fmaf(unit[m].q[r][4 * i], v.x, dot[m]);
              dot[m] = fmaf(unit[m].q[r][4 * i + 1], v.y, dot[m]);
              dot[m] = fmaf(unit[m].q[r][4 * i + 2], v.z, dot[m]);
              dot[m] = fmaf(unit[m].q[r][4 * i + 3], v.w, dot[m]);
            }
            if constexpr (F::kHasMin) sum += (v.x + v.y) + (v.z + v.w);
          }
#pragma unroll
          for (int m = 0; m < kMats; ++m) {
            acc[m][t] = fmaf(unit[m].scale[r], dot[m], acc[m][t]);
            if constexpr (F::kHasMin) acc[m][t] = fmaf(-unit[m].min[r], sum, acc[m][t]);
          }
        }
      }
    }
  }

#pragma unroll
  for (int m = 0; m < kMats; ++m) {
#pragma unroll
    for (int t = 0; t < kTokens; ++t) {
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) acc[m][t] += __shfl_xor_sync(0xffffffffu, acc[m][t], o);
    }
    // Every lane holds every sum; lane t keeps token t's (a constant index
    // into acc, so it stays in registers).
#pragma unroll
    for (int t = 0; t < kTokens; ++t) {
      if (lane == t) partial[m][warp][t] = acc[m][t];
    }
  }
  if constexpr (kNorm) StoreSquares(sq, squaring, warp, lane, squares);
  __syncthreads();
  if (live && part == 0 && lane < n_tokens) {
    float scale = 1.0f;
    if constexpr (kNorm) scale = NormScale(squares, split, lane, cols, eps);
    p.Store<kSwiGlu>(partial, warp, split, which, row, lane, scale);
  }
}

// One thread per unit of the whole matrix, grid-stride. Each run's f16
// goes out in 16-byte stores (runs are 8 or 16 elements at offsets of 8):
// stored a pair at a time, a warp's stores wrote 4 bytes of each 32-byte
// sector they touched, and the dequantization of the 1B model before its
// GEMMs took about 3.8 ms a step (inferred from Q4_K_M against F16, prefill
// and batch 32 alike, 2026-11-26; not profiled), about 0.7 TB/s.
template <typename F>
__global__ void DequantizeToF16Kernel(const uint8_t* __restrict__ w, int64_t rows, int64_t cols,
                                      __half* __restrict__ out) {
  GridPrologue();
  const int64_t blocks_per_row = cols / F::kElems;
  const int64_t units_per_row = blocks_per_row * F::kUnits;
  const int64_t total = rows * units_per_row;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += stride) {
    const int64_t row = i / units_per_row;
    const int64_t unit_in_row = i % units_per_row;
    const int64_t b = unit_in_row / F::kUnits;
    typename F::UnitT unit;
    F::Decode(w + (row * blocks_per_row + b) * F::kBytes, static_cast<int>(unit_in_row % F::kUnits),
              unit);
    __half* dst = out + row * cols + b * F::kElems;
    static_assert(F::kLen % 8 == 0, "runs of whole 16-byte stores");
#pragma unroll
    for (int r = 0; r < F::kRuns; ++r) {
#pragma unroll
      for (int e = 0; e < F::kLen; e += 8) {
        *reinterpret_cast<uint4*>(dst + unit.offset[r] + e) = quant::EightHalves(unit, r, e);
      }
    }
  }
}

// One block per token; its threads take the row's units.
template <typename F>
__global__ void EmbedQuantKernel(const uint8_t* __restrict__ table, int64_t cols,
                                 const int32_t* __restrict__ tokens, float* __restrict__ out) {
  GridPrologue();
  const int64_t blocks_per_row = cols / F::kElems;
  const uint8_t* src =
      table + static_cast<int64_t>(tokens[blockIdx.x]) * blocks_per_row * F::kBytes;
  float* dst = out + static_cast<int64_t>(blockIdx.x) * cols;
  const int n_units = static_cast<int>(blocks_per_row * F::kUnits);
  for (int u = threadIdx.x; u < n_units; u += blockDim.x) {
    const int b = u / F::kUnits;
    typename F::UnitT unit;
    F::Decode(src + static_cast<int64_t>(b) * F::kBytes, u % F::kUnits, unit);
    float* block_out = dst + static_cast<int64_t>(b) * F::kElems;
#pragma unroll
    for (int r = 0; r < F::kRuns; ++r) {
#pragma unroll
      for (int e = 0; e < F::kLen; ++e) block_out[unit.offset[r] + e] = quant::Weight(unit, r, e);
    }
  }
}

// The unquantized tables: F32 copied, F16 and BF16 widened (both exact).
enum class PlainType { kF32, kF16, kBf16 };
template <PlainType kType>
__global__ void EmbedPlainKernel(const void* __restrict__ table, int64_t cols,
                                 const int32_t* __restrict__ tokens, float* __restrict__ out) {
  GridPrologue();
  const int64_t row = tokens[blockIdx.x];
  float* dst = out + static_cast<int64_t>(blockIdx.x) * cols;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    if constexpr (kType == PlainType::kF32) {
      dst[c] = static_cast<const float*>(table)[row * cols + c];
    } else if constexpr (kType == PlainType::kF16) {
      dst[c] = __half2float(static_cast<const __half*>(table)[row * cols + c]);
    } else {
      dst[c] = __bfloat162float(static_cast<const __nv_bfloat16*>(table)[row * cols + c]);
    }
  }
}

// One GEMV launch for n_tokens <= kQuantGemvTokensPerLaunch (8 for a pair,
// 4 with a norm), with the accumulators of the smallest power of two that
// holds them: registers for 16 tokens' sums would be wasted on a single
// decode token.
template <typename F, bool kSwiGlu, bool kNorm>
void LaunchGemv(const GemvRows& p, int64_t cols, const float* x, int n_tokens, const GemvNorm& norm,
                cudaStream_t stream) {
  const int split = GemvRowSplit(p.total, kGemvWarps);
  const int64_t per_block = kGemvWarps / split;
  const auto grid = static_cast<unsigned>((p.total + per_block - 1) / per_block);
  const auto launch = [&](auto kernel) {
    Launch(kernel, grid, kGemvThreads, 0, stream, p, cols, split, ProgrammaticLaunch(), x, n_tokens,
           norm.weight, norm.eps);
  };
  if (n_tokens <= 1) {
    launch(QuantGemvKernel<F, 1, kSwiGlu, kNorm>);
  } else if (n_tokens <= 2) {
    launch(QuantGemvKernel<F, 2, kSwiGlu, kNorm>);
  } else if (n_tokens <= 4) {
    launch(QuantGemvKernel<F, 4, kSwiGlu, kNorm>);
  } else if constexpr (!kNorm) {
    if (n_tokens <= 8) {
      launch(QuantGemvKernel<F, 8, kSwiGlu, kNorm>);
    } else if constexpr (!kSwiGlu) {
      launch(QuantGemvKernel<F, 16, kSwiGlu, kNorm>);
    }
  }
}
static_assert(kQuantGemvTokensPerLaunch == 16 && kSwiGluTokensPerLaunch == 8 &&
                  kQuantGemvNormTokensPerLaunch == 4,
              "LaunchGemv's largest instantiations");

unsigned GridFor(int64_t work_items) {
  // Grid-stride beyond a million blocks: plenty to fill any GPU.
  return static_cast<unsigned>(
      std::min<int64_t>((work_items + kThreads - 1) / kThreads, int64_t{1} << 20));
}

}  // namespace

namespace {

// Every launch of a product set in kQuantGemvTokensPerLaunch tokens at a
// time (kSwiGluTokensPerLaunch for a pair, kQuantGemvNormTokensPerLaunch
// with a norm); errors as
// quant_kernels.h says.
template <bool kSwiGlu>
cudaError_t LaunchQuantRows(GgmlType type, const GemvRows& p, int64_t cols, const float* x,
                            int64_t n_tokens, const GemvNorm* norm, cudaStream_t stream) {
  return quant::WithFormat(type, [&](auto format) -> cudaError_t {
    using F = decltype(format);
    if (cols % F::kElems != 0) return cudaErrorInvalidValue;
    if (!quant::Aligned(x, 16)) return cudaErrorMisalignedAddress;
    if (norm != nullptr && !quant::Aligned(norm->weight, 16)) return cudaErrorMisalignedAddress;
    for (int i = 0; i < p.count; ++i) {
      if (!quant::Aligned(p.w[i], F::kAlignment)) return cudaErrorMisalignedAddress;
    }
    if (p.total == 0 || n_tokens == 0) return cudaSuccess;
    const int64_t per_launch = norm != nullptr ? kQuantGemvNormTokensPerLaunch
                               : kSwiGlu       ? kSwiGluTokensPerLaunch
                                               : kQuantGemvTokensPerLaunch;
    for (int64_t t0 = 0; t0 < n_tokens; t0 += per_launch) {
      const int n = static_cast<int>(std::min(per_launch, n_tokens - t0));
      GemvRows at = p;
      for (int i = 0; i < p.count; ++i) {
        if (at.y[i] != nullptr) at.y[i] += t0 * p.rows[i];
      }
      if (norm != nullptr) {
        LaunchGemv<F, kSwiGlu, true>(at, cols, x + t0 * cols, n, *norm, stream);
      } else {
        LaunchGemv<F, kSwiGlu, false>(at, cols, x + t0 * cols, n, GemvNorm{}, stream);
      }
    }
    return cudaGetLastError();
  });
}

}  // namespace

cudaError_t LaunchMatMulQuant(GgmlType type, const void* w, int64_t rows, int64_t cols,
                              const float* x, int64_t n_tokens, float* y, cudaStream_t stream) {
  const GemvProduct product{.w = w, .rows = rows, .y = y};
  return LaunchMatMulQuantGroup(type, &product, 1, cols, x, n_tokens, stream);
}

cudaError_t LaunchMatMulQuantGroup(GgmlType type, const GemvProduct* products, int count,
                                   int64_t cols, const float* x, int64_t n_tokens,
                                   cudaStream_t stream, const GemvNorm* norm) {
  GemvRows p;
  if (!GemvRows::Of(products, count, p)) return cudaErrorInvalidValue;
  return LaunchQuantRows<false>(type, p, cols, x, n_tokens, norm, stream);
}

cudaError_t LaunchMatMulQuantSwiGlu(GgmlType type, const void* gate, const void* up, int64_t rows,
                                    int64_t cols, const float* x, int64_t n_tokens, float* out,
                                    cudaStream_t stream, const GemvNorm* norm) {
  return LaunchQuantRows<true>(type, GemvRows::Pair(gate, up, rows, out), cols, x, n_tokens, norm,
                               stream);
}

cudaError_t LaunchDequantizeToF16(GgmlType type, const void* w, int64_t rows, int64_t cols,
                                  void* out_f16, cudaStream_t stream) {
  return quant::WithFormat(type, [&](auto format) -> cudaError_t {
    using F = decltype(format);
    if (cols % F::kElems != 0) return cudaErrorInvalidValue;
    if (!quant::Aligned(w, F::kAlignment) || !quant::Aligned(out_f16, 16)) {
      return cudaErrorMisalignedAddress;
    }
    const int64_t units = rows * (cols / F::kElems) * F::kUnits;
    if (units == 0) return cudaSuccess;
    Launch(DequantizeToF16Kernel<F>, GridFor(units), kThreads, 0, stream,
           static_cast<const uint8_t*>(w), rows, cols, static_cast<__half*>(out_f16));
    return cudaGetLastError();
  });
}

cudaError_t LaunchEmbedRows(GgmlType type, const void* table, int64_t cols, const int32_t* tokens,
                            int64_t n_tokens, float* out, cudaStream_t stream) {
  const unsigned grid = static_cast<unsigned>(n_tokens);
  switch (type) {
    case GgmlType::kF32:
    case GgmlType::kF16:
    case GgmlType::kBF16:
      if (!quant::Aligned(table, type == GgmlType::kF32 ? 4 : 2)) return cudaErrorMisalignedAddress;
      if (n_tokens == 0 || cols == 0) return cudaSuccess;
      if (type == GgmlType::kF32) {
        Launch(EmbedPlainKernel<PlainType::kF32>, grid, kThreads, 0, stream, table, cols, tokens,
               out);
      } else if (type == GgmlType::kF16) {
        Launch(EmbedPlainKernel<PlainType::kF16>, grid, kThreads, 0, stream, table, cols, tokens,
               out);
      } else {
        Launch(EmbedPlainKernel<PlainType::kBf16>, grid, kThreads, 0, stream, table, cols, tokens,
               out);
      }
      return cudaGetLastError();
    default:
      return quant::WithFormat(type, [&](auto format) -> cudaError_t {
        using F = decltype(format);
        if (cols % F::kElems != 0) return cudaErrorInvalidValue;
        if (!quant::Aligned(table, F::kAlignment)) return cudaErrorMisalignedAddress;
        if (n_tokens == 0 || cols == 0) return cudaSuccess;
        Launch(EmbedQuantKernel<F>, grid, kThreads, 0, stream, static_cast<const uint8_t*>(table),
               cols, tokens, out);
        return cudaGetLastError();
      });
  }
}

}  // namespace tandem::engine::cuda
