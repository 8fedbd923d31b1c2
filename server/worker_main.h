// What the prefill and decode workers' main functions share: the common
// flags, building the model, engine loop and metrics from them, and serving
// until SIGINT/SIGTERM. Called from main() only.
#ifndef TANDEM_SERVER_WORKER_MAIN_H_
#define TANDEM_SERVER_WORKER_MAIN_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/status/statusor.h"
#include "cli/args.h"
#include "engine/model.h"
#include "server/engine_loop.h"
#include "server/metrics.h"

namespace tandem::server {

// --listen, --metrics-listen, --model and the engine flags.
std::vector<cli::FlagSpec> WorkerFlagSpecs();

struct Worker {
  std::unique_ptr<engine::Model> model;
  std::unique_ptr<MetricsServer> metrics;
  std::unique_ptr<EngineLoop> loop;
};

// Loads the model, starts metrics and the engine thread. `observer` builds
// the per-step callback from the metrics registry.
absl::StatusOr<Worker> StartWorker(
    const cli::Args& args,
    const std::function<EngineLoop::StepObserver(prometheus::Registry&)>& observer);

// Parses argv for `name` (printing usage on --help or a bad flag), or
// returns the exit code to use in `exit_code`.
std::optional<cli::Args> ParseFlagsOrExit(const std::string& name, int argc, char** argv,
                                          const std::vector<cli::FlagSpec>& specs,
                                          int* exit_code);

// Starts a gRPC server with `services` on --listen, prints the READY line,
// blocks until SIGINT/SIGTERM and shuts down. Returns the exit code.
int ServeUntilSignal(const std::string& name, const cli::Args& args,
                     const std::vector<grpc::Service*>& services, const MetricsServer& metrics);

}  // namespace tandem::server

#endif  // TANDEM_SERVER_WORKER_MAIN_H_
