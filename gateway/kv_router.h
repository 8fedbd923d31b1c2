// KV-aware routing: picks the worker for a prompt by what it would cost
// there, the way Dynamo's router does. For each candidate worker,
//   overlap = the prompt's leading full blocks the block index says it holds,
//   cost    = overlap_weight x (prompt blocks it would compute)
//           + load_weight x (prompt blocks in flight on it from this gateway),
// and the lowest cost wins (ties: fewer requests in flight, lower index).
// Without index data (no worker has reported yet) it falls back to the
// least-loaded worker. Every decision is counted in
// tandem_router_decisions_total{reason} and, at --log-level debug, logged
// with its inputs. Thread-safe.
#ifndef TANDEM_GATEWAY_KV_ROUTER_H_
#define TANDEM_GATEWAY_KV_ROUTER_H_

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "gateway/block_index.h"
#include "gateway/worker_picker.h"
#include "prometheus/counter.h"
#include "prometheus/registry.h"

namespace tandem::gateway {

struct RouterOptions {
  double overlap_weight = 1.0;  // per prompt block the worker would compute
  double load_weight = 1.0;     // per prompt block already in flight on it
};

struct RouteDecision {
  WorkerPicker::Pick pick;  // invalid when every worker is excluded
  int32_t overlap_blocks = 0;  // of the chosen worker
  int32_t prompt_blocks = 0;
  // kv_overlap: the chosen worker holds a prefix of the prompt; load: it
  // holds none but another does (load outweighed the overlap); no_overlap:
  // no worker holds any; no_index: no worker has reported its blocks yet;
  // retry: an earlier attempt failed and its workers were excluded.
  std::string reason;
};

class KvRouter {
 public:
  // `index` (slot `first_slot + i` is the picker's worker i) and `registry`
  // must outlive the router.
  KvRouter(const BlockIndex& index, int first_slot, const RouterOptions& options,
           prometheus::Registry& registry, std::string role);

  RouteDecision Route(WorkerPicker& picker, std::span<const int32_t> prompt,
                      const std::vector<int>& exclude);

 private:
  const BlockIndex& index_;
  const int first_slot_;
  const RouterOptions options_;
  const std::string role_;
  prometheus::Family<prometheus::Counter>& decisions_;
};

}  // namespace tandem::gateway

#endif  // TANDEM_GATEWAY_KV_ROUTER_H_
