#include "worker/worker_stats.h"

namespace tandem::worker {

void EngineStatsToProto(const engine::EngineStats& s, tandem::v1::WorkerStats* p) {
  p->set_running(s.running);
  p->set_waiting(s.waiting);
  p->set_kv_blocks_used(s.blocks_used);
  p->set_kv_blocks_free(s.blocks_free);
  p->set_kv_blocks_pinned(s.blocks_pinned);
  p->set_sessions_pinned(s.pins);
}

}  // namespace tandem::worker
