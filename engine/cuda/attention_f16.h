// The tensor-core tile kernels of paged attention (attention_f16.cu), which
// LaunchPagedAttention (kernels.h) runs in place of its f32 tile kernel when
// PagedAttentionArgs::tiles asks for them. Same rows; the row kernel and the
// combine are shared.
#ifndef TANDEM_ENGINE_CUDA_ATTENTION_F16_H_
#define TANDEM_ENGINE_CUDA_ATTENTION_F16_H_

#include <cuda_runtime.h>

#include "engine/cuda/kernels.h"

namespace tandem::engine::cuda {

// Whether the tensor-core kernel for args (args.tiles not kF32) fits in
// args.shared_bytes_per_block (head_dim 256 split with f32 KV takes about
// 220 KiB: an H100 has 227, an A100 163). When it does not, the f32 kernel
// takes the tile rows. Arithmetic only: safe while a graph is captured.
bool TensorCoreTilesFit(const PagedAttentionArgs& args);

// The tile rows of `args` (runs of kMinTileRun or more, attention_plan.h);
// args checked by the caller, TensorCoreTilesFit(args).
cudaError_t LaunchTensorCoreAttentionTiles(const PagedAttentionArgs& args, cudaStream_t stream);

}  // namespace tandem::engine::cuda

#endif  // TANDEM_ENGINE_CUDA_ATTENTION_F16_H_
