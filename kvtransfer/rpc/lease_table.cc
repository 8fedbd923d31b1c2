#include "kvtransfer/rpc/lease_table.h"

#include <random>

#include "absl/algorithm/container.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace tandem::kvtransfer {

LeaseTable::LeaseTable(const LeaseTableOptions& options, std::function<absl::Time()> now)
    : options_(options), now_(std::move(now)) {}

absl::StatusOr<std::string> LeaseTable::Create(std::shared_ptr<const LeasedKv> kv) {
  absl::MutexLock lock(&mu_);
  if (static_cast<int32_t>(leases_.size()) >= options_.max_leases) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "KV leases: ", leases_.size(), " held (max_leases ", options_.max_leases,
        "); retry later"));
  }
  if (bytes_ + kv->bytes > options_.max_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "KV leases: ", bytes_, " bytes held, ", kv->bytes, " more would pass max_lease_bytes ",
        options_.max_bytes, "; retry later"));
  }
  // A per-process random prefix keeps ids from an old process (same
  // address, restarted) from naming a new process's leases.
  static const uint64_t kEpoch = std::random_device{}();
  std::string id = absl::StrFormat("%08x-%d", kEpoch & 0xffffffff, next_id_++);
  bytes_ += kv->bytes;
  blocks_ += kv->blocks;
  leases_[id] = Lease{.kv = std::move(kv), .expires = now_() + options_.ttl};
  return id;
}

absl::StatusOr<std::shared_ptr<const LeasedKv>> LeaseTable::Acquire(const std::string& lease_id,
                                                                    int32_t stripe, int32_t stripes,
                                                                    int32_t first_block,
                                                                    uint64_t fetch_id) {
  if (stripes < 1 || stripes > kMaxStripes) {
    return absl::InvalidArgumentError(
        absl::StrCat("stripes: got ", stripes, ", expected 1..", kMaxStripes));
  }
  if (stripe < 0 || stripe >= stripes) {
    return absl::InvalidArgumentError(
        absl::StrCat("stripe: got ", stripe, ", expected 0..", stripes - 1));
  }
  absl::MutexLock lock(&mu_);
  auto it = leases_.find(lease_id);
  if (it == leases_.end()) {
    return absl::NotFoundError(
        absl::StrCat("lease_id \"", lease_id, "\" is unknown, released or expired"));
  }
  Lease& lease = it->second;
  if (first_block < 0 || first_block >= lease.kv->blocks) {
    return absl::InvalidArgumentError(absl::StrCat("first_block: got ", first_block,
                                                   ", expected 0..", lease.kv->blocks - 1,
                                                   " (at least one block is fetched)"));
  }
  if (lease.stripes != 0 && fetch_id != lease.fetch_id) {
    if (absl::c_linear_search(lease.superseded, fetch_id)) {
      return absl::AbortedError(absl::StrCat("fetch_id: ", fetch_id, " of lease \"", lease_id,
                                             "\" was superseded by another fetch"));
    }
    // Another fetch of the same lease: its fetcher took over from one that
    // was lost (or gave up), whose streams count for nothing from now on.
    if (lease.superseded.size() == kSupersededKept) {
      lease.superseded.erase(lease.superseded.begin());
    }
    lease.superseded.push_back(lease.fetch_id);
    lease.stripes = 0;
    lease.completed = 0;
  }
  if (lease.stripes == 0) {
    lease.fetch_id = fetch_id;
    lease.stripes = stripes;
    lease.first_block = first_block;
  }
  if (lease.stripes != stripes) {
    return absl::InvalidArgumentError(absl::StrCat("stripes: got ", stripes, ", lease \"",
                                                   lease_id, "\" is fetched in ", lease.stripes));
  }
  if (lease.first_block != first_block) {
    return absl::InvalidArgumentError(absl::StrCat("first_block: got ", first_block, ", lease \"",
                                                   lease_id, "\" is fetched from block ",
                                                   lease.first_block));
  }
  lease.expires = now_() + options_.ttl;
  return lease.kv;
}

bool LeaseTable::CompleteStripe(const std::string& lease_id, int32_t stripe, uint64_t fetch_id) {
  absl::MutexLock lock(&mu_);
  auto it = leases_.find(lease_id);
  if (it == leases_.end()) return false;
  Lease& lease = it->second;
  if (fetch_id != lease.fetch_id || stripe < 0 || stripe >= lease.stripes) return false;
  lease.completed |= uint32_t{1} << stripe;
  if (lease.completed != (uint32_t{1} << lease.stripes) - 1) return false;
  DropLocked(it);
  return true;
}

bool LeaseTable::AbandonFetch(const std::string& lease_id, uint64_t fetch_id) {
  absl::MutexLock lock(&mu_);
  auto it = leases_.find(lease_id);
  if (it == leases_.end() || it->second.fetch_id != fetch_id) return false;
  DropLocked(it);
  return true;
}

void LeaseTable::DropLocked(absl::flat_hash_map<std::string, Lease>::iterator it) {
  bytes_ -= it->second.kv->bytes;
  blocks_ -= it->second.kv->blocks;
  leases_.erase(it);
}

bool LeaseTable::Renew(const std::string& lease_id) {
  absl::MutexLock lock(&mu_);
  auto it = leases_.find(lease_id);
  if (it == leases_.end()) return false;
  it->second.expires = now_() + options_.ttl;
  return true;
}

bool LeaseTable::Release(const std::string& lease_id) {
  absl::MutexLock lock(&mu_);
  auto it = leases_.find(lease_id);
  if (it == leases_.end()) return false;
  DropLocked(it);
  return true;
}

int32_t LeaseTable::Expire(absl::Time now) {
  absl::MutexLock lock(&mu_);
  int32_t n = 0;
  for (auto it = leases_.begin(); it != leases_.end();) {
    if (it->second.expires <= now) {
      DropLocked(it++);
      ++n;
    } else {
      ++it;
    }
  }
  expired_total_ += n;
  return n;
}

bool LeaseTable::AwaitAtMost(int32_t leases, absl::Time deadline) const {
  absl::MutexLock lock(&mu_);
  auto few = [this, leases]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return static_cast<int32_t>(leases_.size()) <= leases;
  };
  return mu_.AwaitWithDeadline(absl::Condition(&few), deadline);
}

LeaseStats LeaseTable::stats() const {
  absl::MutexLock lock(&mu_);
  return LeaseStats{.leases = static_cast<int32_t>(leases_.size()),
                    .blocks = blocks_,
                    .bytes = bytes_,
                    .expired_total = expired_total_};
}

}  // namespace tandem::kvtransfer
