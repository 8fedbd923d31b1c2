// The cache tiers below the engine's KV pool, as the engine sees them: a
// full block the pool evicts is offered to them (demotion), a block the pool
// hashes is offered too (a write-through tier keeps it from the start), and
// a prompt's leading blocks the pool lacks are looked up in them and copied
// back into pool blocks before the sequence runs (promotion). The tiers
// themselves (host RAM, disk files) live in the worker runtime
// (worker/kv_tiers.h); the engine only calls this interface. Engine-thread
// only: every method is called from the engine's thread.
#ifndef TANDEM_ENGINE_KV_KV_TIER_H_
#define TANDEM_ENGINE_KV_KV_TIER_H_

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

#include "engine/kv/block_hash.h"
#include "engine/kv/kv_snapshot.h"

namespace tandem::engine {

// Where a block lies, fastest first. kDevice is the engine's pool (GPU memory
// on a GPU worker).
enum class KvTier : uint8_t { kDevice = 0, kHost = 1, kDisk = 2 };
inline constexpr int kNumKvTiers = 3;

inline std::string_view KvTierName(KvTier tier) {
  switch (tier) {
    case KvTier::kDevice:
      return "device";
    case KvTier::kHost:
      return "host";
    case KvTier::kDisk:
      return "disk";
  }
  return "unknown";
}

// A block found in a lower tier: its bytes (the engine's block layout,
// exactly one block) and the tier that held it.
struct TierBlock {
  KvTier tier = KvTier::kHost;
  KvBlockBytes bytes;
};

class KvTierStore {
 public:
  virtual ~KvTierStore() = default;

  // Pool block `hash` was just hashed (it is full and will never be written
  // again); `block` is its memory. A tier that keeps it copies the bytes now:
  // the span is only valid during the call.
  virtual void OnStored(const BlockHash& hash, const BlockHash& parent, int32_t block_index,
                        std::span<const uint8_t> block) = 0;
  // Pool block `hash` is being evicted: its memory is reused right after the
  // call, so a tier that keeps it copies the bytes now.
  virtual void OnEvicted(const BlockHash& hash, std::span<const uint8_t> block) = 0;
  // The block under `hash` from the fastest tier holding it, or nullopt on a
  // miss. A copy that fails verification is dropped, counted and reported as
  // a miss, never returned. Changes nothing else: see Promoted().
  virtual std::optional<TierBlock> Lookup(const BlockHash& hash) = 0;
  // The block Lookup() returned from `from` was copied into the pool.
  virtual void Promoted(const BlockHash& hash, KvTier from) = 0;
};

}  // namespace tandem::engine

#endif  // TANDEM_ENGINE_KV_KV_TIER_H_
