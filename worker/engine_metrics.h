// Prometheus gauges of a worker's engine (running and waiting sequences, KV
// blocks used and free, step time), updated on the engine thread after every
// step. Shared by the prefill and decode workers.
#ifndef TANDEM_WORKER_ENGINE_METRICS_H_
#define TANDEM_WORKER_ENGINE_METRICS_H_

#include "prometheus/registry.h"
#include "worker/engine_loop.h"

namespace tandem::worker {

// Registers the families in `registry` (which must outlive the observer) and
// returns the observer that sets them.
EngineLoop::StepObserver MakeEngineStepObserver(prometheus::Registry& registry);

}  // namespace tandem::worker

#endif  // TANDEM_WORKER_ENGINE_METRICS_H_
