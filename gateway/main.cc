// tandem-gateway: the public entry point. Parses flags, loads the model's
// tokenizer (not its weights), wires the Generation service to the workers
// and serves.
#include <iostream>
#include <memory>
#include <utility>

#include "absl/synchronization/mutex.h"
#include "common/flags.h"
#include "common/log.h"
#include "common/status_macros.h"
#include "engine/gguf/gguf.h"
#include "engine/tokenizer/tokenizer.h"
#include "gateway/gateway_options.h"
#include "gateway/generation_service.h"
#include "gateway/http/http_front.h"
#include "rpc/bootstrap.h"
#include "rpc/metrics.h"
#include "rpc/tls.h"

int main(int argc, char** argv) {
  tandem::rpc::BlockShutdownSignals();
  // Abseil's mutex deadlock detector (on in Debian's build) costs every lock
  // a graph lookup, and the block index takes one per block event; the
  // thread-safety analysis in the tests checks lock discipline instead.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  int exit_code = 0;
  std::optional<tandem::common::Args> args = tandem::common::ParseFlagsOrExit(
      "tandem-gateway", argc, argv, tandem::gateway::GatewayFlagSpecs(), &exit_code);
  if (!args.has_value()) return exit_code;
  absl::StatusOr<tandem::gateway::GatewaySetup> setup =
      tandem::gateway::GatewaySetupFromArgs(*args);
  if (!setup.ok()) {
    std::cerr << "tandem-gateway: " << setup.status().message() << "\n";
    return 2;
  }
  tandem::common::SetLogLevel(setup->log_level);

  // Only the tokenizer and the metadata are read, not the weights.
  absl::StatusOr<std::unique_ptr<tandem::engine::GgufFile>> file =
      tandem::engine::GgufFile::Open(setup->model_path, {.require_tensor_data = false});
  absl::StatusOr<std::unique_ptr<tandem::engine::Tokenizer>> tokenizer =
      file.ok() ? tandem::engine::Tokenizer::FromGguf(**file) : file.status();
  if (!tokenizer.ok()) {
    std::cerr << "tandem-gateway: " << tokenizer.status().message() << "\n";
    return 1;
  }
  if (absl::Status applied = tandem::gateway::ApplyModelMetadata(**file, *setup);
      !applied.ok()) {
    std::cerr << "tandem-gateway: " << applied.message() << "\n";
    return 2;
  }
  if (setup->chat_template.empty() && !setup->service.chat_template.recognised()) {
    std::cerr << "tandem-gateway: the model's chat template is of no known family; messages "
                 "are rendered plainly (pass --chat-template)\n";
  }
  file->reset();
  const tandem::gateway::GatewayOptions& options = setup->service;
  const tandem::rpc::TlsFiles& public_tls = setup->public_tls;

  absl::StatusOr<std::unique_ptr<tandem::rpc::MetricsServer>> metrics =
      tandem::rpc::MetricsServer::Start(setup->metrics_listen);
  if (!metrics.ok()) {
    std::cerr << "tandem-gateway: " << metrics.status().message() << "\n";
    return 1;
  }
  tandem::gateway::GenerationService service(std::move(*tokenizer), options,
                                             (*metrics)->registry());
  // With --tls-cert the HTTP front is HTTPS, with the same certificate.
  tandem::gateway::HttpFrontOptions& http_options = setup->http;
  if (!public_tls.cert.empty() && !http_options.listen.empty()) {
    absl::StatusOr<std::shared_ptr<tandem::gateway::HttpsCertificate>> loaded =
        tandem::gateway::HttpsCertificate::Load(public_tls.cert, public_tls.key, public_tls.ca,
                                                absl::Seconds(public_tls.reload_s));
    if (!loaded.ok()) {
      std::cerr << "tandem-gateway: " << loaded.status().message() << "\n";
      return 2;
    }
    http_options.https = std::move(*loaded);
  }
  std::unique_ptr<tandem::gateway::HttpFront> http;
  return tandem::rpc::ServeUntilSignal(
      "tandem-gateway", setup->listen, {&service}, **metrics,
      {.on_started =
           [&](grpc::Server& s,
               grpc::HealthCheckServiceInterface* health) -> absl::StatusOr<std::string> {
             service.AttachHealth(health);
             // Choices of an n > 1 request and the HTTP front call this
             // server's Generation service in-process.
             grpc::ChannelArguments channel_args;
             channel_args.SetMaxReceiveMessageSize(-1);
             service.SetSelfChannel(s.InProcessChannel(channel_args));
             if (http_options.listen.empty()) return "";
             ASSIGN_OR_RETURN(http, tandem::gateway::HttpFront::Start(
                                        http_options, s.InProcessChannel(channel_args),
                                        (*metrics)->registry()));
             return http->address();
           },
       .on_signal =
           [&] {
             if (http != nullptr) http->Stop();
             service.Drain();
           },
       .max_receive_bytes = options.limits.MaxRequestBytes(),
       .drain_timeout = setup->drain_timeout,
       .credentials = tandem::rpc::ServerCredentials(public_tls),
       .health_listen = setup->health_listen});
}
