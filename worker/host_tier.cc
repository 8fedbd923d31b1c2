#include "worker/host_tier.h"

namespace tandem::worker {

bool HostTier::Put(const engine::BlockHash& hash, engine::KvBlockBytes bytes,
                   std::vector<Evicted>& evicted) {
  if (const auto it = index_.find(hash); it != index_.end()) {
    lru_.splice(lru_.end(), lru_, it->second);
    return false;
  }
  const int64_t size = static_cast<int64_t>(bytes.size());
  if (size > budget_bytes_) return false;
  while (bytes_ + size > budget_bytes_) {
    Entry& oldest = lru_.front();
    bytes_ -= static_cast<int64_t>(oldest.bytes.size());
    index_.erase(oldest.hash);
    evicted.push_back({.hash = oldest.hash, .bytes = std::move(oldest.bytes)});
    lru_.pop_front();
  }
  lru_.push_back({.hash = hash, .bytes = std::move(bytes)});
  index_.emplace(hash, std::prev(lru_.end()));
  bytes_ += size;
  return true;
}

std::optional<engine::KvBlockBytes> HostTier::Get(const engine::BlockHash& hash) const {
  const auto it = index_.find(hash);
  if (it == index_.end()) return std::nullopt;
  return it->second->bytes;
}

bool HostTier::Erase(const engine::BlockHash& hash) {
  const auto it = index_.find(hash);
  if (it == index_.end()) return false;
  bytes_ -= static_cast<int64_t>(it->second->bytes.size());
  lru_.erase(it->second);
  index_.erase(it);
  return true;
}

}  // namespace tandem::worker
