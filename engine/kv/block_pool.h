// Bookkeeping for the paged KV cache's blocks: which block ids are free, who
// holds which (refcounts), and which free blocks still hold a reusable full
// block (prefix cache, evicted least recently used first). Integer ids only;
// KvCache owns the memory and indexes it by id. The scheduler allocates
// through the pool and keeps a BlockList per sequence. Engine-thread only:
// no locks.
#ifndef TANDEM_ENGINE_KV_BLOCK_POOL_H_
#define TANDEM_ENGINE_KV_BLOCK_POOL_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "engine/kv/block_hash.h"

namespace tandem::engine {

using BlockId = int32_t;

class BlockPool;

// Move-only handle on an ordered run of blocks (a sequence's block table).
// Holds one reference per entry and releases them on destruction, Reset() or
// truncation. An id may appear in several lists (shared prefix) but a list
// holds each of its entries' references itself. Must not outlive its pool.
class BlockList {
 public:
  // Empty and bound to no pool; Extend() or a move binds it.
  BlockList() = default;
  // Empty and bound to `pool`, ready for Append().
  explicit BlockList(BlockPool* pool) : pool_(pool) {}
  ~BlockList() { Reset(); }

  BlockList(const BlockList&) = delete;
  BlockList& operator=(const BlockList&) = delete;
  // The source is left empty (and still bound to its pool).
  BlockList(BlockList&& other) noexcept;
  BlockList& operator=(BlockList&& other) noexcept;

  // Block ids in sequence order: entry i holds tokens
  // [i * block_size, (i + 1) * block_size).
  const std::vector<BlockId>& ids() const { return ids_; }
  int32_t size() const { return static_cast<int32_t>(ids_.size()); }
  bool empty() const { return ids_.empty(); }
  BlockId operator[](int32_t i) const { return ids_[static_cast<size_t>(i)]; }
  BlockPool* pool() const { return pool_; }

  // Appends `id`, taking over one reference the caller already holds (from
  // BlockPool::AcquireCached or BlockPool::Ref). Needs a bound list.
  void Append(BlockId id);
  // Releases the last block.
  void PopBack();
  // Keeps the first `size` blocks and releases the rest.
  void Truncate(int32_t size);
  // Releases the first `n` blocks (a rolling window dropping its oldest).
  void DropFront(int32_t n);
  // Releases block `index`; the ones after it move down one place (a
  // rolling window dropping its oldest block after a kept prefix).
  void Erase(int32_t index);
  // Releases every block; the list stays bound to its pool.
  void Reset();
  // A second list over the same blocks, with a reference of its own on each
  // (a forked sequence).
  BlockList Share() const;

 private:
  friend class BlockPool;

  BlockPool* pool_ = nullptr;
  std::vector<BlockId> ids_;
};

// Fixed set of `num_blocks` ids, [0, num_blocks). Every block is in exactly
// one state:
//   used:   refcount > 0, held by BlockLists (or a reference in flight);
//   cached: refcount 0 with a hash, in the LRU, evictable;
//   free:   refcount 0 without a hash, on the free list.
// so num_used() + num_free() == num_blocks(), and num_cached() <= num_free().
class BlockPool {
 public:
  // Called for each cached block that an allocation evicts, after its hash is
  // dropped, so that the owner can publish "removed" to the block index. Must
  // not call back into the pool.
  using EvictionCallback = std::function<void(BlockId id, const BlockHash& hash)>;

  explicit BlockPool(int32_t num_blocks);
  // Every block must be released by then (lists must not outlive the pool).
  ~BlockPool();

  BlockPool(const BlockPool&) = delete;
  BlockPool& operator=(const BlockPool&) = delete;

  int32_t num_blocks() const { return static_cast<int32_t>(refcount_.size()); }
  // Allocatable now: the free list plus the evictable cached blocks.
  int32_t num_free() const {
    return static_cast<int32_t>(free_.size()) + num_cached_;
  }
  // Blocks with refcount > 0.
  int32_t num_used() const { return num_blocks() - num_free(); }
  // Free blocks that still hold a hashed (reusable) block.
  int32_t num_cached() const { return num_cached_; }
  // Cached blocks evicted by allocations since construction.
  int64_t evictions() const { return evictions_; }

