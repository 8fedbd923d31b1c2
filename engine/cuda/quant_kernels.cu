#include "engine/cuda/quant_kernels.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>

#include "engine/cuda/kernels.h"
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
constexpr int GemvMinBlocksPerSm(int tokens) { return tokens == 1 ? 8 : 4; }

constexpr int kThreads = 256;  // the dequantizer's and the gather's blocks

// Rows of y[t, r] for t < n_tokens <= kTokens, kGemvWarps / split of them
// per block: each lane decodes its units of the row once and multiplies
// them into all the tokens' x, so a launch reads the weight once. x is read
// through the read-only cache in 16-byte loads: every warp of the grid
// reads the same x, which stays in L1 / L2 while the weight streams past.
// The row's warps' sums meet in shared memory, added in a fixed order.
template <typename F, int kTokens>
__global__ void __launch_bounds__(kGemvThreads, GemvMinBlocksPerSm(kTokens))
    QuantGemvKernel(const uint8_t* __restrict__ w, int64_t rows, int64_t cols, int split,
                    const float* __restrict__ x, int n_tokens, float* __restrict__ y) {
  __shared__ float partial[kGemvWarps][kTokens];
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * (kGemvWarps / split) + warp / split;
  const int part = warp % split;
  const int64_t n_blocks = cols / F::kElems;
  const uint8_t* w_row = w + (row < rows ? row : 0) * n_blocks * F::kBytes;
  const int n_units = row < rows ? static_cast<int>(n_blocks * F::kUnits) : 0;

  float acc[kTokens];
#pragma unroll
  for (int t = 0; t < kTokens; ++t) acc[t] = 0.0f;

  for (int u = 32 * part + lane; u < n_units; u += 32 * split) {
    const int b = u / F::kUnits;
    typename F::UnitT unit;
    F::Decode(w_row + static_cast<int64_t>(b) * F::kBytes, u % F::kUnits, unit);
    const float* x_block = x + static_cast<int64_t>(b) * F::kElems;
#pragma unroll
    for (int t = 0; t < kTokens; ++t) {
      if (t < n_tokens) {
        const float* xt = x_block + t * cols;
#pragma unroll
        for (int r = 0; r < F::kRuns; ++r) {
          const float4* xr = reinterpret_cast<const float4*>(xt + unit.offset[r]);
          // sum_i (scale q_i - min) x_i = scale sum_i q_i x_i - min sum_i x_i:
          // the scale and min once per run, in f32 throughout.
          float dot = 0.0f;
          float sum = 0.0f;
#pragma unroll
          for (int i = 0; i < F::kLen / 4; ++i) {
            const float4 v = __ldg(xr + i);
            dot = fmaf(unit.q[r][4 * i], v.x, dot);
            dot = fmaf(unit.q[r][4 * i + 1], v.y, dot);
            dot = fmaf(unit.q[r][4 * i + 2], v.z, dot);
            dot = fmaf(unit.q[r][4 * i + 3], v.w, dot);
            if constexpr (F::kHasMin) sum += (v.x + v.y) + (v.z + v.w);
          }
          acc[t] = fmaf(unit.scale[r], dot, acc[t]);
          if constexpr (F::kHasMin) acc[t] = fmaf(-unit.min[r], sum, acc[t]);
        }
      }
    }
  }

#pragma unroll
  for (int t = 0; t < kTokens; ++t) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) acc[t] += __shfl_xor_sync(0xffffffffu, acc[t], o);
  }
  // Every lane holds every sum; lane t keeps token t's (a constant index
  // into acc, so it stays in registers).
#pragma unroll
  for (int t = 0; t < kTokens; ++t) {
    if (lane == t) partial[warp][t] = acc[t];
  }
  __syncthreads();
  if (row < rows && part == 0 && lane < n_tokens) {
    float sum = partial[warp][lane];
    for (int p = 1; p < split; ++p) sum += partial[warp + p][lane];
    y[lane * rows + row] = sum;
  }
}

// One thread per unit of the whole matrix, grid-stride.
template <typename F>
__global__ void DequantizeToF16Kernel(const uint8_t* __restrict__ w, int64_t rows, int64_t cols,
                                      __half* __restrict__ out) {
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
#pragma unroll
    for (int r = 0; r < F::kRuns; ++r) {
#pragma unroll
      for (int e = 0; e < F::kLen; e += 2) {
        // Runs start at even offsets: a 4-byte aligned pair.
        *reinterpret_cast<__half2*>(dst + unit.offset[r] + e) =
            __floats2half2_rn(quant::Weight(unit, r, e), quant::Weight(unit, r, e + 1));
      }
    }
  }
}

