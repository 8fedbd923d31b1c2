// Ends KV leases held by peers: the one way every process (the decode
// worker after a fetch, the gateway when a request dies before decode
// fetched) tells the holder of a lease that it may drop it, and why. Calls are
// asynchronous and never block the request path; a failed call is logged and
// left to the lease's TTL. Thread-safe.
#ifndef TANDEM_KVTRANSFER_RPC_RELEASE_CLIENT_H_
#define TANDEM_KVTRANSFER_RPC_RELEASE_CLIENT_H_

#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "rpc/channel_cache.h"

namespace tandem::kvtransfer {

class ReleaseClient {
 public:
  // `channels` must outlive the client; `who` prefixes log lines.
  ReleaseClient(rpc::ChannelCache& channels, std::string who,
                absl::Duration timeout = absl::Seconds(5));
  // Waits for releases still in flight (each bounded by `timeout`).
  ~ReleaseClient();

  // Tells `address` to drop `lease_id`. `outcome` OK: the blocks arrived;
  // Cancelled: the caller went away (not a transfer failure); anything else
  // is a failure the holder counts and logs. Returns at once.
  void Release(const std::string& address, const std::string& lease_id,
               const absl::Status& outcome);

  // Releases sent and not yet answered.
  int in_flight() const;
  // Waits until every release sent so far was answered (or timed out).
  void AwaitIdle() const;

 private:
  struct Call;
  void Done(Call* call, const std::string& error);

  rpc::ChannelCache& channels_;
  const std::string who_;
  const absl::Duration timeout_;
  mutable absl::Mutex mu_;
  int in_flight_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace tandem::kvtransfer

#endif  // TANDEM_KVTRANSFER_RPC_RELEASE_CLIENT_H_
