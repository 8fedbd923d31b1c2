// Kernel launches and the prologue every launched kernel runs: the device
// side of engine/cuda/launch.h. nvcc only.
//
// Every kernel that Launch starts calls GridPrologue() before it reads or
// writes memory that another kernel of the step writes or reads: with
// programmatic launches on, that is where it waits for the kernel before
// it; a kernel may load what no kernel writes (weights) ahead of it. With
// them off, or on a GPU older than 9.0, the prologue does nothing and a
// launch is the ordinary one.
#ifndef TANDEM_ENGINE_CUDA_LAUNCH_CUH_
#define TANDEM_ENGINE_CUDA_LAUNCH_CUH_

#include <cstdint>
#include <utility>

#include <cuda_runtime.h>

#include "engine/cuda/launch.h"

namespace tandem::engine::cuda {

// Waits for the kernel before on the stream to finish, its writes visible
// (a no-op unless this grid was launched programmatically), then lets the
// kernel after it start its own prologue. In that order, at most one
// kernel waits ahead of the one running.
__device__ __forceinline__ void GridPrologue() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// The block's dynamic shared memory (Launch's shared_bytes), 128-byte
// aligned.
__device__ __forceinline__ uint8_t* DynamicSharedMemory() {
  extern __shared__ __align__(128) uint8_t dynamic_shared[];
  return dynamic_shared;
}

// Asks L2 for the 128-byte lines of [p, p + bytes), the calling thread
// taking lines first, first + step, ...: a hint, which changes no value.
__device__ __forceinline__ void PrefetchL2(const void* p, int64_t bytes, int64_t first,
                                           int64_t step) {
  constexpr uintptr_t kLine = 128;
  const uintptr_t begin = reinterpret_cast<uintptr_t>(p) & ~(kLine - 1);
  const uintptr_t end = reinterpret_cast<uintptr_t>(p) + static_cast<uintptr_t>(bytes);
  for (uintptr_t a = begin + static_cast<uintptr_t>(first) * kLine; a < end;
       a += static_cast<uintptr_t>(step) * kLine) {
    asm volatile("prefetch.global.L2 [%0];" ::"l"(
        __cvta_generic_to_global(reinterpret_cast<const void*>(a))));
  }
}

// kernel<<<grid, block, shared_bytes, stream>>>(args...), programmatic when
// this thread's ProgrammaticLaunch() says so (the kernel must begin with
// GridPrologue then). Returns the launch's error.
template <typename... Params, typename... Args>
cudaError_t Launch(void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared_bytes,
                   cudaStream_t stream, Args&&... args) {
  cudaLaunchAttribute attribute[1] = {};
  attribute[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute[0].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = shared_bytes;
  config.stream = stream;
  if (ProgrammaticLaunch()) {
    config.attrs = attribute;
    config.numAttrs = 1;
  }
  return cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
}

}  // namespace tandem::engine::cuda

#endif  // TANDEM_ENGINE_CUDA_LAUNCH_CUH_
