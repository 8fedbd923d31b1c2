#include "engine/cuda/device.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/check.h"
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

PinnedBuffer::~PinnedBuffer() {
  if (data_ != nullptr) cudaFreeHost(data_);
}

absl::Status PinnedBuffer::Reserve(int64_t bytes) {
  if (bytes <= bytes_) return absl::OkStatus();
  if (data_ != nullptr) cudaFreeHost(data_);
  data_ = nullptr;
  bytes_ = 0;
  RETURN_IF_ERROR(Check(cudaMallocHost(&data_, static_cast<size_t>(bytes)), "cudaMallocHost"));
  bytes_ = bytes;
  return absl::OkStatus();
}

void CheckInStep(cudaError_t e, const char* what) {
  TANDEM_CHECK(e == cudaSuccess, "a CUDA call inside a step succeeds")
      << what << ": " << cudaGetErrorName(e) << " (" << cudaGetErrorString(e) << ")";
}

void CheckInStep(const absl::Status& s, const char* what) {
  TANDEM_CHECK(s.ok(), "a CUDA call inside a step succeeds") << what << ": " << s;
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

namespace {

// Milliseconds of the fastest of `runs` calls of `work`, after one warm-up.
template <typename Work>
absl::StatusOr<float> BestMs(const Stream& stream, int runs, Work work) {
  cudaEvent_t start = nullptr, stop = nullptr;
  RETURN_IF_ERROR(Check(cudaEventCreate(&start), "cudaEventCreate"));
  RETURN_IF_ERROR(Check(cudaEventCreate(&stop), "cudaEventCreate"));
  float best = 0;
  absl::Status s = work();
  for (int i = 0; i < runs && s.ok(); ++i) {
    cudaEventRecord(start, stream.stream());
    s = work();
    cudaEventRecord(stop, stream.stream());
    if (s.ok()) s = Check(cudaEventSynchronize(stop), "cudaEventSynchronize");
    float ms = 0;
    if (s.ok()) s = Check(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
    if (s.ok() && (i == 0 || ms < best)) best = ms;
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  if (!s.ok()) return s;
  return best;
}

}  // namespace

absl::StatusOr<Roofline> MeasureRoofline(int device) {
  ASSIGN_OR_RETURN(Stream stream, Stream::Create(device));
  Roofline r;
  {
    const size_t bytes = size_t{1} << 30;
    ASSIGN_OR_RETURN(DeviceBuffer a, DeviceBuffer::Allocate(bytes));
    ASSIGN_OR_RETURN(DeviceBuffer b, DeviceBuffer::Allocate(bytes));
    RETURN_IF_ERROR(Check(cudaMemsetAsync(a.data(), 1, bytes, stream.stream()), "cudaMemset"));
    ASSIGN_OR_RETURN(const float ms, BestMs(stream, 10, [&] {
      return Check(cudaMemcpyAsync(b.data(), a.data(), bytes, cudaMemcpyDeviceToDevice,
                                   stream.stream()),
                   "cudaMemcpyAsync D2D");
    }));
    r.memory_bytes_per_s = 2.0 * static_cast<double>(bytes) / (ms * 1e-3);
  }
  {
    const int n = 8192;
    const size_t bytes = size_t{n} * n * 2;
    ASSIGN_OR_RETURN(DeviceBuffer a, DeviceBuffer::Allocate(bytes));
    ASSIGN_OR_RETURN(DeviceBuffer b, DeviceBuffer::Allocate(bytes));
    ASSIGN_OR_RETURN(DeviceBuffer c, DeviceBuffer::Allocate(size_t{n} * n * 4));
    // Small values (0x2000 is f16 0.0078): no overflow, no denormals.
    RETURN_IF_ERROR(Check(cudaMemsetAsync(a.data(), 0x20, bytes, stream.stream()), "cudaMemset"));
    RETURN_IF_ERROR(Check(cudaMemsetAsync(b.data(), 0x20, bytes, stream.stream()), "cudaMemset"));
    const float alpha = 1.0f, beta = 0.0f;
    ASSIGN_OR_RETURN(const float ms, BestMs(stream, 5, [&] {
      return Check(stream.blas_api().gemm_ex(stream.blas(), CUBLAS_OP_T, CUBLAS_OP_N, n, n, n,
                                             &alpha, a.data(), CUDA_R_16F, n, b.data(),
                                             CUDA_R_16F, n, &beta, c.data(), CUDA_R_32F, n,
                                             CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                   "cublasGemmEx (f16)");
    }));
    r.f16_flops_per_s = 2.0 * n * double{n} * n / (ms * 1e-3);
  }
  RETURN_IF_ERROR(stream.Synchronize());
  return r;
}

}  // namespace tandem::engine::cuda
