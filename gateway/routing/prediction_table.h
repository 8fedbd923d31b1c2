// One shard's predictions (gateway/routing/block_index.h): which workers
// the router predicted a block to, and until when, in one flat array of
// records, one a (block, worker), probed linearly from the block's home.
// A worker's report of a block ends its prediction: on the block index's
// apply path, one lookup a stored block that was predicted, which is most
// of them. A general hash map there (its own hash of the key, a group of
// control bytes, then a slot holding a small vector of the block's
// predictions) cost about 15% of applying events (docs/benchmarks.md).
// Here the key is already mixed (HolderTable::Mix), so its bits pick the
// home; a record is the block's key and the worker's id and deadline;
// erasing shifts the run's later records back (no tombstones), so a
// lookup stops at the first empty record. At most half full; it shrinks
// again once a sweep leaves it an eighth full. Thread-compatible: the
// block index holds the shard's lock for every call.
#ifndef TANDEM_GATEWAY_ROUTING_PREDICTION_TABLE_H_
#define TANDEM_GATEWAY_ROUTING_PREDICTION_TABLE_H_

#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/functional/function_ref.h"

namespace tandem::gateway {

class PredictionTable {
 public:
  PredictionTable() = default;
  PredictionTable(const PredictionTable&) = delete;
  PredictionTable& operator=(const PredictionTable&) = delete;

  // The deadline (Unix nanoseconds) of worker `id`'s prediction of
  // `key` (mixed), or null when it has none; valid until the next change.
  int64_t* Find(uint64_t key, uint16_t id) {
    const size_t p = IndexOf(key, id);
    return p == kNone ? nullptr : &records_[p].until_ns;
  }
  // Records `id`'s prediction of `key`, which it has none of; `id` > 0.
  void Insert(uint64_t key, uint16_t id, int64_t until_ns);
  // Ends `id`'s prediction of `key`; false when it had none.
  bool Erase(uint64_t key, uint16_t id) {
    const size_t p = IndexOf(key, id);
    if (p == kNone) return false;
    EraseAt(p);
    return true;
  }
  // Calls f(id, until_ns) for each prediction of `key`.
  template <typename F>
  void ForEachOf(uint64_t key, F&& f) const {
    if (size_ == 0) return;
    for (size_t p = Home(key); records_[p].id != 0; p = (p + 1) & mask_) {
      if (records_[p].key == key) f(records_[p].id, records_[p].until_ns);
    }
  }
  // Erases every prediction gone(id, until_ns) says is, calling
  // erased(key) for each; returns how many went. Shrinks a table left
  // mostly empty.
  int64_t EraseIf(absl::FunctionRef<bool(uint16_t id, int64_t until_ns)> gone,
                  absl::FunctionRef<void(uint64_t key)> erased);

  size_t size() const { return size_; }
  size_t capacity() const { return records_ == nullptr ? 0 : mask_ + 1; }

 private:
  struct Record {
    uint64_t key = 0;  // mixed
    int64_t until_ns = 0;
    uint16_t id = 0;  // 0: empty
  };
  static constexpr size_t kMinCapacity = 16;
  static constexpr size_t kNone = ~size_t{0};
  size_t Home(uint64_t key) const {
    // Bits above the digest's (BlockIndex::Shard::Digest: the low 24) and
    // below the shard's (the top ones).
    return static_cast<size_t>(key >> 24) & mask_;
  }
  // Where (key, id)'s record is, or kNone.
  size_t IndexOf(uint64_t key, uint16_t id) const {
    if (size_ == 0) return kNone;
    for (size_t p = Home(key);; p = (p + 1) & mask_) {
      const Record& r = records_[p];
      if (r.id == 0) return kNone;
      if (r.key == key && r.id == id) return p;
    }
  }
  // Puts `r` in the first empty record from its home (there is one).
  void Place(const Record& r) {
    size_t p = Home(r.key);
    while (records_[p].id != 0) p = (p + 1) & mask_;
    records_[p] = r;
  }
  // Here, not in the .cc: once an event on the index's apply path.
  void EraseAt(size_t p) {
    // Linear probing's deletion: each later record of the run moves back
    // into the hole unless that would put it before its home.
    size_t hole = p;
    for (size_t q = (p + 1) & mask_; records_[q].id != 0; q = (q + 1) & mask_) {
      const size_t home = Home(records_[q].key);
      if (((q - home) & mask_) >= ((q - hole) & mask_)) {
        records_[hole] = records_[q];
        hole = q;
      }
    }
    records_[hole] = Record{};
    --size_;
  }
  // Moves the records to an array of `capacity` (a power of two).
  void Resize(size_t capacity);

  std::unique_ptr<Record[]> records_;
  size_t mask_ = 0;  // capacity - 1
  size_t size_ = 0;
};

}  // namespace tandem::gateway

#endif  // TANDEM_GATEWAY_ROUTING_PREDICTION_TABLE_H_
