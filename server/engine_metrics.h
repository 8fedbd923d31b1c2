// Prometheus gauges of a worker's engine (running and waiting sequences, KV
// blocks used and free, step time), updated on the engine thread after every
// step. Shared by the prefill and decode workers.
#ifndef TANDEM_SERVER_ENGINE_METRICS_H_
#define TANDEM_SERVER_ENGINE_METRICS_H_

#include "prometheus/registry.h"
#include "server/engine_loop.h"

namespace tandem::server {

// Registers the families in `registry` (which must outlive the observer) and
// returns the observer that sets them.
EngineLoop::StepObserver MakeEngineStepObserver(prometheus::Registry& registry);

}  // namespace tandem::server

#endif  // TANDEM_SERVER_ENGINE_METRICS_H_
