// tandem-decode: a decode worker process. Parses flags, wires the engine
// loop and the Decode service together, and serves.
#include <iostream>

#include "decode_worker/decode_service.h"
#include "server/bootstrap.h"
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
  absl::StatusOr<int64_t> fetch_ms = args->Int("fetch-timeout-ms");
  if (!fetch_ms.ok() || *fetch_ms < 1) {
    std::cerr << "tandem-decode: --fetch-timeout-ms must be a positive integer\n";
    return 2;
  }
  absl::StatusOr<tandem::server::Worker> worker =
      tandem::server::StartWorker(*args, tandem::decode::DecodeService::MakeStepObserver);
  if (!worker.ok()) {
    std::cerr << "tandem-decode: " << worker.status().message() << "\n";
    return 1;
  }
  tandem::decode::DecodeService service(*worker->loop, worker->metrics->registry(),
                                        {.fetch_timeout = absl::Milliseconds(*fetch_ms)});
  return tandem::server::ServeUntilSignal("tandem-decode", *args, {&service}, *worker->metrics);
}
