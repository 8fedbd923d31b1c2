// A host emulation of the CUDA runtime types and calls that the CUDA backend
// (engine/cuda) uses: enough to run a kernel's own source on the CPU, each
// CUDA thread a fiber (cuda_runtime.h), and the backend's host code around
// them (tests/engine/cuda/emulation/emulated_runtime.cc: device memory,
// streams, events, graphs). Not CUDA: it exists so that a kernel's indexing,
// synchronization, masking and shared memory layout, and the host code's
// buffers, copies, stream order and graph capture, are tested in every
// build, where no GPU is. The include directory holding it comes first only
// for the emulated translation units.
//
// What it checks that a careless emulation would let pass:
//  - Work queued on a stream runs only when the host waits for it
//    (cudaStreamSynchronize, cudaEventSynchronize, a synchronous copy, a
//    free), as late as a GPU may run it: a result read before the wait, or
//    a pinned buffer changed after a copy from it was queued, shows. As on
//    a GPU, a copy from pageable memory takes its bytes at the call and one
//    into pageable memory is done when the call returns. Work on the null
//    stream runs at once (the kernel tests launch there).
//  - Copies name their direction: a device pointer must lie inside one
//    allocation for the whole copy, a host pointer outside every one.
//  - Device memory is a fixed size (cudaMemGetInfo), so budgets are real.
//  - Inside a stream capture (thread-local mode), calls a capture forbids
//    (allocating, freeing, synchronizing, a synchronous copy) fail it, and
//    the graph replays the captured kernels with the arguments they had.
#ifndef TANDEM_TESTS_CUDA_EMULATION_CUDA_RUNTIME_API_H_
#define TANDEM_TESTS_CUDA_EMULATION_CUDA_RUNTIME_API_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>

// The emulation's classes and functions take names of their own, so that a
// program that also holds CUDA code (a build with CUDA links both into a
// test) never holds two definitions of one class or inline function.
#define dim3 EmulatedDim3
#define uint3 EmulatedUint3
#define uint4 EmulatedUint4
#define float4 EmulatedFloat4
#define make_uint4 EmulatedMakeUint4
#define make_float4 EmulatedMakeFloat4
#define cudaError_t EmulatedCudaError
#define cudaGetLastError EmulatedCudaGetLastError
#define cudaFuncSetAttribute EmulatedCudaFuncSetAttribute
#define cudaFuncAttributes EmulatedCudaFuncAttributes
#define cudaFuncGetAttributes EmulatedCudaFuncGetAttributes
#define cudaSetDevice EmulatedCudaSetDevice
#define cudaDeviceProp EmulatedCudaDeviceProp
#define cudaGetDeviceCount EmulatedCudaGetDeviceCount
#define cudaGetDeviceProperties EmulatedCudaGetDeviceProperties
#define cudaDriverGetVersion EmulatedCudaDriverGetVersion
#define cudaRuntimeGetVersion EmulatedCudaRuntimeGetVersion
#define cudaGetErrorName EmulatedCudaGetErrorName
#define cudaGetErrorString EmulatedCudaGetErrorString
#define cudaMalloc EmulatedCudaMalloc
#define cudaFree EmulatedCudaFree
#define cudaMallocHost EmulatedCudaMallocHost
#define cudaFreeHost EmulatedCudaFreeHost
#define cudaMemGetInfo EmulatedCudaMemGetInfo
#define cudaMemcpy EmulatedCudaMemcpy
#define cudaMemcpyAsync EmulatedCudaMemcpyAsync
#define cudaMemset EmulatedCudaMemset
#define cudaMemsetAsync EmulatedCudaMemsetAsync
#define cudaDeviceSynchronize EmulatedCudaDeviceSynchronize
#define cudaStreamCreate EmulatedCudaStreamCreate
#define cudaStreamCreateWithFlags EmulatedCudaStreamCreateWithFlags
#define cudaStreamDestroy EmulatedCudaStreamDestroy
#define cudaStreamSynchronize EmulatedCudaStreamSynchronize
#define cudaStreamBeginCapture EmulatedCudaStreamBeginCapture
#define cudaStreamEndCapture EmulatedCudaStreamEndCapture
#define cudaGraphInstantiate EmulatedCudaGraphInstantiate
#define cudaGraphLaunch EmulatedCudaGraphLaunch
#define cudaGraphDestroy EmulatedCudaGraphDestroy
#define cudaGraphExecDestroy EmulatedCudaGraphExecDestroy
#define cudaEventCreate EmulatedCudaEventCreate
#define cudaEventCreateWithFlags EmulatedCudaEventCreateWithFlags
#define cudaEventRecord EmulatedCudaEventRecord
#define cudaEventSynchronize EmulatedCudaEventSynchronize
#define cudaEventElapsedTime EmulatedCudaEventElapsedTime
#define cudaEventDestroy EmulatedCudaEventDestroy

enum cudaError_t {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInvalidConfiguration = 9,
  cudaErrorNoDevice = 100,
  cudaErrorInvalidDevice = 101,
  cudaErrorNoKernelImageForDevice = 209,
  cudaErrorInvalidResourceHandle = 400,
  cudaErrorNotReady = 600,
  cudaErrorLaunchOutOfResources = 701,
  cudaErrorMisalignedAddress = 716,
  cudaErrorStreamCaptureUnsupported = 900,
  cudaErrorStreamCaptureInvalidated = 901,
};

