#include "engine/cuda/device_memory.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <utility>

#include "common/status_macros.h"
#include "engine/cuda/step_plan.h"

namespace tandem::engine::cuda {

absl::StatusOr<DeviceBuffer*> DeviceMemory::Allocate(int64_t bytes, std::string_view what) {
  absl::StatusOr<DeviceBuffer> b =
      DeviceBuffer::Allocate(static_cast<size_t>(std::max<int64_t>(bytes, 1)));
  if (!b.ok()) {
    size_t free = 0, total = 0;
    cudaMemGetInfo(&free, &total);
    cudaGetLastError();
    return absl::ResourceExhaustedError(
        OutOfMemoryMessage(what, bytes, device_name_, static_cast<int64_t>(free),
                           static_cast<int64_t>(total), allocated_));
  }
  allocated_[std::string(what.substr(0, what.find(' ')))] += bytes;
  return &buffers_.emplace_back(*std::move(b));
}

absl::StatusOr<DeviceBuffer*> DeviceMemory::CopyIn(std::span<const uint8_t> bytes,
                                                   std::string_view what, const Stream& stream) {
  ASSIGN_OR_RETURN(DeviceBuffer * b, Allocate(static_cast<int64_t>(bytes.size()), what));
  if (!bytes.empty()) RETURN_IF_ERROR(b->Upload(stream, bytes.data(), bytes.size()));
  return b;
}

}  // namespace tandem::engine::cuda
