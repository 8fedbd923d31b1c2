// A host emulation of the few CUDA runtime types and calls that the kernels
// compiled by tests/engine/cuda/emulation use: enough to run a kernel's own
// source on the CPU, one thread per CUDA thread (cuda_runtime.h). Not CUDA:
// it exists so that a kernel's indexing, synchronization, masking and shared
// memory layout are tested in every build, where no GPU is. The include
// directory holding it comes first only for the emulated translation units.
#ifndef TANDEM_TESTS_CUDA_EMULATION_CUDA_RUNTIME_API_H_
#define TANDEM_TESTS_CUDA_EMULATION_CUDA_RUNTIME_API_H_

#include <cstddef>
#include <cstdint>
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

enum cudaError_t {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorInvalidConfiguration = 9,
  cudaErrorInvalidDevice = 101,
  cudaErrorLaunchOutOfResources = 701,
  cudaErrorMisalignedAddress = 716,
};

struct CUstream_st;
using cudaStream_t = CUstream_st*;

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
