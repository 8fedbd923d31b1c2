// CUDA device memory and handles for the GPU backend (issue: CUDA backend).
// Everything here is host code around the CUDA runtime and cuBLAS; errors
// are absl::Status naming the call, never aborts. A process without a
// driver or a device sees DeviceCount() == 0 and must not use the rest.
#ifndef TANDEM_ENGINE_CUDA_DEVICE_H_
#define TANDEM_ENGINE_CUDA_DEVICE_H_

#include <cstddef>
#include <cstdint>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace tandem::engine::cuda {

// CUDA devices this process can use; 0 when there is no driver, no device,
// or the runtime cannot start. Never fails.
int DeviceCount();

// OkStatus for cudaSuccess; otherwise Internal naming `what` and the error.
absl::Status Check(cudaError_t error, const char* what);
absl::Status Check(cublasStatus_t status, const char* what);

// Device memory owned by value (cudaMalloc / cudaFree). Moves, never copies.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  static absl::StatusOr<DeviceBuffer> Allocate(size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* data() const { return data_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(data_);
  }
  size_t bytes() const { return bytes_; }

  // Synchronous copies of `bytes` (<= bytes()) from/to host memory.
  absl::Status Upload(const void* host, size_t bytes);
  absl::Status Download(void* host, size_t bytes) const;

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

// A stream and a cuBLAS handle bound to it: one per engine thread.
class Stream {
 public:
  static absl::StatusOr<Stream> Create(int device);
  ~Stream();
  Stream(Stream&& other) noexcept;
  Stream& operator=(Stream&&) = delete;
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  cudaStream_t stream() const { return stream_; }
  cublasHandle_t blas() const { return blas_; }
  // Waits for everything queued on the stream; the first error since.
  absl::Status Synchronize() const;

 private:
  Stream() = default;
  cudaStream_t stream_ = nullptr;
  cublasHandle_t blas_ = nullptr;
};

}  // namespace tandem::engine::cuda

#endif  // TANDEM_ENGINE_CUDA_DEVICE_H_
