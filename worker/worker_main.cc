#include "worker/worker_main.h"

#include <algorithm>
#include <iostream>
#include <utility>

#include "absl/synchronization/mutex.h"
#include "common/status_macros.h"
#include "engine/backend_factory.h"
#include "engine/engine_flags.h"
#include "kvtransfer/block_codec.h"
#include "rpc/admission.h"
#include "rpc/bootstrap.h"
#include "rpc/health_port.h"
#include "rpc/tls.h"
#include "worker/stall_watchdog.h"

namespace tandem::worker {

std::vector<common::FlagSpec> WorkerFlagSpecs() {
  std::vector<common::FlagSpec> specs = {
      {.name = "listen", .default_value = "127.0.0.1:0",
       .help = "gRPC listen address host:port (port 0 = ephemeral)"},
      {.name = "metrics-listen", .default_value = "127.0.0.1:0",
       .help = "Prometheus /metrics address host:port; empty = off"},
      {.name = "model", .help = "GGUF model file", .required = true},
  };
  for (common::FlagSpec& s : engine::EngineFlagSpecs()) specs.push_back(std::move(s));
  for (common::FlagSpec& s : KvTierFlagSpecs()) specs.push_back(std::move(s));
  for (common::FlagSpec& s : rpc::AdmissionFlagSpecs({})) specs.push_back(std::move(s));
  specs.push_back(rpc::DrainFlagSpec());
  specs.push_back(rpc::HealthListenFlagSpec());
  specs.push_back({.name = "block-events-coalesce-ms",
                   .default_value = "5",
                   .help = "block events of engine steps within this many ms of the last batch "
                           "sent to gateways wait and go out merged in one batch (a block "
                           "stored and removed meanwhile in neither list), so a gateway costs "
                           "the worker a message per interval rather than per step; 0 = a "
                           "batch per step"});
  specs.push_back({.name = "engine-stall-timeout-ms", .default_value = "30000",
                   .help = "an engine step (with its queued operations) running longer than "
                           "this marks the worker NOT_SERVING until it ends; 0 = off"});
  return specs;
}

namespace {

// The streams a worker takes now (BlockEventBatch.stream_capacity): under a
// latency target, the running sequences it allows plus one waiting, so that
// the target sees work held back and can let the batch grow (a gateway
// queues the rest before any work is done on them); 0 without a target:
// the gateway's --decode-worker-streams bounds it. One, not a share of the
// cap: a stream waiting here has had its first token, and waits for a
// running one to end (two cores, a 25.7M model, an 8 ms target: the first
// to second token gap p50 was 170-520 ms in six runs with a quarter of the
// cap, at least 2, waiting; 180-210 ms in three with one).
int32_t StreamCapacity(const engine::EngineStats& stats) {
  const int32_t running = stats.itl_max_running;
  return running > 0 ? running + 1 : 0;
}

}  // namespace

absl::StatusOr<Worker> StartWorker(
    const common::Args& args,
    const std::function<EngineLoop::StepObserver(prometheus::Registry&)>& observer) {
  Worker w;
  ASSIGN_OR_RETURN(engine::EngineSetup setup, engine::EngineSetupFromArgs(args));
  // Before the model loads and the ports bind: a device this machine cannot
  // use fails start-up at once, with the driver's reason.
  RETURN_IF_ERROR(engine::ProbeDevice(setup.device));
  ASSIGN_OR_RETURN(w.admission, rpc::AdmissionLimitsFromArgs(args));
  ASSIGN_OR_RETURN(const int32_t drain_s, args.IntInRange("drain-timeout-s", 0, 24 * 3600));
  w.drain_timeout = absl::Seconds(drain_s);
  ASSIGN_OR_RETURN(const int32_t stall_ms,
                   args.IntInRange("engine-stall-timeout-ms", 0, 24 * 3600 * 1000));
  w.stall_timeout = absl::Milliseconds(stall_ms);
  ASSIGN_OR_RETURN(const int32_t coalesce_ms, args.IntInRange("block-events-coalesce-ms", 0, 1000));
  ASSIGN_OR_RETURN(const KvTierOptions tier_options, KvTierOptionsFromArgs(args));
  ASSIGN_OR_RETURN(w.model, engine::Model::Load(args.String("model")));
  ASSIGN_OR_RETURN(w.draft_model, engine::LoadDraftModel(setup));
  ASSIGN_OR_RETURN(w.metrics, rpc::MetricsServer::Start(args.String("metrics-listen")));
  // The blocks the engine will make: the tiers load only those.
  const engine::KvLayout layout =
      engine::Engine::LayoutFor(*w.model, w.draft_model.get(), setup.engine.kv);
  ASSIGN_OR_RETURN(w.tiers, TieredKvStore::Create(tier_options, kvtransfer::ExpectationFor(layout),
                                                  w.metrics->registry()));
  setup.engine.tiers = w.tiers.get();
  ASSIGN_OR_RETURN(std::unique_ptr<engine::Engine> eng,
                   engine::CreateEngine(*w.model, w.draft_model.get(), setup));
  w.block_events = std::make_unique<BlockEventPublisher>(
      BlockEventPublisherOptions{.model_fingerprint = eng->kv_layout().fingerprint,
                                 .block_size = eng->kv_block_size(),
                                 .kv_capacity_blocks = eng->stats().blocks_total,
                                 .max_context = eng->max_context(),
                                 .coalesce = absl::Milliseconds(coalesce_ms)},
      w.metrics->registry());
  BlockEventPublisher* publisher = w.block_events.get();
  // Before any step: the snapshot a gateway gets first carries it.
  publisher->SetStreamCapacity(StreamCapacity(eng->stats()));
  publisher->SetDraftKvRoom(eng->stats().draft_kv_room);
  TieredKvStore* tiers = w.tiers.get();
  tiers->AttachSink(
      [publisher](std::span<const engine::BlockEvent> events) { publisher->Publish(events); });
  EngineLoop::StepObserver metrics = observer(w.metrics->registry());
  w.loop = std::make_unique<EngineLoop>(
      std::move(eng), [metrics = std::move(metrics), publisher, tiers](
                          const engine::EngineStats& stats, const engine::StepOutput& out,
                          absl::Duration took) {
        if (metrics) metrics(stats, out, took);
        publisher->Publish(out.blocks);
        publisher->SetStreamCapacity(StreamCapacity(stats));
        publisher->SetDraftKvRoom(stats.draft_kv_room);
        tiers->PublishPending();
      });
  return w;
}

namespace {

// What the watchdog's thread and the serving thread share: the health
// service once the server runs, and whether the drain has begun (health
// then stays NOT_SERVING).
class ServingState {
 public:
  ServingState(BlockEventPublisher& events, EngineLoop& loop) : events_(events), loop_(loop) {}
  void Started(grpc::HealthCheckServiceInterface* health) {
    absl::MutexLock lock(&mu_);
    health_ = health;
    if (stalled_ && health_ != nullptr) health_->SetServingStatus(false);
  }
  void Stalled(bool stalled) {
    absl::MutexLock lock(&mu_);
    stalled_ = stalled;
    if (draining_) return;
    if (stalled) {
      events_.Suspend("the worker's engine is stalled");
      // Its calls in flight end UNAVAILABLE, so gateways retry or migrate
      // them elsewhere instead of waiting on a stuck step.
      loop_.FailAll(absl::UnavailableError("the worker's engine is stalled"));
    } else {
      events_.Resume();
    }
    if (health_ != nullptr) health_->SetServingStatus(!stalled);
  }
  void Draining() {
    absl::MutexLock lock(&mu_);
    draining_ = true;
    health_ = nullptr;  // the server's shutdown sets NOT_SERVING
    events_.Close();
  }

