// engine/cuda/attention_f16.cu compiled for the host (emulated_kernels.h).
// include/ comes first on this file's include path, so the kernel's CUDA
// headers and engine/cuda/launch.cuh are the emulation's; the project's
// namespace is renamed around the kernel's source so that its symbols do not
// meet the real ones (a build with CUDA links both into the test).
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <mma.h>

#include <cstdint>

#include "tests/engine/cuda/emulation/emulated_attention_args.h"
#include "tests/engine/cuda/emulation/emulated_kernels.h"

#define tandem tandem_emulated
#include "engine/cuda/attention_f16.cu"
#undef tandem

namespace tandem::engine::cuda::emulation {

TileRun RunTensorCoreTiles(const AttentionArgs& args) {
  const tandem_emulated::engine::cuda::PagedAttentionArgs a = Emulated(args);
  if (!tandem_emulated::engine::cuda::TensorCoreTilesFit(a)) return {};
  return {.fit = true,
          .error = tandem_emulated::engine::cuda::LaunchTensorCoreAttentionTiles(a, nullptr)};
}

}  // namespace tandem::engine::cuda::emulation
