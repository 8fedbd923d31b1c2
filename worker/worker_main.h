// What the prefill and decode workers' main functions share: the common
// flags, and building the model, engine loop and metrics from them. Called
// from main() only.
#ifndef TANDEM_WORKER_WORKER_MAIN_H_
#define TANDEM_WORKER_WORKER_MAIN_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/status/statusor.h"
#include "common/flags.h"
#include "engine/model/model.h"
#include "rpc/admission.h"
#include "rpc/metrics.h"
#include "worker/block_event_publisher.h"
#include "worker/engine_loop.h"
#include "worker/kv_tiers.h"

namespace tandem::worker {

// --listen, --metrics-listen, --model, the engine flags, the cache tier
// flags, the admission flags, --drain-timeout-s and
// --engine-stall-timeout-ms.
std::vector<common::FlagSpec> WorkerFlagSpecs();

struct Worker {
  std::unique_ptr<engine::Model> model;
  std::unique_ptr<engine::Model> draft_model;  // --draft-model; null: none
  std::unique_ptr<rpc::MetricsServer> metrics;
  // Publishes the engine's block events (serve it with the worker's
  // service). Declared before `loop`, whose thread feeds it.
  std::unique_ptr<BlockEventPublisher> block_events;
  // The cache tiers below the engine's pool; outlive the engine, and send
  // their events to `block_events`.
  std::unique_ptr<TieredKvStore> tiers;
  std::unique_ptr<EngineLoop> loop;
  rpc::AdmissionLimits admission;  // from --max-inflight and friends
  absl::Duration drain_timeout;    // --drain-timeout-s
  absl::Duration stall_timeout;    // --engine-stall-timeout-ms; zero: not watched
};

// Loads the model, starts metrics and the engine thread. `observer` builds
// the per-step callback from the metrics registry; every step's block events
// also go to `block_events`.
absl::StatusOr<Worker> StartWorker(
    const common::Args& args,
    const std::function<EngineLoop::StepObserver(prometheus::Registry&)>& observer);

// Serves `services` and the worker's block events on --listen until SIGINT
// or SIGTERM, then drains (rpc::ServeUntilSignal). While the engine thread
// is stalled past the worker's stall timeout, health ("") is NOT_SERVING and
// block event streams are refused, so gateways route elsewhere. Returns
// main()'s exit code.
int ServeWorker(const std::string& name, const common::Args& args,
                std::vector<grpc::Service*> services, Worker& worker);

}  // namespace tandem::worker

#endif  // TANDEM_WORKER_WORKER_MAIN_H_
