#include "server/worker_main.h"

#include <iostream>

#include "cli/engine_flags.h"
#include "common/status_macros.h"
#include "server/bootstrap.h"
#include "server/ready_line.h"

namespace tandem::server {

std::vector<cli::FlagSpec> WorkerFlagSpecs() {
  std::vector<cli::FlagSpec> specs = {
      {.name = "listen", .default_value = "127.0.0.1:0",
       .help = "gRPC listen address host:port (port 0 = ephemeral)"},
      {.name = "metrics-listen", .default_value = "127.0.0.1:0",
       .help = "Prometheus /metrics address host:port; empty = off"},
      {.name = "model", .help = "GGUF model file", .required = true},
  };
  for (cli::FlagSpec& s : cli::EngineFlagSpecs()) specs.push_back(std::move(s));
  return specs;
}

absl::StatusOr<Worker> StartWorker(
    const cli::Args& args,
    const std::function<EngineLoop::StepObserver(prometheus::Registry&)>& observer) {
  Worker w;
  ASSIGN_OR_RETURN(cli::EngineSetup setup, cli::EngineSetupFromArgs(args));
  ASSIGN_OR_RETURN(w.model, engine::Model::Load(args.String("model")));
  ASSIGN_OR_RETURN(w.metrics, MetricsServer::Start(args.String("metrics-listen")));
  ASSIGN_OR_RETURN(std::unique_ptr<engine::Engine> eng,
                   engine::Engine::Create(*w.model, engine::MakeCpuBackend(setup.backend),
                                          setup.engine));
  w.loop = std::make_unique<EngineLoop>(std::move(eng), observer(w.metrics->registry()));
  return w;
}

std::optional<cli::Args> ParseFlagsOrExit(const std::string& name, int argc, char** argv,
                                          const std::vector<cli::FlagSpec>& specs,
                                          int* exit_code) {
  absl::StatusOr<cli::Args> args =
      cli::Args::Parse(std::vector<std::string>(argv + 1, argv + argc), specs);
  if (!args.ok() || args->help()) {
    if (!args.ok()) std::cerr << name << ": " << args.status().message() << "\n";
    std::cerr << cli::Args::Usage(name, specs);
    *exit_code = args.ok() ? 0 : 2;
    return std::nullopt;
  }
  return std::move(*args);
}

int ServeUntilSignal(const std::string& name, const cli::Args& args,
                     const std::vector<grpc::Service*>& services, const MetricsServer& metrics) {
  absl::StatusOr<StartedServer> started =
      StartGrpcServer({.listen = args.String("listen"), .max_message_bytes = 64 << 20, .configure = nullptr}, services);
  if (!started.ok()) {
    std::cerr << name << ": " << started.status().message() << "\n";
    return 1;
  }
  PrintReady(started->address, metrics.address());
  std::cerr << name << ": serving on " << started->address << " (metrics "
            << (metrics.address().empty() ? "off" : metrics.address()) << ")\n";
  const int sig = WaitForShutdownSignal();
  std::cerr << name << ": signal " << sig << ", shutting down\n";
  ShutdownServer(*started->server, absl::Seconds(5));
  return 0;
}

}  // namespace tandem::server
