// The cuBLAS types and constants the CUDA backend names
// (engine/cuda/cublas_api.h), for the host emulation
// (cuda_runtime_api.h): the backend loads cuBLAS as a table of functions,
// which the emulation fills with its own (emulated_cublas.cc).
#ifndef TANDEM_TESTS_CUDA_EMULATION_CUBLAS_V2_H_
#define TANDEM_TESTS_CUDA_EMULATION_CUBLAS_V2_H_

#include "cuda_runtime_api.h"

#define CUBLAS_VER_MAJOR 13

enum cublasStatus_t {
  CUBLAS_STATUS_SUCCESS = 0,
  CUBLAS_STATUS_NOT_INITIALIZED = 1,
  CUBLAS_STATUS_INVALID_VALUE = 7,
  CUBLAS_STATUS_NOT_SUPPORTED = 15,
};
enum cublasOperation_t { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1 };
enum cudaDataType { CUDA_R_32F = 0, CUDA_R_16F = 2, CUDA_R_16BF = 14 };
enum cublasComputeType_t { CUBLAS_COMPUTE_32F = 68 };
enum cublasGemmAlgo_t { CUBLAS_GEMM_DEFAULT = -1 };

struct cublasContext;
using cublasHandle_t = cublasContext*;

#endif  // TANDEM_TESTS_CUDA_EMULATION_CUBLAS_V2_H_