// One block per token; its threads take the row's units.
template <typename F>
__global__ void EmbedQuantKernel(const uint8_t* __restrict__ table, int64_t cols,
                                 const int32_t* __restrict__ tokens, float* __restrict__ out) {
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

bool Aligned(const void* p, int alignment) {
  return reinterpret_cast<uintptr_t>(p) % alignment == 0;
}

// Calls fn(F{}) with the decoder of `type`; cudaErrorInvalidValue for a
// type without one.
template <typename Fn>
cudaError_t WithFormat(GgmlType type, Fn&& fn) {
  switch (type) {
    case GgmlType::kQ8_0:
      return fn(quant::Q8_0{});
    case GgmlType::kQ4_0:
      return fn(quant::Q4_0{});
    case GgmlType::kQ4_K:
      return fn(quant::Q4_K{});
    case GgmlType::kQ5_K:
      return fn(quant::Q5_K{});
    case GgmlType::kQ6_K:
      return fn(quant::Q6_K{});
    default:
      return cudaErrorInvalidValue;
  }
}

// One GEMV launch for n_tokens <= kQuantGemvTokensPerLaunch, with the
// accumulators of the smallest power of two that holds them: registers
// for 16 tokens' sums would be wasted on a single decode token.
template <typename F>
void LaunchGemv(const uint8_t* w, int64_t rows, int64_t cols, const float* x, int n_tokens,
                float* y, cudaStream_t stream) {
  const int split = GemvRowSplit(rows, kGemvWarps);
  const int64_t per_block = kGemvWarps / split;
  const auto grid = static_cast<unsigned>((rows + per_block - 1) / per_block);
  if (n_tokens <= 1) {
    QuantGemvKernel<F, 1><<<grid, kGemvThreads, 0, stream>>>(w, rows, cols, split, x, n_tokens, y);
  } else if (n_tokens <= 2) {
    QuantGemvKernel<F, 2><<<grid, kGemvThreads, 0, stream>>>(w, rows, cols, split, x, n_tokens, y);
  } else if (n_tokens <= 4) {
    QuantGemvKernel<F, 4><<<grid, kGemvThreads, 0, stream>>>(w, rows, cols, split, x, n_tokens, y);
  } else if (n_tokens <= 8) {
    QuantGemvKernel<F, 8><<<grid, kGemvThreads, 0, stream>>>(w, rows, cols, split, x, n_tokens, y);
  } else {
    QuantGemvKernel<F, 16><<<grid, kGemvThreads, 0, stream>>>(w, rows, cols, split, x, n_tokens,
                                                              y);
  }
}
static_assert(kQuantGemvTokensPerLaunch == 16, "LaunchGemv's largest instantiation");

unsigned GridFor(int64_t work_items) {
  // Grid-stride beyond a million blocks: plenty to fill any GPU.
  return static_cast<unsigned>(
      std::min<int64_t>((work_items + kThreads - 1) / kThreads, int64_t{1} << 20));
}

}  // namespace

cudaError_t LaunchMatMulQuant(GgmlType type, const void* w, int64_t rows, int64_t cols,
                              const float* x, int64_t n_tokens, float* y, cudaStream_t stream) {
  return WithFormat(type, [&](auto format) -> cudaError_t {
    using F = decltype(format);
    if (cols % F::kElems != 0) return cudaErrorInvalidValue;
    if (!Aligned(w, F::kAlignment) || !Aligned(x, 16)) return cudaErrorMisalignedAddress;
    if (rows == 0 || n_tokens == 0) return cudaSuccess;
    const auto* weight = static_cast<const uint8_t*>(w);
    for (int64_t t0 = 0; t0 < n_tokens; t0 += kQuantGemvTokensPerLaunch) {
      const int n = static_cast<int>(std::min(kQuantGemvTokensPerLaunch, n_tokens - t0));
      LaunchGemv<F>(weight, rows, cols, x + t0 * cols, n, y + t0 * rows, stream);
    }
    return cudaGetLastError();
  });
}

cudaError_t LaunchDequantizeToF16(GgmlType type, const void* w, int64_t rows, int64_t cols,
                                  void* out_f16, cudaStream_t stream) {
  return WithFormat(type, [&](auto format) -> cudaError_t {
    using F = decltype(format);
    if (cols % F::kElems != 0) return cudaErrorInvalidValue;
    if (!Aligned(w, F::kAlignment) || !Aligned(out_f16, 4)) return cudaErrorMisalignedAddress;
    const int64_t units = rows * (cols / F::kElems) * F::kUnits;
    if (units == 0) return cudaSuccess;
    DequantizeToF16Kernel<F><<<GridFor(units), kThreads, 0, stream>>>(
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
      if (!Aligned(table, type == GgmlType::kF32 ? 4 : 2)) return cudaErrorMisalignedAddress;
      if (n_tokens == 0 || cols == 0) return cudaSuccess;
      if (type == GgmlType::kF32) {
        EmbedPlainKernel<PlainType::kF32><<<grid, kThreads, 0, stream>>>(table, cols, tokens, out);
      } else if (type == GgmlType::kF16) {
        EmbedPlainKernel<PlainType::kF16><<<grid, kThreads, 0, stream>>>(table, cols, tokens, out);
      } else {
        EmbedPlainKernel<PlainType::kBf16><<<grid, kThreads, 0, stream>>>(table, cols, tokens,
                                                                          out);
      }
      return cudaGetLastError();
    default:
      return WithFormat(type, [&](auto format) -> cudaError_t {
        using F = decltype(format);
        if (cols % F::kElems != 0) return cudaErrorInvalidValue;
        if (!Aligned(table, F::kAlignment)) return cudaErrorMisalignedAddress;
        if (n_tokens == 0 || cols == 0) return cudaSuccess;
        EmbedQuantKernel<F><<<grid, kThreads, 0, stream>>>(static_cast<const uint8_t*>(table),
                                                           cols, tokens, out);
        return cudaGetLastError();
      });
  }
}

}  // namespace tandem::engine::cuda
