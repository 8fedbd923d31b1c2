// The heartbeat of KV hand-offs: while a process waits on a lease another
// worker holds (the gateway between a prefill's answer and the decode call,
// the decode worker until its fetch ends), it renews the lease's TTL every
// `period` (RenewKv, one call per holder per beat naming every lease kept
// there), so a slow client write or a queued fetch never loses the blocks,
// and a dead holder is not waited on longer than the lease's TTL. Renewals
// run on the keeper's own thread and never block a caller. Thread-safe.
#ifndef TANDEM_KVTRANSFER_RPC_LEASE_KEEPER_H_
#define TANDEM_KVTRANSFER_RPC_LEASE_KEEPER_H_

#include <cstdint>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/flags.h"
#include "common/scoped_release.h"
#include "rpc/channel_cache.h"

namespace tandem::kvtransfer {

// --lease-heartbeat-ms, for the processes that keep leases (milliseconds;
// 0 = no heartbeat).
common::FlagSpec LeaseHeartbeatFlagSpec();

class LeaseKeeper {
 public:
  // A lease kept alive for as long as the handle lives (movable; empty
  // when default-constructed or moved from).
  using Handle = common::ScopedRelease;

  // `channels` must outlive the keeper. A zero `period` keeps nothing.
  LeaseKeeper(rpc::ChannelCache& channels, absl::Duration period);
  // Stops the thread and waits for renewals in flight; every handle must be
  // gone.
  ~LeaseKeeper();
  LeaseKeeper(const LeaseKeeper&) = delete;
  LeaseKeeper& operator=(const LeaseKeeper&) = delete;

  // Renews `lease_id` at `address` every period from now on.
  Handle Keep(const std::string& address, const std::string& lease_id);

  // Leases kept now; renewals answered so far (each lease counted once per
  // beat), and how many of those the holder no longer knew.
  int32_t kept() const;
  int64_t renewed() const;
  int64_t unknown() const;
  // Waits until at least `n` renewals were answered, up to `timeout`.
  bool AwaitRenewed(int64_t n, absl::Duration timeout) const;

 private:
  struct Lease {
    std::string address;
    std::string lease_id;
  };
  struct Call;
  void Drop(int64_t id);
  void Run();
  void Beat();
  void Answered(Call* call, int32_t named, int32_t unknown);

  rpc::ChannelCache& channels_;
  const absl::Duration period_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<int64_t, Lease> leases_ ABSL_GUARDED_BY(mu_);
  int64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  int32_t in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t renewed_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t unknown_ ABSL_GUARDED_BY(mu_) = 0;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;  // last: started once the rest is set
};

}  // namespace tandem::kvtransfer

#endif  // TANDEM_KVTRANSFER_RPC_LEASE_KEEPER_H_
