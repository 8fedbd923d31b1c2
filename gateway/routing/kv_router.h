// KV-aware routing: picks the worker for a prompt by what it would cost
// there, the way Dynamo's router does. For each candidate worker,
//   overlap = the prompt's leading full blocks the block index says it holds
//             (or is predicted to hold: see BlockIndex), each credited by
//             the fastest tier holding it (tier_weights: a pool block 1, a
//             host RAM block less, a disk block less again, as Dynamo
//             credits its KV block manager's tiers),
//   cost    = overlap_weight x (prompt blocks - credit)
//           + load_weight x (blocks charged to it by requests in flight from
//             this gateway),
// and the lowest cost wins (ties: fewer requests in flight, lower index).
// A prefill request charges the blocks its worker computes (the uncached
// ones); a decode request charges every prompt block (the KV it holds for
// the stream's life). The chosen worker is predicted to hold the prompt's
// full blocks for `prediction_ttl`, so prompts of one prefix that arrive
// together follow the first. Without index data (no worker has reported
// yet) it falls back to the least-loaded worker. Every decision is counted
// in tandem_router_decisions_total{role,reason} and, at --log-level debug,
// logged with its inputs. Thread-safe.
#ifndef TANDEM_GATEWAY_ROUTING_KV_ROUTER_H_
#define TANDEM_GATEWAY_ROUTING_KV_ROUTER_H_

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "gateway/routing/block_index.h"
#include "gateway/routing/worker_picker.h"
#include "prometheus/counter.h"
#include "prometheus/registry.h"

namespace tandem::gateway {

struct RouterOptions {
  double overlap_weight = 1.0;  // per prompt block the worker would compute
  // Credit per held block by the fastest tier holding it: device (the
  // pool), host, disk.
  std::array<double, kNumTiers> tier_weights = {1.0, 0.8, 0.5};
  double load_weight = 1.0;     // per block charged to it by requests in flight
  // How long a routed prompt's blocks count as held by its worker before the
  // worker reports them; zero: no predictions.
  absl::Duration prediction_ttl = absl::Seconds(10);
  // Prefill: when another worker reports holding at least this many more
  // leading blocks than the chosen one, the chosen one pulls them from it
  // instead of computing them; zero: never.
  int32_t pull_min_blocks = 4;
};

enum class RouteRole { kPrefill, kDecode };

struct RouteDecision {
  WorkerPicker::Pick pick;  // invalid when every worker is excluded
  int32_t overlap_blocks = 0;  // of the chosen worker
  int32_t prompt_blocks = 0;
  // kv_overlap: the chosen worker holds a prefix of the prompt; load: it
  // holds none but another does (load outweighed the overlap); no_overlap:
  // no worker holds any; no_index: no worker has reported its blocks yet;
  // retry: an earlier attempt failed and its workers were excluded.
  std::string reason;
  // Set when the chosen worker should pull the prompt's first `pull_blocks`
  // blocks from the worker at `pull_from` (prefill only).
  std::string pull_from;
  int32_t pull_blocks = 0;
};

class KvRouter {
 public:
  // `index` (slot `first_slot + i` is the picker's worker i) and `registry`
  // must outlive the router.
  KvRouter(BlockIndex& index, int first_slot, const RouterOptions& options,
           prometheus::Registry& registry, RouteRole role);

  // `cache_salt`: the request's tenant salt, as the workers hash its blocks.
  RouteDecision Route(WorkerPicker& picker, std::span<const int32_t> prompt,
                      const std::vector<int>& exclude, uint64_t cache_salt = 0);

 private:
  // A decision's reason, and its label value.
  enum Reason : size_t { kKvOverlap, kLoad, kNoOverlap, kNoIndex, kRetry };
  static constexpr std::array<const char*, 5> kReasons = {"kv_overlap", "load", "no_overlap",
                                                          "no_index", "retry"};

  BlockIndex& index_;
  const int first_slot_;
  const RouterOptions options_;
  const RouteRole role_;
  const std::string role_name_;
  // tandem_router_decisions_total's series for this role, one a reason
  // (by Reason), made once: a series looked up by its labels a route built
  // a map of them and took the family's lock, which every routing thread
  // shares.
  std::array<prometheus::Counter*, kReasons.size()> decisions_{};
  prometheus::Counter& pulls_;
};

}  // namespace tandem::gateway

#endif  // TANDEM_GATEWAY_ROUTING_KV_ROUTER_H_
