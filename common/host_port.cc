#include "common/host_port.h"

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace tandem::common {

absl::StatusOr<HostPort> SplitHostPort(const std::string& address) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "address \"", address, "\" is not host:port (e.g. 127.0.0.1:0)"));
  }
  HostPort result;
  result.host = address.substr(0, colon);
  // A bare IPv6 literal ("::1") has colons but no brackets; its "port" would
  // be a piece of the address, so insist on brackets.
  if (result.host.find(':') != std::string::npos &&
      (result.host.front() != '[' || result.host.back() != ']')) {
    return absl::InvalidArgumentError(absl::StrCat(
        "address \"", address, "\": write IPv6 hosts in brackets, [::1]:0"));
  }
  const std::string port = address.substr(colon + 1);
  if (!absl::SimpleAtoi(port, &result.port) || result.port < 0 ||
      result.port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat(
        "address \"", address, "\": port \"", port, "\" is not 0..65535"));
  }
  return result;
}

std::string JoinHostPort(const std::string& host, int port) {
  return absl::StrCat(host, ":", port);
}

std::string StripBrackets(const std::string& host) {
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    return host.substr(1, host.size() - 2);
  }
  return host;
}

}  // namespace tandem::common
