#include "engine/kv/block_pool.h"

#include <algorithm>
#include <utility>

#include "common/check.h"

namespace tandem::engine {

// --- BlockList ---------------------------------------------------------------

BlockList::BlockList(BlockList&& other) noexcept
    : pool_(other.pool_), ids_(std::move(other.ids_)) {
  other.ids_.clear();
}

BlockList& BlockList::operator=(BlockList&& other) noexcept {
  if (this != &other) {
    Reset();
    pool_ = other.pool_;
    ids_ = std::move(other.ids_);
    other.ids_.clear();
  }
  return *this;
}

void BlockList::Append(BlockId id) {
  TANDEM_CHECK(pool_ != nullptr, "Append needs a list bound to a pool");
  TANDEM_CHECK(pool_->refcount(id) > 0,
               "an appended block must carry the caller's reference");
  ids_.push_back(id);
}

void BlockList::PopBack() {
  TANDEM_CHECK(!ids_.empty(), "PopBack on an empty block list");
  pool_->Release(ids_.back());
  ids_.pop_back();
}

void BlockList::Truncate(int32_t size) {
  TANDEM_CHECK(size >= 0 && size <= this->size(),
               "Truncate size outside [0, size()]");
  // Back to front, so that a sequence's later blocks reach the LRU first and
  // are evicted before its (more shareable) earlier ones.
  while (this->size() > size) PopBack();
}

void BlockList::DropFront(int32_t n) {
  TANDEM_CHECK(n >= 0 && n <= size(), "DropFront count outside [0, size()]");
  for (int32_t i = n - 1; i >= 0; --i) pool_->Release(ids_[static_cast<size_t>(i)]);
  ids_.erase(ids_.begin(), ids_.begin() + n);
}

void BlockList::Erase(int32_t index) {
  TANDEM_CHECK(index >= 0 && index < size(), "Erase index outside [0, size())");
  pool_->Release(ids_[static_cast<size_t>(index)]);
  ids_.erase(ids_.begin() + index);
}

void BlockList::Reset() { Truncate(0); }

BlockList BlockList::Share() const {
  BlockList copy(pool_);
  copy.ids_.reserve(ids_.size());
  for (const BlockId id : ids_) {
    pool_->Ref(id);
    copy.ids_.push_back(id);
  }
  return copy;
}

// --- BlockPool ---------------------------------------------------------------

BlockPool::BlockPool(int32_t num_blocks)
    : refcount_(static_cast<size_t>(std::max(num_blocks, 0)), 0),
      hash_(refcount_.size()),
      has_hash_(refcount_.size(), false),
      draft_missing_(refcount_.size(), false),
      lru_prev_(refcount_.size(), kNone),
      lru_next_(refcount_.size(), kNone) {
  TANDEM_CHECK(num_blocks >= 0, "negative block count");
  // Handed out from the back: ids come out 0, 1, 2, ... from a fresh pool.
  free_.reserve(refcount_.size());
  for (BlockId id = num_blocks - 1; id >= 0; --id) free_.push_back(id);
}

BlockPool::~BlockPool() {
  TANDEM_CHECK(num_used() == 0,
               "BlockPool destroyed while blocks are held; BlockLists must "
               "not outlive their pool")
      << num_used() << " of " << num_blocks() << " blocks in use";
}

std::optional<BlockList> BlockPool::Allocate(int32_t n) {
  TANDEM_CHECK(n >= 0, "negative block count");
  if (n > num_free()) return std::nullopt;
  BlockList list(this);
  TakeBlocks(n, list.ids_);
  return list;
}

bool BlockPool::Extend(BlockList& list, int32_t n) {
  TANDEM_CHECK(n >= 0, "negative block count");
  TANDEM_CHECK(list.pool_ == nullptr || list.pool_ == this,
               "list belongs to another pool");
  if (n > num_free()) return false;
  list.pool_ = this;
  TakeBlocks(n, list.ids_);
  return true;
}

void BlockPool::TakeBlocks(int32_t n, std::vector<BlockId>& out) {
  out.reserve(out.size() + static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i) {
    BlockId id;
    if (!free_.empty()) {
      id = free_.back();
      free_.pop_back();
    } else {
      TANDEM_CHECK(lru_head_ != kNone, "allocation exceeded num_free()");
      id = lru_head_;
      LruRemove(id);
      const BlockHash hash = hash_[static_cast<size_t>(id)];
      by_hash_.erase(hash);
      has_hash_[static_cast<size_t>(id)] = false;
      ++evictions_;
      // The callback may still ask whether the draft's half was there.
      if (on_evict_) on_evict_(id, hash);
      draft_missing_[static_cast<size_t>(id)] = false;
    }
    refcount_[static_cast<size_t>(id)] = 1;
    out.push_back(id);
  }
}

bool BlockPool::SetHash(BlockId id, const BlockHash& hash) {
  CheckId(id);
  const size_t i = static_cast<size_t>(id);
  TANDEM_CHECK(refcount_[i] > 0, "only a held block can be given a hash");
  if (has_hash_[i]) {
    TANDEM_CHECK(hash_[i] == hash, "a block's hash is fixed once set");
    return true;
  }
  if (by_hash_.contains(hash)) return false;
  hash_[i] = hash;
  has_hash_[i] = true;
  by_hash_.emplace(hash, id);
  return true;
}

std::optional<BlockId> BlockPool::AcquireCached(const BlockHash& hash) {
  const auto it = by_hash_.find(hash);
  if (it == by_hash_.end()) return std::nullopt;
  const BlockId id = it->second;
  const size_t i = static_cast<size_t>(id);
  if (refcount_[i] == 0) LruRemove(id);
  ++refcount_[i];
  return id;
}

void BlockPool::Ref(BlockId id) {
  CheckId(id);
  TANDEM_CHECK(refcount_[static_cast<size_t>(id)] > 0,
               "Ref needs a used block; take cached ones with AcquireCached");
  ++refcount_[static_cast<size_t>(id)];
}

int32_t BlockPool::refcount(BlockId id) const {
  CheckId(id);
  return refcount_[static_cast<size_t>(id)];
}

std::optional<BlockHash> BlockPool::hash(BlockId id) const {
  CheckId(id);
  const size_t i = static_cast<size_t>(id);
  if (!has_hash_[i]) return std::nullopt;
  return hash_[i];
}

void BlockPool::SetDraftMissing(BlockId id, bool missing) {
  CheckId(id);
  TANDEM_CHECK(!missing || has_hash_[static_cast<size_t>(id)],
               "only a hashed block is marked as lacking the draft's KV");
  draft_missing_[static_cast<size_t>(id)] = missing;
}

bool BlockPool::draft_missing(BlockId id) const {
  CheckId(id);
  return draft_missing_[static_cast<size_t>(id)];
}

void BlockPool::Release(BlockId id) {
  CheckId(id);
  const size_t i = static_cast<size_t>(id);
  TANDEM_CHECK(refcount_[i] > 0, "block released more often than referenced");
  if (--refcount_[i] > 0) return;
  if (has_hash_[i]) {
    LruPushBack(id);
  } else {
    free_.push_back(id);
  }
}

void BlockPool::CheckId(BlockId id) const {
  TANDEM_CHECK(id >= 0 && id < num_blocks(), "block id out of range") << id;
}

void BlockPool::LruPushBack(BlockId id) {
  const size_t i = static_cast<size_t>(id);
  lru_prev_[i] = lru_tail_;
  lru_next_[i] = kNone;
  if (lru_tail_ != kNone) {
    lru_next_[static_cast<size_t>(lru_tail_)] = id;
  } else {
    lru_head_ = id;
  }
  lru_tail_ = id;
  ++num_cached_;
}

void BlockPool::LruRemove(BlockId id) {
  const size_t i = static_cast<size_t>(id);
  const BlockId prev = lru_prev_[i];
  const BlockId next = lru_next_[i];
  if (prev != kNone) {
    lru_next_[static_cast<size_t>(prev)] = next;
  } else {
    lru_head_ = next;
  }
  if (next != kNone) {
    lru_prev_[static_cast<size_t>(next)] = prev;
  } else {
    lru_tail_ = prev;
  }
  lru_prev_[i] = kNone;
  lru_next_[i] = kNone;
  --num_cached_;
}

}  // namespace tandem::engine
