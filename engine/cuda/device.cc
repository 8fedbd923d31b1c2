#include "engine/cuda/device.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace tandem::engine::cuda {

absl::Status Check(cublasStatus_t status, const char* what) {
  if (status == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  const absl::StatusOr<const CublasApi*> api = Cublas();
  return absl::InternalError(absl::StrCat(
      what, ": ", api.ok() ? (*api)->status_name(status) : "cuBLAS status",
      " (", static_cast<int>(status), ")"));
}

absl::StatusOr<DeviceBuffer> DeviceBuffer::Allocate(size_t bytes) {
  DeviceBuffer b;
  if (bytes == 0) return b;
  if (absl::Status s = Check(cudaMalloc(&b.data_, bytes), "cudaMalloc"); !s.ok()) {
    return absl::ResourceExhaustedError(absl::StrCat(s.message(), " for ", bytes, " bytes"));
  }
  b.bytes_ = bytes;
  return b;
}

DeviceBuffer::~DeviceBuffer() {
  if (data_ != nullptr) cudaFree(data_);
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) cudaFree(data_);
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

absl::Status DeviceBuffer::Upload(const Stream& stream, const void* host, size_t bytes) {
  if (bytes > bytes_) return absl::InvalidArgumentError("Upload: more bytes than the buffer");
  if (bytes == 0) return absl::OkStatus();
  return Check(cudaMemcpyAsync(data_, host, bytes, cudaMemcpyHostToDevice, stream.stream()),
               "cudaMemcpyAsync H2D");
}

absl::Status DeviceBuffer::Download(const Stream& stream, void* host, size_t bytes) const {
  if (bytes > bytes_) return absl::InvalidArgumentError("Download: more bytes than the buffer");
  if (bytes == 0) return absl::OkStatus();
  return Check(cudaMemcpyAsync(host, data_, bytes, cudaMemcpyDeviceToHost, stream.stream()),
               "cudaMemcpyAsync D2H");
}

absl::StatusOr<Stream> Stream::Create(int device) {
  if (absl::Status s = Check(cudaSetDevice(device), "cudaSetDevice"); !s.ok()) return s;
  ASSIGN_OR_RETURN(const CublasApi* api, Cublas());
  Stream st;
  st.api_ = api;
  st.device_ = device;
  if (absl::Status s = Check(cudaStreamCreateWithFlags(&st.stream_, cudaStreamNonBlocking),
                             "cudaStreamCreate");
      !s.ok()) {
    return s;
  }
  if (absl::Status s = Check(api->create(&st.blas_), "cublasCreate"); !s.ok()) return s;
  if (absl::Status s = Check(api->set_stream(st.blas_, st.stream_), "cublasSetStream");
      !s.ok()) {
    return s;
  }
  return st;
}

Stream::~Stream() {
  if (blas_ != nullptr) api_->destroy(blas_);
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
}

Stream::Stream(Stream&& other) noexcept
    : stream_(std::exchange(other.stream_, nullptr)),
      blas_(std::exchange(other.blas_, nullptr)),
      api_(other.api_),
      device_(other.device_) {}

absl::Status Stream::Synchronize() const {
  return Check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
}

}  // namespace tandem::engine::cuda
