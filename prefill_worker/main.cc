// tandem-prefill: a prefill worker process. Parses flags, wires the engine
// loop, lease table and Prefill service together, and serves.
#include <iostream>

#include "server/bootstrap.h"
#include "server/engine_metrics.h"
#include "server/worker_main.h"
#include "prefill_worker/prefill_service.h"

int main(int argc, char** argv) {
  tandem::server::BlockShutdownSignals();
  std::vector<tandem::cli::FlagSpec> specs = tandem::server::WorkerFlagSpecs();
  specs.push_back({.name = "lease-ttl-ms", .default_value = "30000",
                   .help = "how long unclaimed KV blocks are held for a decode worker"});
  specs.push_back({.name = "max-leases", .default_value = "4096",
                   .help = "KV leases held at once before Prefill answers RESOURCE_EXHAUSTED"});
  int exit_code = 0;
  std::optional<tandem::cli::Args> args =
      tandem::server::ParseFlagsOrExit("tandem-prefill", argc, argv, specs, &exit_code);
  if (!args.has_value()) return exit_code;
  absl::StatusOr<int32_t> ttl_ms = args->IntInRange("lease-ttl-ms", 1, 24 * 3600 * 1000);
  absl::StatusOr<int32_t> max_leases = args->IntInRange("max-leases", 1, 1 << 30);
  for (const absl::Status& s : {ttl_ms.status(), max_leases.status()}) {
    if (!s.ok()) {
      std::cerr << "tandem-prefill: " << s.message() << "\n";
      return 2;
    }
  }
  absl::StatusOr<tandem::server::Worker> worker =
      tandem::server::StartWorker(*args, tandem::server::MakeEngineStepObserver);
  if (!worker.ok()) {
    std::cerr << "tandem-prefill: " << worker.status().message() << "\n";
    return 1;
  }
  tandem::prefill::PrefillService service(
      *worker->loop, worker->metrics->registry(),
      {.lease_ttl = absl::Milliseconds(*ttl_ms), .max_leases = *max_leases});
  return tandem::server::ServeUntilSignal("tandem-prefill", *args, {&service}, *worker->metrics);
}
