// engine/cuda/attention.cu compiled for the host (emulated_kernels.h), as
// emulated_attention_tiles.cc compiles attention_f16.cu, whose tensor-core
// tiles it calls.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "tests/engine/cuda/emulation/emulated_attention_args.h"
#include "tests/engine/cuda/emulation/emulated_kernels.h"

#define tandem tandem_emulated
#include "engine/cuda/attention.cu"
#undef tandem

namespace tandem::engine::cuda::emulation {

int RunPagedAttention(const AttentionArgs& args) {
  return tandem_emulated::engine::cuda::LaunchPagedAttention(Emulated(args), nullptr);
}

int64_t PagedAttentionScratchBytes() {
  return tandem_emulated::engine::cuda::PagedAttentionScratchBytes();
}

}  // namespace tandem::engine::cuda::emulation
