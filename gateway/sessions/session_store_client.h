// The gateway's side of the session store: sessions' records live on the
// decode workers (SessionStore behind Decode/PutSession and friends), on
// the worker that keeps the session's KV and on replicas chosen by
// rendezvous hashing of the session id over the decode workers, so any
// gateway reads any session and a session outlives the loss of its KV
// holder. Reads ask every decode worker and take the newest version; a
// write is done once each of its targets answered. Every call is
// asynchronous (callbacks on gRPC threads); none blocks. Thread-safe.
#ifndef TANDEM_GATEWAY_SESSIONS_SESSION_STORE_CLIENT_H_
#define TANDEM_GATEWAY_SESSIONS_SESSION_STORE_CLIENT_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "rpc/channel_cache.h"
#include "tandem/v1/worker.pb.h"

namespace tandem::gateway {

class SessionStoreClient {
 public:
  // `decode_workers` lists the decode workers' addresses now.
  SessionStoreClient(rpc::ChannelCache& channels,
                     std::function<std::vector<std::string>()> decode_workers, int replicas,
                     absl::Duration timeout);

  using RecordDone = std::function<void(absl::StatusOr<tandem::v1::SessionRecord>)>;
  using StatusDone = std::function<void(absl::Status)>;
  using ListDone = std::function<void(std::vector<tandem::v1::SessionRecord>)>;

  // The newest record of `session_id` the decode workers hold.
  // FailedPrecondition naming session_id when every worker answered without
  // it (an unknown session is the caller's error, as the contract says); Unavailable
  // when some could not be asked and none had it.
  void Load(const std::string& session_id, RecordDone done) const;
  // Writes `record` to its kv_holder (when set) and replicas up to the
  // replica count; `previous_holder`, when it is another worker, lets go of
  // the KV it kept. OK when at least one target stored it; Aborted when a
  // target holds the same or a newer version (another turn committed
  // first); otherwise the first error.
  void Save(const tandem::v1::SessionRecord& record, const std::string& previous_holder,
            StatusDone done) const;
  // Drops the session from every decode worker, KV and record.
  void Drop(const std::string& session_id, StatusDone done) const;
  // Every session the reachable decode workers hold, newest version of each.
  void List(ListDone done) const;

  // The workers a record of `session_id` is written to: `holder` (when set
  // and known) first, then the others by rendezvous hash, `replicas` in all.
  std::vector<std::string> Targets(const std::string& session_id,
                                   const std::string& holder) const;

 private:
  rpc::ChannelCache& channels_;
  const std::function<std::vector<std::string>()> decode_workers_;
  const int replicas_;
  const absl::Duration timeout_;
};

}  // namespace tandem::gateway

#endif  // TANDEM_GATEWAY_SESSIONS_SESSION_STORE_CLIENT_H_
