// KV blocks a worker holds for a peer, each under a lease with a TTL: the
// blocks live until the peer's fetch completes, the peer releases the lease
// (success or failure), or the TTL lapses without a renewal. Leases are
// bounded in count and in bytes. Held blocks are frozen snapshots behind an
// encoder. Owned by KvLeaseServer. Thread-safe.
#ifndef TANDEM_KVTRANSFER_RPC_LEASE_TABLE_H_
#define TANDEM_KVTRANSFER_RPC_LEASE_TABLE_H_

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
#include "kvtransfer/kv_snapshot_codec.h"

namespace tandem::kvtransfer {

struct LeasedKv {
  std::shared_ptr<const SnapshotEncoder> encoder;  // the blocks, encoded on demand
  int32_t blocks = 0;
  int64_t bytes = 0;  // wire bytes, what the byte budget counts
};

struct LeaseStats {
  int32_t leases = 0;
  int32_t blocks = 0;
  int64_t bytes = 0;
  int64_t expired_total = 0;
};

struct LeaseTableOptions {
  absl::Duration ttl = absl::Seconds(30);
  int32_t max_leases = 4096;
  int64_t max_bytes = int64_t{1} << 30;
};

class LeaseTable {
 public:
  static constexpr int32_t kMaxStripes = 16;

  // `now` is the clock leases are timed by (tests pass a fake one).
  explicit LeaseTable(const LeaseTableOptions& options,
                      std::function<absl::Time()> now = [] { return absl::Now(); });

  // ResourceExhausted when max_leases are held or the lease would take the
  // held bytes past max_bytes.
  absl::StatusOr<std::string> Create(std::shared_ptr<const LeasedKv> kv);
  // The lease's blocks for one stripe of a fetch split over `stripes`
  // streams (1: one stream) that skips the `first_block` leading blocks the
  // fetching side holds (delta transfer), renewing its TTL. `fetch_id`
  // names the fetch (0: unnamed). A fetch under another id than the lease's
  // current one supersedes it (the gateway handed the lease to another
  // decode worker after the first was lost mid-fetch): the layout and the
  // completed stripes start over. NotFound naming the lease when it is
  // unknown, released or expired; Aborted when `fetch_id` names a fetch
  // already superseded; InvalidArgument naming the field when stripe is
  // outside [0, stripes), stripes outside [1, kMaxStripes], first_block
  // outside [0, the lease's blocks), or stripes or first_block differ from
  // what the same fetch's first stream said.
  absl::StatusOr<std::shared_ptr<const LeasedKv>> Acquire(const std::string& lease_id,
                                                          int32_t stripe = 0, int32_t stripes = 1,
                                                          int32_t first_block = 0,
                                                          uint64_t fetch_id = 0);
  // Marks one stripe of fetch `fetch_id` complete; once every stripe of the
  // lease's current fetch is, the lease ends (dropped, as by Release) and
  // this returns true. A superseded fetch's stripes count for nothing.
  bool CompleteStripe(const std::string& lease_id, int32_t stripe, uint64_t fetch_id = 0);
  // A stream of fetch `fetch_id` broke off (its peer is gone): drops the
  // lease unless another fetch has superseded that one. False if nothing
  // was dropped.
  bool AbandonFetch(const std::string& lease_id, uint64_t fetch_id);
  // Renews the TTL (while a transfer is alive). False if the lease is gone.
  bool Renew(const std::string& lease_id);
  // Drops the lease; false if it was already gone.
  bool Release(const std::string& lease_id);
  // Drops leases whose TTL has passed at `now`; returns how many.
  int32_t Expire(absl::Time now);

  LeaseStats stats() const;
  // Waits until at most `leases` are held or `deadline` passes; true if
  // they are. For draining (shutdown waits for fetches) and tests.
  bool AwaitAtMost(int32_t leases, absl::Time deadline) const;
  absl::Duration ttl() const { return options_.ttl; }

 private:
  struct Lease {
    std::shared_ptr<const LeasedKv> kv;
    absl::Time expires;
    // The current fetch: its id and layout, set by its first Acquire.
    uint64_t fetch_id = 0;
    int32_t stripes = 0;  // 0: not fetched yet
    int32_t first_block = 0;
    uint32_t completed = 0;  // bit i: stripe i's stream completed
    // The ids of fetches this lease's current one superseded, the latest
    // kSupersededKept of them.
    std::vector<uint64_t> superseded = {};
  };
  static constexpr size_t kSupersededKept = 8;
  void DropLocked(absl::flat_hash_map<std::string, Lease>::iterator it)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const LeaseTableOptions options_;
  const std::function<absl::Time()> now_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, Lease> leases_ ABSL_GUARDED_BY(mu_);
  int64_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
  int32_t blocks_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  int64_t expired_total_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace tandem::kvtransfer

#endif  // TANDEM_KVTRANSFER_RPC_LEASE_TABLE_H_
