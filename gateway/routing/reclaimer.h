// Epoch-based reclamation for the block index's readers, which walk its
// tables without taking a lock (gateway/routing/block_index.h): a writer
// that unlinks memory a reader may still be reading (a spilled holder set
// it replaced, a slot table it outgrew) retires it to a Limbo instead of
// freeing it, and the Limbo frees it once every reader that might have
// seen it has left.
//
// Readers enter a ReadSection per route: an increment and a decrement of
// a counter for the epoch they entered in (one of two, by its parity), so
// a route costs two atomic adds, not one per block. The epoch advances
// only when no reader of the epoch before the current one is left; memory
// retired in epoch e is freed from epoch e + 2, by when every reader that
// entered in e or earlier has left. A reader that stalls holds the epoch
// (and the memory retired meanwhile) back, never a writer.
#ifndef TANDEM_GATEWAY_ROUTING_RECLAIMER_H_
#define TANDEM_GATEWAY_ROUTING_RECLAIMER_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>

namespace tandem::gateway {

class Reclaimer {
 public:
  Reclaimer() = default;
  Reclaimer(const Reclaimer&) = delete;
  Reclaimer& operator=(const Reclaimer&) = delete;

  // While one lives, nothing retired after it began is freed.
  class ReadSection {
   public:
    explicit ReadSection(const Reclaimer& reclaimer);
    ~ReadSection();
    ReadSection(const ReadSection&) = delete;
    ReadSection& operator=(const ReadSection&) = delete;

   private:
    const Reclaimer& reclaimer_;
    int parity_;
  };

  // One writer's retired allocations (a shard's: its writers hold the
  // shard's lock), in the order retired. Thread-compatible.
  class Limbo {
   public:
    Limbo() = default;
    // Frees everything still held: no reader may be left by then.
    ~Limbo();
    Limbo(const Limbo&) = delete;
    Limbo& operator=(const Limbo&) = delete;

    // Must be called before the first Retire.
    void Attach(Reclaimer* reclaimer) { reclaimer_ = reclaimer; }
    // Takes `p` (`bytes` long), already unlinked from everything a reader
    // could reach from now on, to free with `free` (null: ::operator
    // delete).
    void Retire(void* p, size_t bytes, void (*free)(void* p, size_t bytes) = nullptr);
    // Retire, to free with free_in(context, p, bytes).
    void Retire(void* p, size_t bytes, void (*free_in)(void* context, void* p, size_t bytes),
                void* context);
    // Frees now what was retired with `context`, whose owner is going:
    // no reader may be left.
    void FreeAllOf(const void* context);
    // Frees what no reader can hold any more; once enough waits, tries to
    // advance the epoch so that it can go. Cheap when empty.
    void Collect() {
      if (!items_.empty()) CollectSome();
    }
    size_t pending() const { return items_.size(); }
    // pending() > 0, without a deque's count (once a shard run).
    bool has_pending() const { return !items_.empty(); }
    size_t pending_bytes() const { return bytes_; }

   private:
    struct Item {
      void* p;
      size_t bytes;
      void (*free)(void* p, size_t bytes);  // null: ::operator delete, or free_in
      void (*free_in)(void* context, void* p, size_t bytes);
      void* context;
      uint64_t epoch = 0;  // retired in
      void Free() const;
    };
    // Holds `item`, retired now.
    void Hold(Item item);
    void CollectSome();
    Reclaimer* reclaimer_ = nullptr;
    std::deque<Item> items_;
    size_t bytes_ = 0;
  };

  uint64_t epoch() const { return epoch_.load(std::memory_order_acquire); }
  // Advances the epoch as far as the readers in allow (two epochs when
  // none is), so that what limbos hold goes at their next Collect. A writer
  // calls it once per batch of changes (it writes a line every reader
  // reads).
  void Advance() {
    TryAdvance(epoch());
    TryAdvance(epoch());
  }

 private:
  // Advances the epoch from `from`, unless a reader of the epoch before it
  // is still in (or another writer advanced it first).
  void TryAdvance(uint64_t from);

  std::atomic<uint64_t> epoch_{2};
  // Readers in, by the parity of the epoch they entered in; on a line of
  // their own, since every route writes one.
  alignas(64) mutable std::atomic<int64_t> readers_[2] = {};
};

}  // namespace tandem::gateway

#endif  // TANDEM_GATEWAY_ROUTING_RECLAIMER_H_
