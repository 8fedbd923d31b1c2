#include "decode_worker/session_store.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace tandem::decode {

SessionStore::SessionStore(const Options& options, OnDrop on_drop)
    : options_(options), on_drop_(std::move(on_drop)) {
  if (options_.sweep_interval > absl::ZeroDuration()) sweeper_ = std::thread([this] { Sweep(); });
}

SessionStore::~SessionStore() {
  stop_.Notify();
  if (sweeper_.joinable()) sweeper_.join();
}

bool SessionStore::Expired(const Entry& e, absl::Time now) const {
  return e.record.idle_ttl_seconds() > 0 &&
         now - e.last_used >= absl::Seconds(e.record.idle_ttl_seconds());
}

absl::Status SessionStore::Put(tandem::v1::SessionRecord record) {
  if (record.session_id().empty()) {
    return absl::InvalidArgumentError("record.session_id: must not be empty");
  }
  if (record.version() == 0) return absl::InvalidArgumentError("record.version: must be >= 1");
  absl::MutexLock lock(&mu_);
  const auto it = sessions_.find(record.session_id());
  // An expired record the sweeper has not reached yet is replaced like any.
  if (it != sessions_.end() && !Expired(it->second, options_.clock())) {
    // The same record again (a write that moved here after a repair had
    // already copied it) is taken as written; another record of the same
    // version is another turn's.
    if (it->second.record.version() == record.version() &&
        it->second.record.SerializeAsString() == record.SerializeAsString()) {
      it->second.last_used = options_.clock();
      return absl::OkStatus();
    }
    if (it->second.record.version() >= record.version()) {
      return absl::AbortedError(absl::StrCat(
          "session_id: \"", record.session_id(), "\" is at version ",
          it->second.record.version(), ", not before ", record.version(),
          " (another turn committed first)"));
    }
  }
  if (it != sessions_.end()) {
    it->second = Entry{.record = std::move(record), .last_used = options_.clock()};
    return absl::OkStatus();
  }
  if (static_cast<int64_t>(sessions_.size()) >= options_.max_sessions) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "max-sessions: this decode worker holds ", sessions_.size(), " sessions, its limit"));
  }
  std::string id = record.session_id();
  sessions_.emplace(std::move(id), Entry{.record = std::move(record), .last_used = options_.clock()});
  return absl::OkStatus();
}

absl::StatusOr<tandem::v1::SessionRecord> SessionStore::Get(const std::string& session_id) {
  bool expired = false;
  {
    absl::MutexLock lock(&mu_);
    const auto it = sessions_.find(session_id);
    if (it != sessions_.end()) {
      const absl::Time now = options_.clock();
      if (!Expired(it->second, now)) {
        it->second.last_used = now;
        return it->second.record;
      }
      sessions_.erase(it);
      expired = true;
    }
  }
  if (expired) on_drop_(session_id);
  return absl::NotFoundError(absl::StrCat("session_id: \"", session_id, "\" is not held here"));
}

bool SessionStore::Drop(const std::string& session_id) {
  bool dropped;
  {
    absl::MutexLock lock(&mu_);
    dropped = sessions_.erase(session_id) > 0;
  }
  // KV may be kept without a record (the record's write failed): let go of
  // it either way.
  on_drop_(session_id);
  return dropped;
}

std::vector<tandem::v1::SessionRecord> SessionStore::List() {
  absl::MutexLock lock(&mu_);
  const absl::Time now = options_.clock();
  std::vector<tandem::v1::SessionRecord> out;
  out.reserve(sessions_.size());
  for (const auto& [id, e] : sessions_) {
    if (!Expired(e, now)) out.push_back(e.record);
  }
  return out;
}

int32_t SessionStore::size() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int32_t>(sessions_.size());
}

void SessionStore::ExpireIdle() {
  std::vector<std::string> expired;
  {
    absl::MutexLock lock(&mu_);
    const absl::Time now = options_.clock();
    for (auto it = sessions_.begin(); it != sessions_.end();) {
      if (Expired(it->second, now)) {
        expired.push_back(it->first);
        sessions_.erase(it++);
      } else {
        ++it;
      }
    }
  }
  for (const std::string& id : expired) on_drop_(id);
}

void SessionStore::Sweep() {
  while (!stop_.WaitForNotificationWithTimeout(options_.sweep_interval)) ExpireIdle();
}

}  // namespace tandem::decode
