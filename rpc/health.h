// Client side of the standard gRPC health protocol (grpc.health.v1.Health/
// Check), without a generated stub: Debian ships no health.proto, so the two
// one-field messages are encoded by hand. Used by `tandem up`, the gateway's
// worker probes and tests. Stateless; any thread.
#ifndef TANDEM_RPC_HEALTH_H_
#define TANDEM_RPC_HEALTH_H_

#include <memory>
#include <string>

#include <grpcpp/channel.h>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace tandem::rpc {

// Mirrors grpc.health.v1.HealthCheckResponse.ServingStatus.
enum class HealthState {
  kUnknown = 0,
  kServing = 1,
  kNotServing = 2,
  kServiceUnknown = 3,
};

// Calls Health/Check for `service` ("" = the whole server). The RPC's error
// when it fails (e.g. NOT_FOUND for an unknown service, UNAVAILABLE when
// nothing listens, DEADLINE_EXCEEDED past `timeout`).
absl::StatusOr<HealthState> CheckHealth(
    const std::shared_ptr<grpc::Channel>& channel,
    const std::string& service = "", absl::Duration timeout = absl::Seconds(5));

}  // namespace tandem::rpc

#endif  // TANDEM_RPC_HEALTH_H_
