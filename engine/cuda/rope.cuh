// One head's RoPE rotation for kernels (RopeTable's tables, RopeStyle's
// pairing), by the block's threads from `first` in steps of `stride`:
// dimensions past n_rot are left alone. Shared by RopeKernel (kernels.cu)
// and the fused RoPE-and-store (rope_store_kv.cu), so both rotate alike.
#ifndef TANDEM_ENGINE_CUDA_ROPE_CUH_
#define TANDEM_ENGINE_CUDA_ROPE_CUH_

#include <cstdint>

namespace tandem::engine::cuda {

__device__ inline void RotateHead(float* v, int32_t position, int32_t n_rot, int32_t style,
                                  const float* cos_table, const float* sin_table, int32_t first,
                                  int32_t stride) {
  const int32_t half = n_rot / 2;
  const int64_t row = static_cast<int64_t>(position) * half;
  for (int32_t i = first; i < half; i += stride) {
    const int32_t a = style == 0 ? 2 * i : i;
    const int32_t b = style == 0 ? 2 * i + 1 : i + half;
    const float c = cos_table[row + i];
    const float s = sin_table[row + i];
    const float x0 = v[a];
    const float x1 = v[b];
    v[a] = x0 * c - x1 * s;
    v[b] = x0 * s + x1 * c;
  }
}

}  // namespace tandem::engine::cuda

#endif  // TANDEM_ENGINE_CUDA_ROPE_CUH_
