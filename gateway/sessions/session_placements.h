// Where this gateway last saw each session's record copies: the decode
// workers its last write landed on, or its last read found (and repaired)
// it on. A worker found down (BlockEventSubscriber) names the sessions that
// had a copy there, so SessionStoreClient re-replicates them at once rather
// than at their next turn. Bounded: past `capacity` sessions the least
// recently written or read one is forgotten (its copies are then repaired by
// its next read, as without this map). Thread-safe.
#ifndef TANDEM_GATEWAY_SESSIONS_SESSION_PLACEMENTS_H_
#define TANDEM_GATEWAY_SESSIONS_SESSION_PLACEMENTS_H_

#include <cstdint>
#include <list>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"

namespace tandem::gateway {

class SessionPlacements {
 public:
  // `capacity` 0 remembers nothing.
  explicit SessionPlacements(int64_t capacity) : capacity_(capacity) {}

  // `session_id`'s copies are on `workers` (replacing what was known); it
  // becomes the most recently used.
  void Set(const std::string& session_id, std::vector<std::string> workers);
  // Adds `workers` to the copies known of `session_id`, if it is known.
  void Add(const std::string& session_id, const std::vector<std::string>& workers);
  void Erase(const std::string& session_id);
  // The sessions with a copy on `worker`, which is taken out of each one's
  // copies (it is gone); least recently used first.
  std::vector<std::string> TakeWorker(const std::string& worker);

  int64_t size() const;
  // The copies known of `session_id` (empty: none, or not known).
  std::vector<std::string> Copies(const std::string& session_id) const;

 private:
  struct Entry {
    std::vector<std::string> workers;
    std::list<std::string>::iterator order;  // in order_
  };
  const int64_t capacity_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, Entry> entries_ ABSL_GUARDED_BY(mu_);
  // Session ids, least recently used first.
  std::list<std::string> order_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tandem::gateway

#endif  // TANDEM_GATEWAY_SESSIONS_SESSION_PLACEMENTS_H_
