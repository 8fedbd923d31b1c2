// The engine part of a worker's GetWorkerStats answer. Pure function; any
// thread.
#ifndef TANDEM_WORKER_WORKER_STATS_H_
#define TANDEM_WORKER_WORKER_STATS_H_

#include "engine/engine.h"
#include "tandem/v1/worker.pb.h"

namespace tandem::worker {

void EngineStatsToProto(const engine::EngineStats& s, tandem::v1::WorkerStats* p);

}  // namespace tandem::worker

#endif  // TANDEM_WORKER_WORKER_STATS_H_
