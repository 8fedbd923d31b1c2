// engine/cuda/launch.cuh for the host emulation (cuda_runtime_api.h): the
// same names, GridPrologue and PrefetchL2 doing nothing (launches run one at
// a time; a prefetch changes no value), Launch (cuda_emulation::RunGrid),
// never programmatic. Found before the real header because the emulated
// translation units put this directory first.
#ifndef TANDEM_TESTS_CUDA_EMULATION_LAUNCH_CUH_
#define TANDEM_TESTS_CUDA_EMULATION_LAUNCH_CUH_

#include <cstddef>
#include <cstdint>

#include "cuda_runtime.h"

namespace tandem::engine::cuda {

inline void GridPrologue() {}
inline void PrefetchL2(const void*, int64_t, int64_t, int64_t) {}
inline bool ProgrammaticLaunch() { return false; }
inline uint8_t* DynamicSharedMemory() { return cuda_emulation::TheSharedMemory().base; }

template <typename... Params, typename... Args>
cudaError_t Launch(void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared_bytes,
                   cudaStream_t /*stream*/, Args&&... args) {
  return cuda_emulation::RunGrid(reinterpret_cast<const void*>(kernel), grid, block, shared_bytes,
                                 [&] { kernel(args...); });
}

}  // namespace tandem::engine::cuda

#endif  // TANDEM_TESTS_CUDA_EMULATION_LAUNCH_CUH_
