// engine/cuda/cublas_api.h's Cublas() for the host emulation
// (include/cuda_runtime_api.h): a table of the emulation's own functions in
// place of the dlopened library. The GEMM is cublasGemmEx's contract
// (column-major, op(A) m x k, op(B) k x n, C = alpha op(A) op(B) + beta C,
// C not read when beta is 0) over f32, f16 and bf16 inputs and an f32
// output, summed in double; queued on the handle's stream like any other
// work, with alpha and beta read when it is called (host pointer mode).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <tuple>

#include "engine/cuda/cublas_api.h"

struct cublasContext {
  cudaStream_t stream = nullptr;
};

namespace tandem::engine::cuda {
namespace {

cublasStatus_t Create(cublasHandle_t* handle) {
  *handle = new cublasContext;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t Destroy(cublasHandle_t handle) {
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t SetStream(cublasHandle_t handle, cudaStream_t stream) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  handle->stream = stream;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t SetWorkspace(cublasHandle_t handle, void* /*workspace*/, size_t /*bytes*/) {
  return handle == nullptr ? CUBLAS_STATUS_NOT_INITIALIZED : CUBLAS_STATUS_SUCCESS;
}

double Element(const void* p, cudaDataType type, int64_t i) {
  switch (type) {
    case CUDA_R_32F:
      return static_cast<const float*>(p)[i];
    case CUDA_R_16F:
      return __half2float(static_cast<const __half*>(p)[i]);
    case CUDA_R_16BF:
      return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
  }
  return 0;
}

bool Known(cudaDataType type) {
  return type == CUDA_R_32F || type == CUDA_R_16F || type == CUDA_R_16BF;
}

cublasStatus_t GemmEx(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                      int m, int n, int k, const void* alpha, const void* a, cudaDataType a_type,
                      int lda, const void* b, cudaDataType b_type, int ldb, const void* beta,
                      void* c, cudaDataType c_type, int ldc, cublasComputeType_t compute,
                      cublasGemmAlgo_t /*algo*/) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (m < 0 || n < 0 || k < 0 || ldc < m || lda < (transa == CUBLAS_OP_N ? m : k) ||
      ldb < (transb == CUBLAS_OP_N ? k : n)) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  if (!Known(a_type) || !Known(b_type) || c_type != CUDA_R_32F || compute != CUBLAS_COMPUTE_32F) {
    return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  // Every operand inside device memory, as far as the GEMM reads or writes.
  const auto bytes = [](cudaDataType t) { return t == CUDA_R_32F ? 4 : 2; };
  const auto extent = [](int64_t rows, int64_t cols, int64_t ld) {
    return rows == 0 || cols == 0 ? 0 : (cols - 1) * ld + rows;
  };
  const int64_t a_extent = transa == CUBLAS_OP_N ? extent(m, k, lda) : extent(k, m, lda);
  const int64_t b_extent = transb == CUBLAS_OP_N ? extent(k, n, ldb) : extent(n, k, ldb);
  for (const auto& [p, n_bytes, what] :
       {std::tuple<const void*, int64_t, const char*>{a, a_extent * bytes(a_type), "A"},
        {b, b_extent * bytes(b_type), "B"},
        {c, extent(m, n, ldc) * 4, "C"}}) {
    if (n_bytes > 0 && !cuda_emulation::InDeviceMemory(p, static_cast<size_t>(n_bytes))) {
      std::fprintf(stderr, "emulated cublasGemmEx: %s (%lld bytes at %p) is not device memory\n",
                   what, static_cast<long long>(n_bytes), p);
      return CUBLAS_STATUS_INVALID_VALUE;
    }
  }
  const float al = *static_cast<const float*>(alpha);
  const float be = *static_cast<const float*>(beta);
  const cudaError_t e = cuda_emulation::Enqueue(handle->stream, [=] {
    float* out = static_cast<float*>(c);
    for (int64_t j = 0; j < n; ++j) {
      for (int64_t i = 0; i < m; ++i) {
        double sum = 0;
        for (int64_t p = 0; p < k; ++p) {
          const int64_t ai = transa == CUBLAS_OP_N ? i + p * lda : p + i * lda;
          const int64_t bi = transb == CUBLAS_OP_N ? p + j * ldb : j + p * ldb;
          sum += Element(a, a_type, ai) * Element(b, b_type, bi);
        }
        float& y = out[i + j * ldc];
        y = be == 0.0f ? static_cast<float>(al * sum) : static_cast<float>(al * sum + be * y);
      }
    }
  });
  return e == cudaSuccess ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE;
}

const char* StatusName(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS:
      return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED:
      return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return "CUBLAS_STATUS_NOT_SUPPORTED";
  }
  return "CUBLAS_STATUS_UNKNOWN";
}

}  // namespace

absl::StatusOr<const CublasApi*> Cublas() {
  static const CublasApi api = {.create = Create,
                                .destroy = Destroy,
                                .set_stream = SetStream,
                                .set_workspace = SetWorkspace,
                                .gemm_ex = GemmEx,
                                .status_name = StatusName};
  return &api;
}

}  // namespace tandem::engine::cuda
