// Decode-side admission by KV: every request admitted holds a charge of the
// KV its decode worker will need at most (its prompt plus max_tokens,
// rounded up to whole blocks) until it ends, and a request whose charge
// would take the total past the decode workers' reported KV capacity times
// an overcommit factor is refused before any work is done. So, at an
// overcommit of 1, a decode worker never runs out of KV for a stream it was
// handed, and no request is refused after its first token. Thread-safe.
#ifndef TANDEM_GATEWAY_ROUTING_KV_BUDGET_H_
#define TANDEM_GATEWAY_ROUTING_KV_BUDGET_H_

#include <cstdint>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/scoped_release.h"
#include "prometheus/gauge.h"
#include "prometheus/registry.h"

namespace tandem::gateway {

class KvBudget {
 public:
  // A request's charge, returned when the ticket goes (movable).
  using Ticket = common::ScopedRelease;

  // `overcommit` <= 0 turns the check off (charges are still counted).
  // `registry` must outlive the budget.
  KvBudget(double overcommit, prometheus::Registry& registry);

  // The decode workers' KV now (reachable ones, in tokens: blocks x block
  // size) and their block size; 0 capacity: unknown, nothing is refused.
  void SetCapacity(int64_t tokens, int32_t block_size);

  // Charges `tokens` (rounded up to whole blocks) or refuses with
  // ResourceExhausted saying how much is charged of how much. A request is
  // never refused while nothing is charged (a lone request too large for
  // the budget goes on; the workers' limits judge it).
  absl::StatusOr<Ticket> TryCharge(int64_t tokens);

  int64_t charged() const;

 private:
  void Return(int64_t tokens);

  const double overcommit_;
  prometheus::Gauge& charged_gauge_;
  prometheus::Gauge& capacity_gauge_;
  mutable absl::Mutex mu_;
  int64_t capacity_ ABSL_GUARDED_BY(mu_) = 0;
  int32_t block_size_ ABSL_GUARDED_BY(mu_) = 1;
  int64_t charged_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace tandem::gateway

#endif  // TANDEM_GATEWAY_ROUTING_KV_BUDGET_H_
