#include "engine/backend_factory.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "engine/cuda/weight_types.h"

#ifdef TANDEM_HAVE_CUDA
#include "engine/cuda/cuda_backend.h"
#include "engine/cuda/device.h"
#include "engine/cuda/driver.h"
#include "engine/cuda/kernels.h"
#endif

namespace tandem::engine {
namespace {

std::string TypeName(GgmlType type) { return std::string(GgmlTypeName(type)); }

// The CUDA half of ProbeDevice, in a build with CUDA.
absl::Status ProbeCuda(const DeviceSpec& device) {
#ifdef TANDEM_HAVE_CUDA
  const std::string flag = absl::StrCat("--device ", DeviceName(device));
  // The driver's own words, not "no device": an old driver, a missing one
  // and a machine without a GPU each need a different fix.
  const absl::StatusOr<int> count = cuda::DeviceCount();
  if (!count.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("--device cuda: ", count.status().message()));
  }
  if (device.index >= *count) {
    return absl::InvalidArgumentError(absl::StrCat(
        flag, ": this machine has ", *count, " CUDA device", *count == 1 ? "" : "s",
        " (cuda:0..cuda:", *count - 1, ")"));
  }
  ASSIGN_OR_RETURN(const cuda::DeviceInfo info, cuda::GetDeviceInfo(device.index));
  if (const cudaError_t e = cuda::CheckKernelImage(device.index); e != cudaSuccess) {
    cudaGetLastError();  // not sticky, but leave nothing behind for the next caller
    return absl::FailedPreconditionError(absl::StrCat(
        flag, ": ", info.name, " (sm_", info.major, info.minor,
        ") cannot run this build's kernels: ", cudaGetErrorName(e), " (",
        cudaGetErrorString(e), "); rebuild with CMAKE_CUDA_ARCHITECTURES including ",
        info.major, info.minor));
  }
  return absl::OkStatus();
#else
  (void)device;
  return absl::FailedPreconditionError(
      "--device cuda: this build has no CUDA (built without nvcc or with -DTANDEM_CUDA=OFF)");
#endif
}

// The backend for a device ProbeDevice accepted.
absl::StatusOr<std::unique_ptr<Backend>> Build(const DeviceSpec& device,
                                               const CpuBackendOptions& cpu,
                                               const CudaBackendOptions& cuda) {
  if (device.kind == DeviceKind::kCpu) return MakeCpuBackend(cpu);
#ifdef TANDEM_HAVE_CUDA
  CudaBackendOptions options = cuda;
  options.device = device.index;
  absl::StatusOr<std::unique_ptr<Backend>> backend = MakeCudaBackend(options);
  if (!backend.ok()) {
    return absl::Status(backend.status().code(), absl::StrCat("--device ", DeviceName(device),
                                                              ": ", backend.status().message()));
  }
  return backend;
#else
  (void)cuda;
  return absl::FailedPreconditionError("--device cuda: this build has no CUDA");
#endif
}

}  // namespace

std::vector<WeightTensorType> MatrixTypes(const GgufFile& file) {
  std::vector<WeightTensorType> out;
  for (const GgufTensorInfo& t : file.tensors()) {
    if (t.ne.size() >= 2) out.push_back({.name = t.name, .type = t.type});
  }
  return out;
}

bool DeviceHasKernel(DeviceKind kind, GgmlType type) {
  // The CPU backend multiplies every type GgufFile admits (it is the
  // reference the others are tested against).
  return kind == DeviceKind::kCpu || cuda::HasMatMulKernel(type);
}

absl::Status CheckWeightTypes(DeviceKind kind, std::span<const WeightTensorType> weights) {
  const WeightTensorType* first = nullptr;
  int64_t refused = 0;
  std::vector<std::string> refused_types;
  for (const WeightTensorType& w : weights) {
    if (DeviceHasKernel(kind, w.type)) continue;
    if (first == nullptr) first = &w;
    ++refused;
    const std::string name = TypeName(w.type);
    if (std::find(refused_types.begin(), refused_types.end(), name) == refused_types.end()) {
      refused_types.push_back(name);
    }
  }
  if (first == nullptr) return absl::OkStatus();
  std::vector<std::string> taken;
  for (const GgmlType t : cuda::kMatMulWeightTypes) taken.push_back(TypeName(t));
  return absl::FailedPreconditionError(absl::StrCat(
      "--device ", std::string(DeviceKindName(kind)), ": weight type ", TypeName(first->type), " (",
      first->name, ") has no CUDA kernel; ", refused, " of the model's ", weights.size(),
      " matrices have none (", absl::StrJoin(refused_types, ", "), "); the CUDA kernels take ",
      absl::StrJoin(taken, ", ")));
}

absl::Status ProbeDevice(const DeviceSpec& device) {
  if (device.kind == DeviceKind::kCpu) return absl::OkStatus();
  return ProbeCuda(device);
}

absl::StatusOr<std::unique_ptr<Backend>> MakeBackend(const DeviceSpec& device,
                                                     const CpuBackendOptions& cpu,
                                                     const CudaBackendOptions& cuda) {
  RETURN_IF_ERROR(ProbeDevice(device));
  return Build(device, cpu, cuda);
}

absl::StatusOr<std::unique_ptr<Backend>> MakeBackendForModel(const Model& model,
                                                             const DeviceSpec& device,
                                                             const CpuBackendOptions& cpu,
                                                             const CudaBackendOptions& cuda) {
  RETURN_IF_ERROR(ProbeDevice(device));
  RETURN_IF_ERROR(CheckWeightTypes(device.kind, MatrixTypes(model.file())));
  return Build(device, cpu, cuda);
}

absl::StatusOr<DeviceRoofline> MeasureRoofline(const DeviceSpec& device) {
  if (device.kind == DeviceKind::kCpu) {
    return absl::UnimplementedError("MeasureRoofline: CUDA devices only");
  }
  RETURN_IF_ERROR(ProbeDevice(device));
#ifdef TANDEM_HAVE_CUDA
  ASSIGN_OR_RETURN(const cuda::Roofline r, cuda::MeasureRoofline(device.index));
  return DeviceRoofline{.memory_bytes_per_s = r.memory_bytes_per_s,
                        .f16_flops_per_s = r.f16_flops_per_s};
#else
  return absl::FailedPreconditionError("--device cuda: this build has no CUDA");
#endif
}

}  // namespace tandem::engine