 private:
  BlockEventPublisher& events_;
  EngineLoop& loop_;
  absl::Mutex mu_;
  grpc::HealthCheckServiceInterface* health_ ABSL_GUARDED_BY(mu_) = nullptr;
  bool stalled_ ABSL_GUARDED_BY(mu_) = false;
  bool draining_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace

int ServeWorker(const std::string& name, const common::Args& args,
                std::vector<grpc::Service*> services, Worker& worker) {
  services.push_back(worker.block_events.get());
  // Its port takes only peers with a certificate the internal CA signed.
  absl::StatusOr<rpc::InternalTls> tls = rpc::InternalTlsFromArgs(args);
  if (!tls.ok()) {
    std::cerr << name << ": " << tls.status().message() << "\n";
    return 2;
  }
  ServingState state(*worker.block_events, *worker.loop);
  std::unique_ptr<StallWatchdog> watchdog;
  if (worker.stall_timeout > absl::ZeroDuration()) {
    EngineLoop* loop = worker.loop.get();
    watchdog = std::make_unique<StallWatchdog>(
        worker.stall_timeout, [loop] { return loop->BusyFor(); },
        [&state, &name](bool stalled) {
          std::cerr << name << ": "
                    << (stalled ? "engine thread stalled; NOT_SERVING until it moves"
                                : "engine thread moving again; SERVING")
                    << "\n";
          state.Stalled(stalled);
        },
        worker.metrics->registry());
  }
  return rpc::ServeUntilSignal(
      name, args.String("listen"), services, *worker.metrics,
      {.on_started =
           [&state](grpc::Server&,
                    grpc::HealthCheckServiceInterface* health) -> absl::StatusOr<std::string> {
             state.Started(health);
             return "";
           },
       .on_signal = [&state] { state.Draining(); },
       .max_receive_bytes = 0,
       .drain_timeout = worker.drain_timeout,
       .credentials = rpc::ServerCredentials(tls->files),
       .health_listen = args.String("health-listen")});
}

}  // namespace tandem::worker
