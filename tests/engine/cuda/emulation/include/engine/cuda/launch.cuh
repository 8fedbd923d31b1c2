// engine/cuda/launch.cuh for the host emulation (cuda_runtime_api.h): the
// same two names, GridPrologue (nothing to wait for: blocks run one launch
// at a time) and Launch (cuda_emulation::RunGrid). Found before the real
// header because the emulated translation units put this directory first.
#ifndef TANDEM_TESTS_CUDA_EMULATION_LAUNCH_CUH_
#define TANDEM_TESTS_CUDA_EMULATION_LAUNCH_CUH_

#include <cstddef>

#include "cuda_runtime.h"

namespace tandem::engine::cuda {

inline void GridPrologue() {}

template <typename... Params, typename... Args>
cudaError_t Launch(void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared_bytes,
                   cudaStream_t /*stream*/, Args&&... args) {
  return cuda_emulation::RunGrid(reinterpret_cast<const void*>(kernel), grid, block, shared_bytes,
                                 [&] { kernel(args...); });
}

}  // namespace tandem::engine::cuda

#endif  // TANDEM_TESTS_CUDA_EMULATION_LAUNCH_CUH_
