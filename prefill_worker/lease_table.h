// KV blocks a prefill worker holds for decode workers, each under a lease
// with a TTL: the blocks live until the decode side releases the lease
// (success or failure), the TTL lapses without a renewal, or the request is
// cancelled. Held blocks are encoded, immutable snapshots. Thread-safe.
#ifndef TANDEM_PREFILL_WORKER_LEASE_TABLE_H_
#define TANDEM_PREFILL_WORKER_LEASE_TABLE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace tandem::prefill {

struct LeasedKv {
  std::vector<std::string> blocks;  // wire-format blocks, in sequence order
  int64_t bytes = 0;
};

struct LeaseStats {
  int32_t leases = 0;
  int32_t blocks = 0;
  int64_t bytes = 0;
  int64_t expired_total = 0;
};

class LeaseTable {
 public:
  // `now` is the clock leases are timed by (tests pass a fake one).
  LeaseTable(absl::Duration ttl, int32_t max_leases,
             std::function<absl::Time()> now = [] { return absl::Now(); });

  // ResourceExhausted when max_leases are held.
  absl::StatusOr<std::string> Create(std::shared_ptr<const LeasedKv> kv);
  // The lease's blocks, renewing its TTL; NotFound naming the lease when it
  // is unknown, released or expired.
  absl::StatusOr<std::shared_ptr<const LeasedKv>> Acquire(const std::string& lease_id);
  // Renews the TTL (while a transfer is alive). False if the lease is gone.
  bool Renew(const std::string& lease_id);
  // Drops the lease; false if it was already gone.
  bool Release(const std::string& lease_id);
  // Drops leases whose TTL has passed at `now`; returns how many.
  int32_t Expire(absl::Time now);

  LeaseStats stats() const;
  absl::Duration ttl() const { return ttl_; }

 private:
  struct Lease {
    std::shared_ptr<const LeasedKv> kv;
    absl::Time expires;
  };

  const absl::Duration ttl_;
  const std::function<absl::Time()> now_;
  const int32_t max_leases_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, Lease> leases_ ABSL_GUARDED_BY(mu_);
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  int64_t expired_total_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace tandem::prefill

#endif  // TANDEM_PREFILL_WORKER_LEASE_TABLE_H_
