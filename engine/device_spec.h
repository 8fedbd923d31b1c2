// Which device an engine computes on, as `--device cpu|cuda[:N]` names it
// (engine/engine_flags.cc parses the flag; engine/backend_factory.cc builds
// the backend for it). A value type; thread-compatible.
#ifndef TANDEM_ENGINE_DEVICE_SPEC_H_
#define TANDEM_ENGINE_DEVICE_SPEC_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace tandem::engine {

enum class DeviceKind : int32_t { kCpu = 0, kCuda = 1 };

struct DeviceSpec {
  DeviceKind kind = DeviceKind::kCpu;
  int32_t index = 0;  // the CUDA device ordinal; 0 for the CPU
};

// The largest N `cuda:N` parses to (a bound on the text, not on the machine).
inline constexpr int32_t kMaxDeviceIndex = 1023;

// "cpu", "cuda" (= cuda:0) or "cuda:N" with N a decimal in [0, kMaxDeviceIndex];
// anything else is InvalidArgument naming --device and the text.
absl::StatusOr<DeviceSpec> ParseDeviceSpec(std::string_view text);

// "cpu" or "cuda:N": what ParseDeviceSpec reads back to the same spec.
std::string DeviceName(const DeviceSpec& device);
// "cpu" or "cuda": the backend, whatever the index.
std::string_view DeviceKindName(DeviceKind kind);

}  // namespace tandem::engine

#endif  // TANDEM_ENGINE_DEVICE_SPEC_H_
