// What the CUDA driver and runtime say about this machine: how many devices,
// which versions, each device's name and compute capability. The CUDA
// runtime only, no cuBLAS: the backend factory (engine/backend_factory.cc)
// links this part into every engine binary, and cuBLAS's thread-local
// storage must stay out of the workers (engine/CMakeLists.txt says why).
// Errors are absl::Status naming the call; thread-safe.
#ifndef TANDEM_ENGINE_CUDA_DRIVER_H_
#define TANDEM_ENGINE_CUDA_DRIVER_H_

#include <cstdint>
#include <string>

#include <cuda_runtime_api.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace tandem::engine::cuda {

// CUDA devices this process can use (> 0). FailedPrecondition when there
// are none, carrying the driver's own reason (cudaGetErrorName and
// cudaGetErrorString of cudaGetDeviceCount) and VersionText(), so that an
// old driver reads as an old driver and not as "no device".
absl::StatusOr<int> DeviceCount();

// "driver 12.2, runtime 13.0": the CUDA version the installed driver
// supports (cudaDriverGetVersion; "no driver" when none is installed) and
// the one this binary's runtime was built for (cudaRuntimeGetVersion).
std::string VersionText();

struct DeviceInfo {
  std::string name;          // "NVIDIA H100 80GB HBM3"
  int32_t major = 0;         // compute capability major.minor
  int32_t minor = 0;
  int64_t memory_bytes = 0;  // global memory
  int64_t shared_bytes_per_block = 0;  // with a kernel's opt-in (sharedMemPerBlockOptin)
};

// cudaGetDeviceProperties of ordinal `device` (< DeviceCount()).
absl::StatusOr<DeviceInfo> GetDeviceInfo(int device);

// OkStatus for cudaSuccess; otherwise Internal naming `what` and the error.
absl::Status Check(cudaError_t error, const char* what);

}  // namespace tandem::engine::cuda

#endif  // TANDEM_ENGINE_CUDA_DRIVER_H_
