// engine/cuda/launch.cuh for the host emulation (cuda_runtime_api.h): the
// same names, GridPrologue and PrefetchL2 doing nothing (a stream's kernels
// run one at a time; a prefetch changes no value), Launch checking the
// launch at once and queueing the grid on its stream
// (cuda_emulation::Enqueue) with copies of its arguments, as a launch or a
// captured graph node holds them; never programmatic. Found before the real
// header because the emulated translation units put this directory first.
#ifndef TANDEM_TESTS_CUDA_EMULATION_LAUNCH_CUH_
#define TANDEM_TESTS_CUDA_EMULATION_LAUNCH_CUH_

#include <cstddef>
#include <cstdint>
#include <tuple>
#include <type_traits>

#include "cuda_runtime.h"
#include "engine/cuda/launch.h"

namespace tandem::engine::cuda {

inline void GridPrologue() {}
inline void PrefetchL2(const void*, int64_t, int64_t, int64_t) {}
inline uint8_t* DynamicSharedMemory() { return cuda_emulation::TheSharedMemory().base; }

template <typename... Params, typename... Args>
cudaError_t Launch(void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared_bytes,
                   cudaStream_t stream, Args&&... args) {
  if (const cudaError_t e =
          cuda_emulation::CheckLaunch(reinterpret_cast<const void*>(kernel), block, shared_bytes);
      e != cudaSuccess) {
    return e;
  }
  return cuda_emulation::Enqueue(stream, [kernel, grid, block, shared_bytes,
                                          values = std::tuple<std::decay_t<Args>...>(args...)] {
    cuda_emulation::RunBlocks(grid, block, shared_bytes,
                              [&] { std::apply([&](const auto&... a) { kernel(a...); }, values); });
  });
}

}  // namespace tandem::engine::cuda

#endif  // TANDEM_TESTS_CUDA_EMULATION_LAUNCH_CUH_
