#include "prefill_worker/lease_table.h"

#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace tandem::prefill {

LeaseTable::LeaseTable(absl::Duration ttl, int32_t max_leases,
                       std::function<absl::Time()> now)
    : ttl_(ttl), now_(std::move(now)), max_leases_(max_leases) {}

absl::StatusOr<std::string> LeaseTable::Create(std::shared_ptr<const LeasedKv> kv) {
  absl::MutexLock lock(&mu_);
  if (static_cast<int32_t>(leases_.size()) >= max_leases_) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "prefill worker holds ", leases_.size(), " KV leases (max_leases ", max_leases_,
        "); retry later"));
  }
  // A per-process random prefix keeps ids from an old process (same
  // address, restarted) from naming a new process's leases.
  static const uint64_t kEpoch = std::random_device{}();
  std::string id = absl::StrFormat("%08x-%d", kEpoch & 0xffffffff, next_id_++);
  leases_[id] = Lease{.kv = std::move(kv), .expires = now_() + ttl_};
  return id;
}

absl::StatusOr<std::shared_ptr<const LeasedKv>> LeaseTable::Acquire(const std::string& lease_id) {
  absl::MutexLock lock(&mu_);
  auto it = leases_.find(lease_id);
  if (it == leases_.end()) {
    return absl::NotFoundError(
        absl::StrCat("lease_id \"", lease_id, "\" is unknown, released or expired"));
  }
  it->second.expires = now_() + ttl_;
  return it->second.kv;
}

bool LeaseTable::Renew(const std::string& lease_id) {
  absl::MutexLock lock(&mu_);
  auto it = leases_.find(lease_id);
  if (it == leases_.end()) return false;
  it->second.expires = now_() + ttl_;
  return true;
}

bool LeaseTable::Release(const std::string& lease_id) {
  absl::MutexLock lock(&mu_);
  return leases_.erase(lease_id) > 0;
}

int32_t LeaseTable::Expire(absl::Time now) {
  absl::MutexLock lock(&mu_);
  int32_t n = 0;
  for (auto it = leases_.begin(); it != leases_.end();) {
    if (it->second.expires <= now) {
      leases_.erase(it++);
      ++n;
    } else {
      ++it;
    }
  }
  expired_total_ += n;
  return n;
}

LeaseStats LeaseTable::stats() const {
  absl::MutexLock lock(&mu_);
  LeaseStats s;
  s.leases = static_cast<int32_t>(leases_.size());
  for (const auto& [id, lease] : leases_) {
    s.blocks += static_cast<int32_t>(lease.kv->blocks.size());
    s.bytes += lease.kv->bytes;
  }
  s.expired_total = expired_total_;
  return s;
}

}  // namespace tandem::prefill
