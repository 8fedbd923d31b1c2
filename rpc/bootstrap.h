// Start-up and shutdown plumbing shared by every Tandem binary's main: builds
// a grpc::Server with health checking and reflection on a listen address
// (port 0 = ephemeral), prints the READY line, and waits for SIGINT/SIGTERM.
// Called from main() only. BlockShutdownSignals must run on the main thread
// before any other thread exists; the rest may run on any thread.
#ifndef TANDEM_RPC_BOOTSTRAP_H_
#define TANDEM_RPC_BOOTSTRAP_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <grpcpp/server.h>
#include <grpcpp/server_builder.h>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/flags.h"
#include "common/ready_line.h"  // PrintReady
#include "rpc/metrics.h"

namespace tandem::rpc {

struct ServerOptions {
  // "host:port"; port 0 lets the kernel pick. "[::]:0" and "0.0.0.0:0" work;
  // the reported address keeps the host as given.
  std::string listen = "127.0.0.1:0";
  // Both directions; KV blocks travel in large messages.
  int max_message_bytes = 64 << 20;
  // Received messages, when smaller (0: max_message_bytes): a public port
  // refuses what its limits would refuse anyway before buffering it.
  int max_receive_bytes = 0;
  // Optional last word on the builder (channel args, an async completion
  // queue, a callback generic service), called after services are added.
  std::function<void(grpc::ServerBuilder&)> configure;
  // Null: plaintext (rpc/tls.h makes TLS ones).
  std::shared_ptr<grpc::ServerCredentials> credentials = nullptr;
};

struct StartedServer {
  std::unique_ptr<grpc::Server> server;
  std::string address;  // the bound "host:port", real port filled in
};

// Registers `services` (not owned; they must outlive the server), enables the
// default gRPC health service (overall status SERVING) and server reflection
// (grpc.reflection.v1alpha), binds options.credentials on options.listen and
// starts. InvalidArgument for a malformed address, Unavailable when binding
// or starting fails.
absl::StatusOr<StartedServer> StartGrpcServer(
    const ServerOptions& options, const std::vector<grpc::Service*>& services);

// Flips the health status of the whole server ("" service) and of each named
// service; set NOT_SERVING before Shutdown so load balancers drain first.
void SetServing(grpc::Server& server, bool serving,
                const std::vector<std::string>& service_names = {});

// Blocks SIGINT and SIGTERM in the calling thread; threads created later
// inherit the mask, so only WaitForShutdownSignal ever sees them. Call first
// thing in main, before gRPC or any pool starts threads.
void BlockShutdownSignals();

// Blocks until SIGINT or SIGTERM arrives (sigwait) and returns its number.
// Calls BlockShutdownSignals itself, but signals that reach threads started
// before that call still kill the process with the default action.
int WaitForShutdownSignal();

// Health off, then grpc::Server::Shutdown with `grace` for in-flight RPCs
// (cancelled after it), then Wait.
void ShutdownServer(grpc::Server& server, absl::Duration grace);

// Starts a gRPC server with `services` on `listen`, prints the READY line,
// blocks until SIGINT/SIGTERM and shuts down. Returns main()'s exit code.
// `name` prefixes the log lines.
// `on_signal` (optional) runs first when the signal arrives: it ends
// streams that never end by themselves, so they do not hold the drain.
// What a process may add to ServeUntilSignal.
struct ServeHooks {
  // Runs once the server is serving (e.g. to hold its health service).
  // It may start another listener in front of the server (the gateway's
  // HTTP front) and return its address for the READY line ("" for none);
  // an error ends the process before READY.
  // `health` is the server's health service (mirrored on the health port
  // when there is one): set statuses through it.
  std::function<absl::StatusOr<std::string>(grpc::Server&, grpc::HealthCheckServiceInterface*)>
      on_started;
  // Runs first when the signal arrives: it ends streams that never end by
  // themselves, so they do not hold the drain, and lets go of the server.
  std::function<void()> on_signal;
  int max_receive_bytes = 0;  // as in ServerOptions
  // After the signal: new calls are refused (health NOT_SERVING) and calls
  // in flight have this long to finish before they are cancelled.
  absl::Duration drain_timeout = absl::Seconds(30);
  // The port's credentials; null: plaintext.
  std::shared_ptr<grpc::ServerCredentials> credentials = nullptr;
  // --health-listen: also serve grpc.health.v1 in plaintext there
  // (rpc/health_port.h); "" = no.
  std::string health_listen = {};
};

// The --drain-timeout-s flag every serving process has.
common::FlagSpec DrainFlagSpec();
int ServeUntilSignal(const std::string& name, const std::string& listen,
                     const std::vector<grpc::Service*>& services, const MetricsServer& metrics,
                     const ServeHooks& hooks = {});

}  // namespace tandem::rpc

#endif  // TANDEM_RPC_BOOTSTRAP_H_
