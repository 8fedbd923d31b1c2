// cuBLAS, loaded with dlopen the first time a Stream needs it, rather than
// linked. Linking it puts libcublasLt's ~92 KiB of thread-local storage into
// the static TLS block of every thread the process starts, and Debian's
// civetweb (the workers' /metrics server, through prometheus-cpp) starts its
// threads with 100 KiB stacks: pthread_create fails and /metrics cannot
// start. A dlopened library's TLS is allocated per thread on first use
// instead (libcublas and libcublasLt are not built with STATIC_TLS), so the
// workers can hold the CUDA backend and still serve metrics. Only the
// functions the backend calls are looked up; the header (<cublas_v2.h>)
// gives their types and constants, nothing links against it.
#ifndef TANDEM_ENGINE_CUDA_CUBLAS_API_H_
#define TANDEM_ENGINE_CUDA_CUBLAS_API_H_

#include <cstddef>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "absl/status/statusor.h"

namespace tandem::engine::cuda {

struct CublasApi {
  cublasStatus_t (*create)(cublasHandle_t* handle) = nullptr;
  cublasStatus_t (*destroy)(cublasHandle_t handle) = nullptr;
  cublasStatus_t (*set_stream)(cublasHandle_t handle, cudaStream_t stream) = nullptr;
  cublasStatus_t (*set_workspace)(cublasHandle_t handle, void* workspace,
                                  size_t bytes) = nullptr;
  cublasStatus_t (*gemm_ex)(cublasHandle_t handle, cublasOperation_t transa,
                            cublasOperation_t transb, int m, int n, int k, const void* alpha,
                            const void* a, cudaDataType a_type, int lda, const void* b,
                            cudaDataType b_type, int ldb, const void* beta, void* c,
                            cudaDataType c_type, int ldc, cublasComputeType_t compute,
                            cublasGemmAlgo_t algo) = nullptr;
  const char* (*status_name)(cublasStatus_t status) = nullptr;
};

// The library this build's headers are for (libcublas.so.<CUBLAS_VER_MAJOR>),
// found the way the dynamic linker finds a linked one (LD_LIBRARY_PATH, the
// binary's RUNPATH, which names the toolkit's lib directory, ld.so.cache),
// then in the toolkit's directory as CMake found it. Loaded once per
// process; thread-safe. FailedPrecondition naming the library and dlerror()
// when it or a function is missing.
absl::StatusOr<const CublasApi*> Cublas();

}  // namespace tandem::engine::cuda

#endif  // TANDEM_ENGINE_CUDA_CUBLAS_API_H_