struct CUstream_st;
using cudaStream_t = CUstream_st*;
struct CUevent_st;
using cudaEvent_t = CUevent_st*;
struct CUgraph_st;
using cudaGraph_t = CUgraph_st*;
struct CUgraphExec_st;
using cudaGraphExec_t = CUgraphExec_st*;

enum cudaMemcpyKind {
  cudaMemcpyHostToHost = 0,
  cudaMemcpyHostToDevice = 1,
  cudaMemcpyDeviceToHost = 2,
  cudaMemcpyDeviceToDevice = 3,
};
enum cudaStreamCaptureMode {
  cudaStreamCaptureModeGlobal = 0,
  cudaStreamCaptureModeThreadLocal = 1,
  cudaStreamCaptureModeRelaxed = 2,
};
constexpr unsigned cudaStreamNonBlocking = 0x01;
constexpr unsigned cudaEventDisableTiming = 0x02;

// The fields the backend reads; an emulated device is an H100-like 9.0.
struct cudaDeviceProp {
  char name[256];
  int major;
  int minor;
  size_t totalGlobalMem;
  size_t sharedMemPerBlockOptin;
  int multiProcessorCount;
};

cudaError_t cudaGetDeviceCount(int* count);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device);
cudaError_t cudaDriverGetVersion(int* version);
cudaError_t cudaRuntimeGetVersion(int* version);
const char* cudaGetErrorName(cudaError_t error);
const char* cudaGetErrorString(cudaError_t error);
cudaError_t cudaMalloc(void** p, size_t bytes);
template <typename T>
cudaError_t cudaMalloc(T** p, size_t bytes) {
  return cudaMalloc(reinterpret_cast<void**>(p), bytes);
}
cudaError_t cudaFree(void* p);
cudaError_t cudaMallocHost(void** p, size_t bytes);
cudaError_t cudaFreeHost(void* p);
cudaError_t cudaMemGetInfo(size_t* free, size_t* total);
cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t stream = nullptr);
cudaError_t cudaMemset(void* p, int value, size_t bytes);
cudaError_t cudaMemsetAsync(void* p, int value, size_t bytes, cudaStream_t stream = nullptr);
cudaError_t cudaDeviceSynchronize();
cudaError_t cudaStreamCreate(cudaStream_t* stream);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned flags);
cudaError_t cudaStreamDestroy(cudaStream_t stream);
cudaError_t cudaStreamSynchronize(cudaStream_t stream);
cudaError_t cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode mode);
cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* graph);
cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph,
                                 unsigned long long flags = 0);
cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream);
cudaError_t cudaGraphDestroy(cudaGraph_t graph);
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec);
cudaError_t cudaEventCreate(cudaEvent_t* event);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned flags);
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream = nullptr);
cudaError_t cudaEventSynchronize(cudaEvent_t event);
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end);
cudaError_t cudaEventDestroy(cudaEvent_t event);

struct dim3 {
  unsigned x = 1, y = 1, z = 1;
  constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
struct uint3 {
  unsigned x = 0, y = 0, z = 0;
};
struct alignas(16) uint4 {
  unsigned x, y, z, w;
};
struct alignas(16) float4 {
  float x, y, z, w;
};
inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return {x, y, z, w}; }
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }

enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };

namespace cuda_emulation {

// The emulated device: its shared memory a block with opting in (an
// A100's by default) and without (48 KiB, every GPU's).
struct Device {
  size_t shared_optin_bytes = 166912;
  size_t shared_default_bytes = 48 * 1024;
  cudaError_t last_error = cudaSuccess;
  std::map<const void*, size_t> opted_in;  // kernel -> its max dynamic shared memory
};
inline Device& TheDevice() {
  static Device device;
  return device;
}

// Queues `work` on `stream` (runs it at once on the null stream; records it
// while the stream is captured).
cudaError_t Enqueue(cudaStream_t stream, std::function<void()> work);
// Whether [p, p + bytes) lies inside one device allocation.
bool InDeviceMemory(const void* p, size_t bytes);
// Sets the error cudaGetLastError returns next; returns it.
cudaError_t Fail(cudaError_t error);

}  // namespace cuda_emulation

inline cudaError_t cudaGetLastError() {
  const cudaError_t e = cuda_emulation::TheDevice().last_error;
  cuda_emulation::TheDevice().last_error = cudaSuccess;
  return e;
}

template <typename Kernel>
cudaError_t cudaFuncSetAttribute(Kernel* kernel, cudaFuncAttribute attr, int value) {
  cuda_emulation::Device& d = cuda_emulation::TheDevice();
  if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize || value < 0 ||
      static_cast<size_t>(value) > d.shared_optin_bytes) {
    return cudaErrorInvalidValue;
  }
  d.opted_in[reinterpret_cast<const void*>(kernel)] = static_cast<size_t>(value);
  return cudaSuccess;
}

// One device, 0; any kernel's image is there.
struct cudaFuncAttributes {
  int maxThreadsPerBlock = 1024;
};
inline cudaError_t cudaSetDevice(int device) {
  return device == 0 ? cudaSuccess : cudaErrorInvalidDevice;
}
template <typename Kernel>
cudaError_t cudaFuncGetAttributes(cudaFuncAttributes* attributes, Kernel* /*kernel*/) {
  *attributes = {};
  return cudaSuccess;
}

#endif  // TANDEM_TESTS_CUDA_EMULATION_CUDA_RUNTIME_API_H_
