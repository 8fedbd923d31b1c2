// Splits and joins "host:port" addresses the way gRPC and civetweb write
// them ("127.0.0.1:0", "localhost:50051", "[::1]:0"). Used by rpc/ and process/;
// pure functions, any thread.
#ifndef TANDEM_COMMON_HOST_PORT_H_
#define TANDEM_COMMON_HOST_PORT_H_

#include <string>

#include "absl/status/statusor.h"

namespace tandem::common {

struct HostPort {
  std::string host;  // as written, brackets kept for IPv6 ("[::1]")
  int port = 0;      // 0..65535
};

// InvalidArgument naming `address` when there is no ':' port or the port is
// not a number in 0..65535 or the host is empty.
absl::StatusOr<HostPort> SplitHostPort(const std::string& address);

std::string JoinHostPort(const std::string& host, int port);

// "[::1]" -> "::1"; other hosts unchanged. For getaddrinfo.
std::string StripBrackets(const std::string& host);

}  // namespace tandem::common

#endif  // TANDEM_COMMON_HOST_PORT_H_
