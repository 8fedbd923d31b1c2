// The session records a decode worker keeps for the gateways (the Decode
// service's PutSession / GetSession / DropSession / ListSessions): one
// tandem.v1.SessionRecord per session, newest version wins, each expiring
// after its own idle TTL without a read or a write. A session dropped or
// expired here also lets go of the KV this worker kept for it (`on_drop`).
// A sweeper thread expires idle records once a second. Thread-safe.
#ifndef TANDEM_DECODE_WORKER_SESSION_STORE_H_
#define TANDEM_DECODE_WORKER_SESSION_STORE_H_

#include <cstdint>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "tandem/v1/worker.pb.h"

namespace tandem::decode {

class SessionStore {
 public:
  struct Options {
    // Records held at once; a new session past it is RESOURCE_EXHAUSTED.
    int32_t max_sessions = 4096;
    // How often idle records are looked for (zero: only on access).
    absl::Duration sweep_interval = absl::Seconds(1);
    // The time; tests move it by hand.
    std::function<absl::Time()> clock = absl::Now;
  };
  // Called with a session's id, outside the store's lock, when its record
  // is dropped or expires.
  using OnDrop = std::function<void(const std::string& session_id)>;

  SessionStore(const Options& options, OnDrop on_drop);
  // Stops the sweeper.
  ~SessionStore();
  SessionStore(const SessionStore&) = delete;
  SessionStore& operator=(const SessionStore&) = delete;

  // Keeps `record` if it is newer than the one held (or none is); the very
  // record held, again, is OK (a write that moved here after a repair had
  // copied it). InvalidArgument without a session_id or version; Aborted
  // when the held version is later, or the same in another record;
  // ResourceExhausted naming --max-sessions
  // when a new session finds the store full.
  absl::Status Put(tandem::v1::SessionRecord record);
  // The record, its idle time restarted; NotFound when not held.
  absl::StatusOr<tandem::v1::SessionRecord> Get(const std::string& session_id);
  // True when a record was dropped.
  bool Drop(const std::string& session_id);
  std::vector<tandem::v1::SessionRecord> List();
  int32_t size() const;

  // Drops every record idle past its TTL now (the sweeper's work).
  void ExpireIdle();

 private:
  struct Entry {
    tandem::v1::SessionRecord record;
    absl::Time last_used;
  };
  bool Expired(const Entry& e, absl::Time now) const;
  void Sweep();

  const Options options_;
  const OnDrop on_drop_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, Entry> sessions_ ABSL_GUARDED_BY(mu_);
  absl::Notification stop_;
  std::thread sweeper_;  // last: started once the rest is set
};

}  // namespace tandem::decode

#endif  // TANDEM_DECODE_WORKER_SESSION_STORE_H_
