#include "engine/cuda/driver.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace tandem::engine::cuda {
namespace {

// 12020 -> "12.2", as CUDA encodes versions (1000 * major + 10 * minor).
std::string CudaVersion(int version) {
  return absl::StrCat(version / 1000, ".", (version % 1000) / 10);
}

}  // namespace

std::string VersionText() {
  int driver = 0, runtime = 0;
  // Both only report versions; neither starts the runtime or fails without
  // a driver (the driver's version is then 0).
  cudaDriverGetVersion(&driver);
  cudaRuntimeGetVersion(&runtime);
  return absl::StrCat(driver == 0 ? "no driver" : "driver " + CudaVersion(driver),
                      ", runtime ", CudaVersion(runtime));
}

absl::StatusOr<int> DeviceCount() {
  int count = 0;
  const cudaError_t error = cudaGetDeviceCount(&count);
  if (error != cudaSuccess) {
    cudaGetLastError();  // clear the sticky error so later calls see their own
    return absl::FailedPreconditionError(
        absl::StrCat("cudaGetDeviceCount: ", cudaGetErrorName(error), " (",
                     cudaGetErrorString(error), "); ", VersionText()));
  }
  if (count == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("cudaGetDeviceCount: no CUDA device; ", VersionText()));
  }
  return count;
}

absl::StatusOr<DeviceInfo> GetDeviceInfo(int device) {
  cudaDeviceProp p;
  if (absl::Status s = Check(cudaGetDeviceProperties(&p, device), "cudaGetDeviceProperties");
      !s.ok()) {
    return s;
  }
  return DeviceInfo{.name = p.name,
                    .major = p.major,
                    .minor = p.minor,
                    .memory_bytes = static_cast<int64_t>(p.totalGlobalMem),
                    .shared_bytes_per_block = static_cast<int64_t>(p.sharedMemPerBlockOptin)};
}

absl::Status Check(cudaError_t error, const char* what) {
  if (error == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": ", cudaGetErrorName(error), " (",
                                          cudaGetErrorString(error), ")"));
}

}  // namespace tandem::engine::cuda
