// The gateway's side of the session store: sessions' records live on the
// decode workers (SessionStore behind Decode/PutSession and friends), on
// the worker that keeps the session's KV and on replicas chosen by
// rendezvous hashing of the session id over the decode workers known
// reachable (unreachable ones only as a last resort), so any gateway reads
// any session and a session outlives the loss of its KV holder. A write
// that finds a target down goes on to the next worker in rank order; a
// read asks every decode worker, takes the newest version and puts it back
// to targets that lack it (read repair), so a session survives any
// sequence of losses that leaves one decode worker. The workers each
// session's copies were last seen on are remembered (SessionPlacements), so
// a worker found down has those sessions re-read and re-replicated at once
// (OnWorkerLost), without waiting for their next turn. Every call is
// asynchronous (callbacks on gRPC threads) and has a deadline; none blocks
// but the destructor, which waits for re-replication reads in flight.
// Thread-safe.
#ifndef TANDEM_GATEWAY_SESSIONS_SESSION_STORE_CLIENT_H_
#define TANDEM_GATEWAY_SESSIONS_SESSION_STORE_CLIENT_H_

#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "gateway/sessions/session_placements.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
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
    // Deadline of each call to a worker's store: a stuck worker delays a
    // turn's write by at most this per copy, then the copy moves on.
    absl::Duration timeout = absl::Seconds(5);
    // Sessions whose copies are remembered for re-replication (0: none;
    // copies lost with a worker are then repaired at the next read).
    int64_t tracked_sessions = 65536;
    // Re-replication reads in flight at once after a worker is lost.
    int rereplicate_parallel = 8;
    // Called (on a gRPC thread) for each write or repair that left fewer
    // copies than min(replicas, reachable workers).
    std::function<void()> on_under_replicated;
    // Called (on a gRPC thread) for each session re-replication gave a new
    // copy after a worker holding one was lost.
    std::function<void()> on_rereplicated;
    // Calls in flight, by worker and method (null: not counted). Must
    // outlive every call (a registry's family does).
    prometheus::Family<prometheus::Gauge>* calls_in_flight = nullptr;
  };

  SessionStoreClient(rpc::ChannelCache& channels, Options options);
  // Stops re-replicating and waits for its reads in flight (each within
  // the timeout).
  ~SessionStoreClient();

  using RecordDone = std::function<void(absl::StatusOr<tandem::v1::SessionRecord>)>;
  using StatusDone = std::function<void(absl::Status)>;
  using ListDone = std::function<void(std::vector<tandem::v1::SessionRecord>)>;

  // The newest record of `session_id` the decode workers hold.
  // FailedPrecondition naming session_id when every worker answered without
  // it (an unknown session is the caller's error, as the contract says); Unavailable
  // when some could not be asked and none had it. When fewer workers than
  // aimed for hold that version, it is put to the missing targets after
  // `done` (not waited for). The workers known down are asked only when the
  // reachable ones do not have the session: a worker cut off would hold
  // every turn for the timeout, and a write never skips to a down worker
  // while a reachable one can take it, so its copy is no newer unless that
  // write found no reachable worker (counted as under-replicated).
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

  // `address`, a decode worker, was found down: every session remembered
  // with a copy there is read from the reachable workers and put back to
  // min(replicas, reachable workers) of them (Load's repair), at most
  // rereplicate_parallel at once. Returns at once.
  void OnWorkerLost(const std::string& address);
  // Sessions whose copies are remembered, and re-replication reads queued
  // or in flight (for tests).
  int64_t tracked() const { return placements_->size(); }
  int64_t rereplications_pending() const;

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
  // Every decode worker's address (only those known reachable when
  // `reachable_only`).
  std::vector<std::string> Addresses(bool reachable_only = false) const;
  // Load, asking `addresses`; `repaired` (when set) runs once the repair
  // ended (at once when none was needed or the read failed) with the number
  // of copies it added.
  void LoadFrom(const std::string& session_id, std::vector<std::string> addresses,
                RecordDone done, std::function<void(int)> repaired) const;
  void Repair(const tandem::v1::SessionRecord& record, std::vector<std::string> holding,
              std::vector<std::string> unanswered, std::function<void(int)> repaired) const;
  // Starts queued re-replications while fewer than rereplicate_parallel
  // run.
  void PumpRereplication();
  // Re-replicates `id` in a slot already counted in flight, then the
  // queued ones after it.
  void Rereplicate(std::string id);
  // The next queued session for a slot that ended; nullopt, and the slot
  // released, when none is left or the client is stopping.
  std::optional<std::string> NextRereplication();

  // Re-replication's queue and slots. Shared: a slot's last unlock may
  // come after the destructor saw it released.
  struct Rereplication {
    absl::Mutex mu;
    std::deque<std::string> queue ABSL_GUARDED_BY(mu);
    absl::flat_hash_set<std::string> queued ABSL_GUARDED_BY(mu);
    int in_flight ABSL_GUARDED_BY(mu) = 0;
    bool stopped ABSL_GUARDED_BY(mu) = false;
  };

  rpc::ChannelCache& channels_;
  const Options options_;
  // Shared with writes' and repairs' callbacks, which may outlive the client.
  const std::shared_ptr<SessionPlacements> placements_;
  const std::shared_ptr<Rereplication> rereplication_;
};

}  // namespace tandem::gateway

#endif  // TANDEM_GATEWAY_SESSIONS_SESSION_STORE_CLIENT_H_
