// tandem-prefill: a prefill worker process. Parses flags, wires the engine
// loop, lease table and Prefill service together, and serves.
#include <iostream>

#include "server/bootstrap.h"
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
  absl::StatusOr<int64_t> ttl_ms = args->Int("lease-ttl-ms");
  absl::StatusOr<int64_t> max_leases = args->Int("max-leases");
  if (!ttl_ms.ok() || !max_leases.ok() || *ttl_ms < 1 || *max_leases < 1 ||
      *max_leases > (1 << 30)) {
    std::cerr << "tandem-prefill: --lease-ttl-ms and --max-leases must be positive integers\n";
    return 2;
  }
  absl::StatusOr<tandem::server::Worker> worker =
      tandem::server::StartWorker(*args, tandem::prefill::PrefillService::MakeStepObserver);
  if (!worker.ok()) {
    std::cerr << "tandem-prefill: " << worker.status().message() << "\n";
    return 1;
  }
  tandem::prefill::PrefillService service(
      *worker->loop, worker->metrics->registry(),
      {.lease_ttl = absl::Milliseconds(*ttl_ms), .max_leases = static_cast<int32_t>(*max_leases)});
  return tandem::server::ServeUntilSignal("tandem-prefill", *args, {&service}, *worker->metrics);
}
