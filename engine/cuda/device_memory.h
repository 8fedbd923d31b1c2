// A CUDA backend's device memory: every allocation held until the backend
// goes (all of them made at start-up), and counted by use, so that running
// out names what is already held and the flags that size each use
// (OutOfMemoryMessage, step_plan.h).
#ifndef TANDEM_ENGINE_CUDA_DEVICE_MEMORY_H_
#define TANDEM_ENGINE_CUDA_DEVICE_MEMORY_H_

#include <cstdint>
#include <deque>
#include <map>
#include <span>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "engine/cuda/device.h"

namespace tandem::engine::cuda {

class DeviceMemory {
 public:
  // `device_name` names the device in errors.
  explicit DeviceMemory(std::string device_name) : device_name_(std::move(device_name)) {}

  // `bytes` (>= 0; at least 1 is allocated) on the calling thread's device
  // for `what`, whose first word names the use; ResourceExhausted with
  // OutOfMemoryMessage when it does not fit. The buffer lives as long as
  // this.
  absl::StatusOr<DeviceBuffer*> Allocate(int64_t bytes, std::string_view what);
  // `bytes` copied into an allocation of their own, the copy queued on
  // `stream` (the host bytes must stay until it is synchronized).
  absl::StatusOr<DeviceBuffer*> CopyIn(std::span<const uint8_t> bytes, std::string_view what,
                                       const Stream& stream);

 private:
  const std::string device_name_;
  std::deque<DeviceBuffer> buffers_;          // a deque: pointers into it stay valid
  std::map<std::string, int64_t> allocated_;  // bytes by use
};

}  // namespace tandem::engine::cuda

#endif  // TANDEM_ENGINE_CUDA_DEVICE_MEMORY_H_
