// Builds the Backend that `--device` names, for the workers, `tandem
// generate` and the engine benchmarks: the CPU backend, or a refusal that
// says why CUDA cannot run here (no CUDA in this build, the driver's own
// reason, a device ordinal this machine lacks, a weight type without a CUDA
// kernel), or the CUDA backend. backend_factory.cc is the one file outside engine/cuda that
// includes from it (tests/layering checks). Stateless;
// call from the thread that will own the backend.
#ifndef TANDEM_ENGINE_BACKEND_FACTORY_H_
#define TANDEM_ENGINE_BACKEND_FACTORY_H_

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/device_spec.h"
#include "engine/gguf/gguf.h"
#include "engine/gguf/tensor_type.h"
#include "engine/model/backend.h"
#include "engine/model/model.h"

namespace tandem::engine {

// One weight matrix of a model file and its storage type.
struct WeightTensorType {
  std::string name;  // "blk.0.ffn_down.weight"
  GgmlType type = GgmlType::kF32;
};

// The matrices (tensors of two or more dimensions) of `file`, in file order;
// 1-D tensors are copied to f32 at load and need no kernel of their type.
std::vector<WeightTensorType> MatrixTypes(const GgufFile& file);

// The weight types `kind` has matrix kernels for: the CPU every type the
// engine reads, CUDA those of engine/cuda/weight_types.h. Known without a
// device, and the same in a build without CUDA.
bool DeviceHasKernel(DeviceKind kind, GgmlType type);

// OK when `device` has a kernel for every weight; otherwise FailedPrecondition
// naming the first weight without one and its type, e.g. "--device cuda:
// weight type Q4_K (blk.0.ffn_down.weight) has no CUDA kernel", with how
// many matrices of which types have none and which types it does take.
absl::Status CheckWeightTypes(DeviceKind kind, std::span<const WeightTensorType> weights);

// OK when this build and machine can compute on `device`: always for the
// CPU. For CUDA: FailedPrecondition when the build has no CUDA, or when the
// driver reports no usable device (its error name and string, the driver's
// and runtime's CUDA versions), or when this build has no code for the
// device's architecture; InvalidArgument naming --device for an ordinal
// past the machine's devices. Queries the driver; allocates nothing.
absl::Status ProbeDevice(const DeviceSpec& device);

// ProbeDevice, then the backend: the CPU backend with `cpu`, or the CUDA
// backend (engine/cuda/cuda_backend.h) on the device's ordinal with `cuda`'s
// other options; its errors name --device.
absl::StatusOr<std::unique_ptr<Backend>> MakeBackend(const DeviceSpec& device,
                                                     const CpuBackendOptions& cpu,
                                                     const CudaBackendOptions& cuda = {});

// What the workers, `tandem generate` and the benchmarks call once the
// model is loaded: ProbeDevice, CheckWeightTypes on its matrices, then
// MakeBackend.
absl::StatusOr<std::unique_ptr<Backend>> MakeBackendForModel(
    const Model& model, const DeviceSpec& device, const CpuBackendOptions& cpu,
    const CudaBackendOptions& cuda = {});

// The limits a device's speed is judged against (the engine benchmark's
// fractions): its memory's bytes per second (a device-to-device copy, read
// and written counted) and its F16 tensor-core FLOP/s (an 8192^3 GEMM).
// Measured on CUDA devices; Unimplemented for the CPU, FailedPrecondition
// where ProbeDevice refuses.
struct DeviceRoofline {
  double memory_bytes_per_s = 0;
  double f16_flops_per_s = 0;
};
absl::StatusOr<DeviceRoofline> MeasureRoofline(const DeviceSpec& device);

}  // namespace tandem::engine

#endif  // TANDEM_ENGINE_BACKEND_FACTORY_H_
