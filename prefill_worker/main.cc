// tandem-prefill: a prefill worker process. Parses flags, wires the engine
// loop, the KV lease server and the Prefill service together, and serves.
#include <iostream>

#include "absl/strings/str_cat.h"

#include "prefill_worker/prefill_service.h"
#include "common/malloc_tuning.h"
#include "rpc/bootstrap.h"
#include "worker/engine_metrics.h"
#include "worker/worker_main.h"

int main(int argc, char** argv) {
  tandem::rpc::BlockShutdownSignals();
  tandem::common::KeepLargeBuffersInHeap();  // KV blocks: no mmap churn per block
  std::vector<tandem::common::FlagSpec> specs = tandem::worker::WorkerFlagSpecs();
  for (tandem::common::FlagSpec& s : tandem::worker::LeaseFlagSpecs()) specs.push_back(s);
  specs.push_back({.name = "pull-timeout-ms", .default_value = "2000",
                   .help = "upper bound on pulling a prompt prefix from another prefill worker "
                           "(then it is computed)"});
  specs.push_back({.name = "kv-transfer-streams", .default_value = "2",
                   .help = "streams (each on its own connection) one prefix pull is striped "
                           "over, 1..16"});
  for (tandem::common::FlagSpec& s : tandem::rpc::PeerChannelFlagSpecs()) specs.push_back(s);
  int exit_code = 0;
  std::optional<tandem::common::Args> args =
      tandem::common::ParseFlagsOrExit("tandem-prefill", argc, argv, specs, &exit_code);
  if (!args.has_value()) return exit_code;
  absl::StatusOr<tandem::kvtransfer::LeaseTableOptions> leases =
      tandem::worker::LeaseOptionsFromArgs(*args);
  absl::StatusOr<int32_t> pull_ms = args->IntInRange("pull-timeout-ms", 1, 24 * 3600 * 1000);
  absl::StatusOr<tandem::rpc::ChannelCacheOptions> channels =
      tandem::rpc::PeerChannelOptionsFromArgs(*args);
  absl::StatusOr<int32_t> streams = args->IntInRange("kv-transfer-streams", 1, 16);
  for (const absl::Status& s :
       {leases.status(), pull_ms.status(), channels.status(), streams.status()}) {
    if (!s.ok()) {
      std::cerr << "tandem-prefill: " << s.message() << "\n";
      return 2;
    }
  }
  absl::StatusOr<tandem::worker::Worker> worker =
      tandem::worker::StartWorker(*args, tandem::worker::MakeEngineStepObserver);
  if (!worker.ok()) {
    // One write: under `tandem up` both workers may fail at once (a
    // --device this machine cannot use) into the same stderr.
    std::cerr << absl::StrCat("tandem-prefill: ", worker.status().message(), "\n");
    return worker.status().code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
  }
  tandem::prefill::PrefillService service(
      *worker->loop, worker->metrics->registry(),
      {.leases = *leases,
       .admission = worker->admission,
       .channels = *channels,
       .kv_transfer_streams = *streams,
       .pull_timeout = absl::Milliseconds(*pull_ms)});
  return tandem::worker::ServeWorker("tandem-prefill", *args, {&service}, *worker);
}
