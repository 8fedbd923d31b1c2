#include "rpc/bootstrap.h"

#include <pthread.h>
#include <signal.h>

#include <chrono>
#include <mutex>

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/security/server_credentials.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/check.h"
#include "common/host_port.h"
#include "common/log.h"
#include "common/status_macros.h"
#include "rpc/health_port.h"

namespace tandem::rpc {
namespace {

// Both switches are process-wide and read by every later ServerBuilder, so
// they are flipped once; later calls are no-ops.
void EnableHealthAndReflection() {
  static std::once_flag once;
  std::call_once(once, [] {
    grpc::EnableDefaultHealthCheckService(true);
    grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  });
}

sigset_t ShutdownSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  return set;
}

}  // namespace

absl::StatusOr<StartedServer> StartGrpcServer(
    const ServerOptions& options, const std::vector<grpc::Service*>& services) {
  ASSIGN_OR_RETURN(const common::HostPort hp, common::SplitHostPort(options.listen));
  EnableHealthAndReflection();

  grpc::ServerBuilder builder;
  int selected_port = 0;
  builder.AddListeningPort(
      options.listen,
      options.credentials != nullptr ? options.credentials : grpc::InsecureServerCredentials(),
      &selected_port);
  builder.SetMaxReceiveMessageSize(options.max_receive_bytes > 0 ? options.max_receive_bytes
                                                                 : options.max_message_bytes);
  builder.SetMaxSendMessageSize(options.max_message_bytes);
  // Peers ping to detect a worker that stopped answering (ChannelCache's
  // keepalive): accept pings as often as every second, with or without
  // calls, and never answer them with GOAWAY.
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 1000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 0);
  for (grpc::Service* service : services) {
    TANDEM_CHECK(service != nullptr, "null service passed to StartGrpcServer");
    builder.RegisterService(service);
  }
  if (options.configure) options.configure(builder);

  StartedServer started;
  started.server = builder.BuildAndStart();
  if (started.server == nullptr || selected_port == 0) {
    if (started.server != nullptr) started.server->Shutdown();
    return absl::UnavailableError(absl::StrCat(
        "gRPC server: cannot listen on ", options.listen,
        " (address in use or not local?)"));
  }
  started.address = common::JoinHostPort(hp.host, selected_port);
  SetServing(*started.server, true);
  return started;
}

void SetServing(grpc::Server& server, bool serving,
                const std::vector<std::string>& service_names) {
  grpc::HealthCheckServiceInterface* health = server.GetHealthCheckService();
  if (health == nullptr) return;  // built elsewhere without health checking
  // The whole-server status ("") also resets every named one, so it goes
  // first.
  health->SetServingStatus(serving);
  for (const std::string& name : service_names) {
    health->SetServingStatus(name, serving);
  }
}

void BlockShutdownSignals() {
  const sigset_t set = ShutdownSignals();
  const int rc = pthread_sigmask(SIG_BLOCK, &set, nullptr);
  TANDEM_CHECK(rc == 0, "pthread_sigmask failed");
}

int WaitForShutdownSignal() {
  BlockShutdownSignals();
  const sigset_t set = ShutdownSignals();
  int signal = 0;
  // sigwait returns an error number (not -1/errno); EINTR is not specified
  // for it, but loop on any failure rather than report a phantom signal.
  while (sigwait(&set, &signal) != 0) {
  }
  return signal;
}

void ShutdownServer(grpc::Server& server, absl::Duration grace) {
  SetServing(server, false);
  const auto deadline = std::chrono::system_clock::now() +
                        absl::ToChronoMilliseconds(grace);
  server.Shutdown(deadline);
  server.Wait();
}

int ServeUntilSignal(const std::string& name, const std::string& listen,
                     const std::vector<grpc::Service*>& services, const MetricsServer& metrics,
                     const ServeHooks& hooks) {
  absl::StatusOr<StartedServer> started =
      StartGrpcServer({.listen = listen,
                       .max_message_bytes = 64 << 20,
                       .max_receive_bytes = hooks.max_receive_bytes,
                       .configure = nullptr,
                       .credentials = hooks.credentials},
                      services);
  if (!started.ok()) {
    // Each line goes out in one write (LogLine): `tandem up` and its other
    // children share this stderr, and a line written in pieces could be cut
    // by theirs.
    common::LogLine(name.c_str()) << started.status().message();
    return 1;
  }
  std::unique_ptr<HealthPort> health_port;
  grpc::HealthCheckServiceInterface* health = started->server->GetHealthCheckService();
  if (!hooks.health_listen.empty()) {
    absl::StatusOr<std::unique_ptr<HealthPort>> port = HealthPort::Start(hooks.health_listen);
    if (!port.ok()) {
      common::LogLine(name.c_str()) << port.status().message();
      ShutdownServer(*started->server, absl::ZeroDuration());
      return 1;
    }
    health_port = std::move(*port);
    health = health_port->Tee(health);
    health->SetServingStatus(true);  // as StartGrpcServer set the main one
  }
  std::string http_address;
  if (hooks.on_started) {
    absl::StatusOr<std::string> extra = hooks.on_started(*started->server, health);
    if (!extra.ok()) {
      common::LogLine(name.c_str()) << extra.status().message();
      ShutdownServer(*started->server, absl::ZeroDuration());
      return 1;
    }
    http_address = *extra;
  }
  common::PrintReady({.grpc_address = started->address,
                      .metrics_address = metrics.address(),
                      .http_address = http_address,
                      .health_address = health_port != nullptr ? health_port->address() : ""});
  common::LogLine(name.c_str()) << "serving on " << started->address << " (metrics "
                                << (metrics.address().empty() ? "off" : metrics.address()) << ")";
  const int sig = WaitForShutdownSignal();
  common::LogLine(name.c_str()) << "signal " << sig << ", shutting down";
  if (hooks.on_signal) hooks.on_signal();
  // Not ready from now on (probes stop routing here), still alive while
  // the calls in flight drain.
  if (health_port != nullptr) health->SetServingStatus(false);
  ShutdownServer(*started->server, hooks.drain_timeout);
  return 0;
}

common::FlagSpec DrainFlagSpec() {
  return {.name = "drain-timeout-s", .default_value = "30",
          .help = "on SIGTERM: refuse new calls and give those in flight this long to finish"};
}

}  // namespace tandem::rpc
