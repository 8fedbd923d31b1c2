// cuda_bf16.h for the host emulation (cuda_runtime_api.h): included by the
// GEMV kernels, which widen bf16 by hand and need nothing of it.
#ifndef TANDEM_TESTS_CUDA_EMULATION_CUDA_BF16_H_
#define TANDEM_TESTS_CUDA_EMULATION_CUDA_BF16_H_

#include "cuda_fp16.h"

#endif  // TANDEM_TESTS_CUDA_EMULATION_CUDA_BF16_H_
