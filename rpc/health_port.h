// A plaintext port that serves only grpc.health.v1, for probes that cannot
// speak TLS (the kubelet's gRPC probes) while the main port requires it.
// It reports what the main server's health service reports (every status
// set through Tee() is set on both), plus the service "liveness", SERVING
// for as long as the port is up: a process whose dependencies are away is
// not ready, but alive.
#ifndef TANDEM_RPC_HEALTH_PORT_H_
#define TANDEM_RPC_HEALTH_PORT_H_

#include <memory>
#include <string>

#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/server.h>

#include "absl/status/statusor.h"
#include "common/flags.h"

namespace tandem::rpc {

// --health-listen (empty: no health port).
common::FlagSpec HealthListenFlagSpec();

class HealthPort {
 public:
  // Binds `listen` ("host:port", port 0 = ephemeral). Unavailable when it
  // cannot.
  static absl::StatusOr<std::unique_ptr<HealthPort>> Start(const std::string& listen);
  ~HealthPort();

  // `main` (not owned; null: none) with every status mirrored here.
  // Valid while this port lives.
  grpc::HealthCheckServiceInterface* Tee(grpc::HealthCheckServiceInterface* main);
  const std::string& address() const { return address_; }

 private:
  class Mirror;
  HealthPort() = default;

  std::unique_ptr<grpc::Server> server_;
  std::string address_;
  std::unique_ptr<Mirror> mirror_;
};

}  // namespace tandem::rpc

#endif  // TANDEM_RPC_HEALTH_PORT_H_
