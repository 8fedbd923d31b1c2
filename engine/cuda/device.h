// CUDA device memory and handles for the GPU backend (issue: CUDA backend).
// Everything here is host code around the CUDA runtime and cuBLAS; errors
// are absl::Status naming the call, never aborts. A process without a
// usable driver or device gets the driver's reason from DeviceCount()
// (engine/cuda/driver.h) and must not use the rest. Copies are queued on a
// Stream, like the kernels.
#ifndef TANDEM_ENGINE_CUDA_DEVICE_H_
#define TANDEM_ENGINE_CUDA_DEVICE_H_

#include <cstddef>
#include <cstdint>

#include <cuda_runtime_api.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/cuda/cublas_api.h"
#include "engine/cuda/driver.h"

namespace tandem::engine::cuda {

// OkStatus for CUBLAS_STATUS_SUCCESS; otherwise Internal naming `what`.
absl::Status Check(cublasStatus_t status, const char* what);

class Stream;

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

  // Queue a copy of `bytes` (<= bytes()) from/to host memory on `stream`
  // (cudaMemcpyAsync), ordered after the work queued there before it and
  // before the work queued after it. A plain cudaMemcpy would run on the
  // legacy default stream, which does not wait for a non-blocking stream's
  // kernels. The host memory must stay valid, and a download's unread,
  // until stream.Synchronize() returns.
  absl::Status Upload(const Stream& stream, const void* host, size_t bytes);
  absl::Status Download(const Stream& stream, void* host, size_t bytes) const;

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

// Page-locked host memory (cudaMallocHost): what the copy engines read and
// write without a bounce, so a copy from it is truly asynchronous.
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  ~PinnedBuffer();
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;

  // Grows to at least `bytes` (contents lost); never shrinks.
  absl::Status Reserve(int64_t bytes);
  uint8_t* data() const { return static_cast<uint8_t*>(data_); }

 private:
  void* data_ = nullptr;
  int64_t bytes_ = 0;
};

// Inside a step a backend's ops return nothing (engine/model/backend.h), so
// a CUDA error there aborts the process with `what` and the error named:
// the device's state is unknown after one, and the gateway re-routes the
// worker's streams.
void CheckInStep(cudaError_t e, const char* what);
void CheckInStep(const absl::Status& s, const char* what);

// A stream and a cuBLAS handle bound to it: one per engine thread. cuBLAS
// is loaded on the first Create (engine/cuda/cublas_api.h).
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
  // The loaded cuBLAS functions, to call with blas().
  const CublasApi& blas_api() const { return *api_; }
  int device() const { return device_; }
  // Waits for everything queued on the stream; the first error since.
  absl::Status Synchronize() const;

 private:
  Stream() = default;
  cudaStream_t stream_ = nullptr;
  cublasHandle_t blas_ = nullptr;
  const CublasApi* api_ = nullptr;
  int device_ = 0;
};

// What `device` reaches, measured: a device-to-device copy's bytes per
// second (read and written counted; what a weight-streaming decode step is
// held to) and an 8192^3 F16 GEMM's FLOP/s on the tensor cores (f32
// accumulation; what a prefill's matrix products are held to). Each the
// best of several timed runs after a warm-up; a few hundred milliseconds.
struct Roofline {
  double memory_bytes_per_s = 0;
  double f16_flops_per_s = 0;
};
absl::StatusOr<Roofline> MeasureRoofline(int device);

}  // namespace tandem::engine::cuda

#endif  // TANDEM_ENGINE_CUDA_DEVICE_H_
