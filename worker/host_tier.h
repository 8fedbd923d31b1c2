// The host RAM tier: frozen copies of full KV blocks the engine's pool
// evicted, under a byte budget, least recently used evicted first. A
// victim cache: a block promoted back into the pool leaves it (the pool's
// copy is the one in use), and comes back if the pool evicts it again.
// Engine-thread only (worker/kv_tiers.h calls it from the engine's thread).
#ifndef TANDEM_WORKER_HOST_TIER_H_
#define TANDEM_WORKER_HOST_TIER_H_

#include <cstdint>
#include <list>
#include <optional>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "engine/kv/block_hash.h"
#include "engine/kv/kv_snapshot.h"

namespace tandem::worker {

class HostTier {
 public:
  explicit HostTier(int64_t budget_bytes) : budget_bytes_(budget_bytes) {}

  HostTier(const HostTier&) = delete;
  HostTier& operator=(const HostTier&) = delete;

  struct Evicted {
    engine::BlockHash hash;
    engine::KvBlockBytes bytes;
  };
  // Keeps `bytes` (a frozen copy) under `hash` as the most recently used
  // entry, evicting least recently used ones into `evicted` to stay within
  // the budget. False (nothing kept) when the block alone exceeds the
  // budget or `hash` is held already (then it only becomes most recent).
  bool Put(const engine::BlockHash& hash, engine::KvBlockBytes bytes,
           std::vector<Evicted>& evicted);
  // The block under `hash` (shared bytes: they stay valid whatever happens
  // to the entry), or nullopt.
  std::optional<engine::KvBlockBytes> Get(const engine::BlockHash& hash) const;
  // Drops the entry; false when there is none.
  bool Erase(const engine::BlockHash& hash);
  bool Contains(const engine::BlockHash& hash) const { return index_.contains(hash); }

  int64_t budget_bytes() const { return budget_bytes_; }
  int64_t bytes() const { return bytes_; }
  int64_t blocks() const { return static_cast<int64_t>(lru_.size()); }

 private:
  struct Entry {
    engine::BlockHash hash;
    engine::KvBlockBytes bytes;
  };

  const int64_t budget_bytes_;
  int64_t bytes_ = 0;
  std::list<Entry> lru_;  // front: least recently used
  absl::flat_hash_map<engine::BlockHash, std::list<Entry>::iterator> index_;
};

}  // namespace tandem::worker

#endif  // TANDEM_WORKER_HOST_TIER_H_
