// The gateway's side of the session store: sessions' records live on the
// decode workers (SessionStore behind Decode/PutSession and friends), on
// the worker that keeps the session's KV and on replicas chosen by
// rendezvous hashing of the session id over the decode workers known
// reachable (unreachable ones only as a last resort), so any gateway reads
// any session and a session outlives the loss of its KV holder. A write
// that finds a target down goes on to the next worker in rank order; a
// read asks every decode worker, takes the newest version and puts it back
// to targets that lack it (read repair), so a session survives any
// sequence of losses that leaves one decode worker. Every call is
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
  struct DecodeWorker {
    std::string address;
    // Its block event stream is live; workers not known reachable are
    // written to only when too few reachable ones are left.
    bool reachable = true;
  };
  struct Options {
    // The decode workers now.
    std::function<std::vector<DecodeWorker>()> decode_workers;
    // Copies of each record aimed for (the KV holder's included).
    int replicas = 2;
    absl::Duration timeout = absl::Seconds(5);
    // Called (on a gRPC thread) for each write or repair that left fewer
    // copies than min(replicas, reachable workers).
    std::function<void()> on_under_replicated;
  };

  SessionStoreClient(rpc::ChannelCache& channels, Options options);

  using RecordDone = std::function<void(absl::StatusOr<tandem::v1::SessionRecord>)>;
  using StatusDone = std::function<void(absl::Status)>;
  using ListDone = std::function<void(std::vector<tandem::v1::SessionRecord>)>;

  // The newest record of `session_id` the decode workers hold.
  // FailedPrecondition naming session_id when every worker answered without
  // it (an unknown session is the caller's error, as the contract says); Unavailable
  // when some could not be asked and none had it. When fewer workers than
  // aimed for hold that version, it is put to the missing targets after
  // `done` (not waited for).
  void Load(const std::string& session_id, RecordDone done) const;
  // Writes `record` to the first copies of Ranked(its id, its kv_holder),
  // aiming for min(replicas, reachable workers); a target that cannot be
  // reached (UNAVAILABLE, DEADLINE_EXCEEDED) hands its copy to the next
  // worker in rank order. Then `previous_holder`, when it is another worker
  // and stored no copy, lets go of the session's KV and record. OK when at
  // least one copy landed; Aborted when a target holds the same or a newer
  // version (another turn committed first); otherwise the first error.
  void Save(const tandem::v1::SessionRecord& record, const std::string& previous_holder,
            StatusDone done) const;
  // Drops the session from every decode worker, KV and record.
  void Drop(const std::string& session_id, StatusDone done) const;
  // Every session the reachable decode workers hold, newest version of each.
  void List(ListDone done) const;

  // Every decode worker in the order a record of `session_id` is written
  // to them: `holder` (when set, known and reachable) first, then the
  // reachable workers by rendezvous hash, then the unreachable ones (the
  // holder first among them).
  std::vector<std::string> Ranked(const std::string& session_id,
                                  const std::string& holder) const;
  // The first `replicas` of Ranked: where a record goes when every worker
  // answers.
  std::vector<std::string> Targets(const std::string& session_id,
                                   const std::string& holder) const;

 private:
  // Ranked, and how many copies a write aims for.
  struct Placement {
    std::vector<std::string> ranked;
    int want = 0;
  };
  Placement Place(const std::string& session_id, const std::string& holder) const;
  // Every decode worker's address, reachable or not.
  std::vector<std::string> Addresses() const;
  void Repair(const tandem::v1::SessionRecord& record, std::vector<std::string> holding,
              std::vector<std::string> unanswered) const;

  rpc::ChannelCache& channels_;
  const Options options_;
};

}  // namespace tandem::gateway

#endif  // TANDEM_GATEWAY_SESSIONS_SESSION_STORE_CLIENT_H_
