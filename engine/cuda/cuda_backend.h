// The CUDA Backend (engine/model/backend.h): weights, scratch, the step's
// metadata and the KV pool in device memory, every op a kernel or a cuBLAS
// GEMM on one stream, the logits reduced on the device so that O(k) values
// per row come back. Built only with nvcc; engine/backend_factory.cc makes
// it for --device cuda[:N].
#ifndef TANDEM_ENGINE_CUDA_CUDA_BACKEND_H_
#define TANDEM_ENGINE_CUDA_CUDA_BACKEND_H_

#include <memory>

#include "absl/status/statusor.h"
#include "engine/model/backend.h"

namespace tandem::engine {

// The backend on `options.device`, its stream and cuBLAS handle made
// (cuBLAS loaded, engine/cuda/cublas_api.h). The device must be usable
// (ProbeDevice, engine/backend_factory.h). Every call after this one must
// come from one thread at a time, as for any Backend; each sets the device
// on its thread first, so the engine thread needs no cudaSetDevice of its own.
absl::StatusOr<std::unique_ptr<Backend>> MakeCudaBackend(const CudaBackendOptions& options);

// What a CUDA backend's graphs did: buckets captured, steps replayed, steps
// run eagerly although graph-eligible because a bucket could not be captured
// or a step's ops differed from its bucket's graph (then re-captured).
struct CudaGraphStats {
  int64_t captured = 0;
  int64_t replayed = 0;
  int64_t fallbacks = 0;
};
// Of a backend MakeCudaBackend made (a test's view); zeros for any other.
CudaGraphStats GraphStats(const Backend& backend);

}  // namespace tandem::engine

#endif  // TANDEM_ENGINE_CUDA_CUDA_BACKEND_H_
