// tandem-decode: a decode worker process. Parses flags, wires the engine
// loop and the Decode service together, and serves.
#include <iostream>

#include "decode_worker/decode_service.h"
#include "server/bootstrap.h"
#include "server/engine_metrics.h"
#include "server/worker_main.h"

int main(int argc, char** argv) {
  tandem::server::BlockShutdownSignals();
  std::vector<tandem::cli::FlagSpec> specs = tandem::server::WorkerFlagSpecs();
  specs.push_back({.name = "fetch-timeout-ms", .default_value = "60000",
                   .help = "upper bound on fetching one request's KV from a prefill worker"});
  int exit_code = 0;
  std::optional<tandem::cli::Args> args =
      tandem::server::ParseFlagsOrExit("tandem-decode", argc, argv, specs, &exit_code);
  if (!args.has_value()) return exit_code;
  absl::StatusOr<int32_t> fetch_ms = args->IntInRange("fetch-timeout-ms", 1, 24 * 3600 * 1000);
  if (!fetch_ms.ok()) {
    std::cerr << "tandem-decode: " << fetch_ms.status().message() << "\n";
    return 2;
  }
  absl::StatusOr<tandem::server::Worker> worker =
      tandem::server::StartWorker(*args, tandem::server::MakeEngineStepObserver);
  if (!worker.ok()) {
    std::cerr << "tandem-decode: " << worker.status().message() << "\n";
    return 1;
  }
  tandem::decode::DecodeService service(*worker->loop, worker->metrics->registry(),
                                        {.fetch_timeout = absl::Milliseconds(*fetch_ms)});
  return tandem::server::ServeUntilSignal("tandem-decode", *args, {&service}, *worker->metrics);
}