  // `n` blocks with refcount 1, or nullopt with nothing changed when fewer
  // than `n` are free. Takes the free list first, then evicts cached blocks,
  // least recently released first. n == 0 gives an empty bound list.
  std::optional<BlockList> Allocate(int32_t n);
  // Appends `n` newly allocated blocks to `list` (binding an unbound list to
  // this pool); false with nothing changed when fewer than `n` are free.
  bool Extend(BlockList& list, int32_t n);

  // Prefix caching. Marks used block `id` (a full block, now immutable) as
  // shareable under `hash`. Returns false and leaves `id` private when
  // another block already holds `hash` (two sequences computed the same
  // block); true when registered or already registered under this hash. A
  // block cannot change its hash while it holds one.
  bool SetHash(BlockId id, const BlockHash& hash);
  // The block holding `hash`, with a new reference for the caller (to be
  // handed to BlockList::Append); a cached block leaves the LRU. nullopt on
  // a miss.
  std::optional<BlockId> AcquireCached(const BlockHash& hash);
  // Whether some block (used or cached) holds `hash`; takes no reference.
  bool ContainsHash(const BlockHash& hash) const { return by_hash_.contains(hash); }
  // The block holding `hash` (used or cached), without taking a reference:
  // for reading it now, on the engine thread.
  std::optional<BlockId> FindHash(const BlockHash& hash) const {
    const auto it = by_hash_.find(hash);
    return it == by_hash_.end() ? std::nullopt : std::optional<BlockId>(it->second);
  }
  // One more reference on used block `id` (to Append to another list).
  void Ref(BlockId id);

  int32_t refcount(BlockId id) const;
  // The block's hash, if it has one.
  std::optional<BlockHash> hash(BlockId id) const;
  // A draft model's half of a hashed block (its layers after the model's,
  // KvCacheOptions::extra_layers) not computed yet: the draft puts a
  // decoding sequence's KV off until it proposes (Engine::RunDraft). Set on
  // a block with a hash; cleared when the draft fills it or the block loses
  // its hash.
  void SetDraftMissing(BlockId id, bool missing);
  bool draft_missing(BlockId id) const;

  void set_eviction_callback(EvictionCallback callback) {
    on_evict_ = std::move(callback);
  }

 private:
  friend class BlockList;

  static constexpr BlockId kNone = -1;

  // Drops one reference; at zero the block goes to the LRU's most recent end
  // if hashed, else to the free list.
  void Release(BlockId id);
  // Takes `n` blocks (refcount 1) into `out`; caller checked n <= num_free().
  void TakeBlocks(int32_t n, std::vector<BlockId>& out);
  void CheckId(BlockId id) const;

  void LruPushBack(BlockId id);
  void LruRemove(BlockId id);

  std::vector<int32_t> refcount_;
  // Free, unhashed blocks; the back is handed out first.
  std::vector<BlockId> free_;

  // Hash of each block, valid where has_hash_ is set.
  std::vector<BlockHash> hash_;
  std::vector<bool> has_hash_;
  std::vector<bool> draft_missing_;
  absl::flat_hash_map<BlockHash, BlockId> by_hash_;

  // Intrusive doubly linked LRU over cached blocks: head = least recently
  // released (evicted first). prev_/next_ are kNone at the ends and for
  // blocks not in the LRU.
  std::vector<BlockId> lru_prev_;
  std::vector<BlockId> lru_next_;
  BlockId lru_head_ = kNone;
  BlockId lru_tail_ = kNone;
  int32_t num_cached_ = 0;

  int64_t evictions_ = 0;
  EvictionCallback on_evict_;
};

}  // namespace tandem::engine

#endif  // TANDEM_ENGINE_KV_BLOCK_POOL_H_
