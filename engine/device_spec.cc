#include "engine/device_spec.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace tandem::engine {

absl::StatusOr<DeviceSpec> ParseDeviceSpec(std::string_view text) {
  if (text == "cpu") return DeviceSpec{.kind = DeviceKind::kCpu, .index = 0};
  if (text == "cuda") return DeviceSpec{.kind = DeviceKind::kCuda, .index = 0};
  // This Abseil's string_view is its own type, not std::string_view.
  const absl::string_view t(text.data(), text.size());
  const auto bad = [t](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("--device: \"", t, "\" ", why));
  };
  if (!absl::StartsWith(t, "cuda:")) return bad("is not cpu, cuda or cuda:N");
  const absl::string_view digits = t.substr(5);
  // SimpleAtoi takes signs and spaces; a device ordinal is plain digits.
  int32_t index = 0;
  const bool all_digits = !digits.empty() && digits.size() <= 4 &&
                          std::all_of(digits.begin(), digits.end(), absl::ascii_isdigit);
  if (!all_digits || !absl::SimpleAtoi(digits, &index) || index > kMaxDeviceIndex) {
    return bad(absl::StrCat("is not cuda:N with N a device ordinal 0..", kMaxDeviceIndex));
  }
  return DeviceSpec{.kind = DeviceKind::kCuda, .index = index};
}

std::string DeviceName(const DeviceSpec& device) {
  if (device.kind == DeviceKind::kCpu) return "cpu";
  return absl::StrCat("cuda:", device.index);
}

std::string_view DeviceKindName(DeviceKind kind) {
  return kind == DeviceKind::kCpu ? "cpu" : "cuda";
}

}  // namespace tandem::engine
