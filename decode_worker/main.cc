// tandem-decode: a decode worker process. Parses flags, wires the engine
// loop and the Decode service together, and serves.
#include <iostream>

#include "absl/strings/str_cat.h"

#include "decode_worker/decode_service.h"
#include "common/malloc_tuning.h"
#include "rpc/bootstrap.h"
#include "rpc/metrics.h"
#include "worker/engine_metrics.h"
#include "worker/kv_export.h"
#include "worker/worker_main.h"

int main(int argc, char** argv) {
  tandem::rpc::BlockShutdownSignals();
  tandem::common::KeepLargeBuffersInHeap();  // KV blocks: no mmap churn per block
  std::vector<tandem::common::FlagSpec> specs = tandem::worker::WorkerFlagSpecs();
  specs.push_back({.name = "fetch-timeout-ms", .default_value = "60000",
                   .help = "upper bound on fetching one request's KV from a prefill worker"});
  specs.push_back({.name = "fetch-stall-timeout-ms", .default_value = "1000",
                   .help = "a KV fetch that receives no block for this long fails and the "
                           "gateway resumes the stream elsewhere (a prefill worker cut off "
                           "by the network sends nothing)"});
  specs.push_back({.name = "kv-transfer-streams", .default_value = "2",
                   .help = "streams (each on its own connection) one KV fetch is striped "
                           "over, 1..16"});
  specs.push_back({.name = "no-kv-delta-transfer",
                   .help = "fetch every prompt block, even those this worker already holds",
                   .is_bool = true});
  specs.push_back({.name = "max-sessions", .default_value = "4096",
                   .help = "session records this worker keeps for the gateways"});
  specs.push_back(tandem::kvtransfer::LeaseHeartbeatFlagSpec());
  specs.push_back({.name = "stream-heartbeat-ms", .default_value = "250",
                   .help = "a Decode stream with nothing to send for this long (a KV fetch, "
                           "a long step) sends a heartbeat, so gateways tell a slow worker "
                           "from a lost one (0: never)"});
  // Leases on the blocks prefill workers pull from here (a session's).
  for (tandem::common::FlagSpec& s : tandem::worker::LeaseFlagSpecs()) specs.push_back(s);
  for (tandem::common::FlagSpec& s : tandem::rpc::PeerChannelFlagSpecs()) specs.push_back(s);
  int exit_code = 0;
  std::optional<tandem::common::Args> args =
      tandem::common::ParseFlagsOrExit("tandem-decode", argc, argv, specs, &exit_code);
  if (!args.has_value()) return exit_code;
  absl::StatusOr<int32_t> fetch_ms = args->IntInRange("fetch-timeout-ms", 1, 24 * 3600 * 1000);
  absl::StatusOr<int32_t> stall_ms =
      args->IntInRange("fetch-stall-timeout-ms", 1, 24 * 3600 * 1000);
  absl::StatusOr<tandem::rpc::ChannelCacheOptions> channels =
      tandem::rpc::PeerChannelOptionsFromArgs(*args);
  absl::StatusOr<int32_t> streams = args->IntInRange("kv-transfer-streams", 1, 16);
  absl::StatusOr<int32_t> heartbeat_ms =
      args->IntInRange("lease-heartbeat-ms", 0, 24 * 3600 * 1000);
  absl::StatusOr<int32_t> max_sessions = args->IntInRange("max-sessions", 0, 1 << 24);
  absl::StatusOr<int32_t> stream_heartbeat_ms =
      args->IntInRange("stream-heartbeat-ms", 0, 3600 * 1000);
  absl::StatusOr<tandem::kvtransfer::LeaseTableOptions> leases =
      tandem::worker::LeaseOptionsFromArgs(*args);
  for (const absl::Status& s : {fetch_ms.status(), stall_ms.status(), channels.status(), streams.status(),
                                heartbeat_ms.status(), max_sessions.status(),
                                stream_heartbeat_ms.status(),
                                leases.status()}) {
    if (!s.ok()) {
      std::cerr << "tandem-decode: " << s.message() << "\n";
      return 2;
    }
  }
  absl::StatusOr<tandem::worker::Worker> worker =
      tandem::worker::StartWorker(*args, tandem::worker::MakeEngineStepObserver);
  if (!worker.ok()) {
    // One write: under `tandem up` both workers may fail at once (a
    // --device this machine cannot use) into the same stderr.
    std::cerr << absl::StrCat("tandem-decode: ", worker.status().message(), "\n");
    return worker.status().code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
  }
  tandem::decode::DecodeService service(*worker->loop, worker->metrics->registry(),
                                        {.fetch_timeout = absl::Milliseconds(*fetch_ms),
                                         .fetch_stall_timeout = absl::Milliseconds(*stall_ms),
                                         .admission = worker->admission,
                                         .channels = *channels,
                                         .kv_transfer_streams = *streams,
                                         .held_blocks = args->Bool("no-kv-delta-transfer")
                                                            ? nullptr
                                                            : worker->block_events.get(),
                                         .lease_heartbeat = absl::Milliseconds(*heartbeat_ms),
                                         .stream_heartbeat =
                                             absl::Milliseconds(*stream_heartbeat_ms),
                                         .sessions = {.max_sessions = *max_sessions}});
  auto& requests = tandem::rpc::CounterFamily(worker->metrics->registry(),
                                              "tandem_requests_total",
                                              "RPCs served, by method and final status code");
  tandem::worker::KvExporter exporter(
      *worker->loop, *leases, worker->metrics->registry(),
      [&requests](const char* method, const absl::Status& s) {
        requests.Add({{"method", method}, {"code", absl::StatusCodeToString(s.code())}})
            .Increment();
      });
  tandem::worker::KvExportService export_service(exporter);
  return tandem::worker::ServeWorker("tandem-decode", *args, {&service, &export_service},
                                     *worker);
}
