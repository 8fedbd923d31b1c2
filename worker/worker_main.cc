#include "worker/worker_main.h"

#include <iostream>

#include "common/status_macros.h"
#include "engine/engine_flags.h"
#include "rpc/admission.h"
#include "rpc/bootstrap.h"

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
  for (common::FlagSpec& s : rpc::AdmissionFlagSpecs({})) specs.push_back(std::move(s));
  specs.push_back(rpc::DrainFlagSpec());
  return specs;
}

absl::StatusOr<Worker> StartWorker(
    const common::Args& args,
    const std::function<EngineLoop::StepObserver(prometheus::Registry&)>& observer) {
  Worker w;
  ASSIGN_OR_RETURN(engine::EngineSetup setup, engine::EngineSetupFromArgs(args));
  ASSIGN_OR_RETURN(w.admission, rpc::AdmissionLimitsFromArgs(args));
  ASSIGN_OR_RETURN(const int32_t drain_s, args.IntInRange("drain-timeout-s", 0, 24 * 3600));
  w.drain_timeout = absl::Seconds(drain_s);
  ASSIGN_OR_RETURN(w.model, engine::Model::Load(args.String("model")));
  ASSIGN_OR_RETURN(w.metrics, rpc::MetricsServer::Start(args.String("metrics-listen")));
  ASSIGN_OR_RETURN(std::unique_ptr<engine::Engine> eng,
                   engine::Engine::Create(*w.model, engine::MakeCpuBackend(setup.backend),
                                          setup.engine));
  w.block_events = std::make_unique<BlockEventPublisher>(
      BlockEventPublisherOptions{.model_fingerprint = w.model->fingerprint(),
                                 .block_size = eng->kv_block_size()},
      w.metrics->registry());
  EngineLoop::StepObserver metrics = observer(w.metrics->registry());
  BlockEventPublisher* publisher = w.block_events.get();
  w.loop = std::make_unique<EngineLoop>(
      std::move(eng), [metrics = std::move(metrics), publisher](
                          const engine::EngineStats& stats, const engine::StepOutput& out,
                          absl::Duration took) {
        if (metrics) metrics(stats, out, took);
        publisher->Publish(out.blocks);
      });
  return w;
}

}  // namespace tandem::worker
