// One shard of the gateway's block index (gateway/routing/block_index.h): an
// open-addressing table from a block's 64-bit key to the workers holding it,
// each with the tiers it holds the block in. A slot is 16 bytes (the key and
// one word of holders: up to three inline; more spill to one allocation the
// word points to, a list of 2 bytes per holder or, for a block many hold,
// bitmaps over the workers), so a (block, worker) entry costs no map node
// of its own, and a reader reaches any holder set in two loads (the slot,
// then its spill), which FindHoldersConcurrent starts ahead of a walk. Spills come
// from the table's own arena (gateway/routing/spill_arena.h), on huge pages
// once there are a few MiB of them. Robin Hood
// probing with backward-shift deletion keeps misses short; the table grows
// by a quarter once 65% full, so it is between 52% and 65% full once it
// has grown. What a change costs rises steeply with how full the table is
// (a new key moves the rest of its run along to the run's first empty
// slot, about (1 + 1/(1-load)^2)/2 slots on): at 74% full a change took
// twice what it did at 52%. Growing by half again at 3/4 full (50-75%)
// left both an event's cost and an entry's bytes to where in that range a
// table happened to be; with 56-70%, a fleet of 100M entries had every
// shard at 69% and applied a fifth fewer events a second than at 60%
// (docs/benchmarks.md).
//
// Eviction is CLOCK with a count (between LRU and LFU): a lookup or a store
// counts a use of the key (up to 3), the hand takes one off each key it
// passes and evicts the first it finds at 0, so a block routed to often
// outlives one stored once. Thread-compatible, but for readers: the block
// index holds the shard's lock for every call except its lock-free readers'
// (VisitConcurrent, Prefetch, FindHoldersConcurrent), which run inside a
// Reclaimer::ReadSection beside the writer and check the shard's version
// after; with a Limbo set, the table retires what it frees (spills,
// an outgrown slot array) there, so that what such a reader reached stays
// allocated until it leaves. Readers count uses through atomics.
#ifndef TANDEM_GATEWAY_ROUTING_HOLDER_TABLE_H_
#define TANDEM_GATEWAY_ROUTING_HOLDER_TABLE_H_

#include <algorithm>
#include <atomic>
#include <bit>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "absl/functional/function_ref.h"
#include "gateway/routing/huge_pages.h"
#include "gateway/routing/reclaimer.h"
#include "gateway/routing/seq_lock.h"
#include "gateway/routing/spill_arena.h"

namespace tandem::gateway {

class HolderTable {
  struct Slot;  // a key and its holders (below)

 public:
  // Where a lock-free reader found a key (FindHoldersConcurrent), for a
  // VisitConcurrentAt while the table is unchanged (the shard's version has
  // not moved). A growth moves no version: a slot kept across one is in the
  // outgrown array, which holds the same keys and holders and stays
  // allocated while the reader's Reclaimer::ReadSection lasts (a use
  // counted there is lost, as one a writer overwrites is).
  class Found {
   public:
    Found() = default;

   private:
    friend class HolderTable;
    explicit Found(const Slot* slot) : slot_(slot) {}
    const Slot* slot_ = nullptr;  // null: absent
  };
  // A holder: a worker's compact id (1..kMaxId) and its tier bits (bit t:
  // tier t) above it.
  using Holder = uint16_t;
  static constexpr int kIdBits = 13;
  static constexpr uint16_t kMaxId = (1u << kIdBits) - 1;
  static constexpr int kMaxTiers = 16 - kIdBits;
  static uint16_t IdOf(Holder h) { return h & kMaxId; }
  static uint8_t TiersOf(Holder h) { return static_cast<uint8_t>(h >> kIdBits); }
  // The key's bits mixed (splitmix64's finalizer): block keys are hashes
  // already, but tests and tools use small numbers. The top bits pick the
  // block index's shard, the rest the slot.
  static uint64_t Mix(uint64_t x) {
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
  }
  // A key mixed once, for readers that pass it to several calls.
  struct Mixed {
    uint64_t v;
  };
  static Mixed MixKey(uint64_t key) { return Mixed{Mix(key)}; }

  // `capacity`: slots to start with (at least 4).
  explicit HolderTable(size_t capacity = 16);
  // Frees through `limbo` (which must outlive the table) from now on
  // (null: at once).
  void set_limbo(Reclaimer::Limbo* limbo) { limbo_ = limbo; }
  // Spills from `pages` (which must outlive the table) rather than the
  // heap; before the first spill.
  void set_spill_pages(SpillPages* pages) { arena_.set_pages(pages); }
  ~HolderTable();
  HolderTable(const HolderTable&) = delete;
  HolderTable& operator=(const HolderTable&) = delete;

  // Records worker `id` holding `key` in `tier`; true when the (key, id)
  // entry is new. Counts a use of the key.
  bool Add(uint64_t key, uint16_t id, int tier) { return Add(MixKey(key), id, tier); }
  bool Add(Mixed key, uint16_t id, int tier) {
    // Grown first if a new key would make it grow, so that a new key goes
    // where the lookup stopped, without a second probe.
    Reserve(1);
    return AddReserved(key, id, tier);
  }
  // Add, once Reserve(1) has made room for a new key (a writer that grows
  // the table before a change readers must not see half done).
  bool AddReserved(Mixed key, uint16_t id, int tier);
  // Clears `tier` of (key, id); true when the entry went (no tier left).
  bool Remove(uint64_t key, uint16_t id, int tier) { return Remove(MixKey(key), id, tier); }
  bool Remove(Mixed key, uint16_t id, int tier);
  // A popular block's holders as bitmaps: a plane for each tier some
  // holder holds it in (`planes`, bit t: tier t), so a block held only in
  // the pool, as most are, costs a bit per worker rather than one per
  // worker and tier. Planes are interleaved by word: word w of the k-th
  // plane present is bits[w * PlaneCount(planes) + k]; bit b of word w is
  // worker id 64w + b.
  struct Bitmap {
    const uint64_t* bits;
    size_t words;
    uint8_t planes;
  };
  // std::popcount of kMaxTiers bits, from a nibble table: a build for
  // any x86-64 makes std::popcount a library call, one for each holder
  // an event adds to a bitmap.
  static int PlaneCount(uint8_t planes) {
    static_assert(kMaxTiers == 3, "a nibble for each of the 8 sets of planes");
    return static_cast<int>((0x32212110u >> (4 * (planes & 7u))) & 0xfu);
  }
  // Counts a use of `key` and calls on_list(std::span<const Holder>) or,
  // for a block with many holders, on_bitmap(Bitmap); false when no worker
  // holds it (neither is called).
  template <typename OnList, typename OnBitmap>
  bool Visit(uint64_t key, OnList&& on_list, OnBitmap&& on_bitmap) const {
    const size_t p = Find(key);
    if (p == kNone) return false;
    VisitAt(p, on_list, on_bitmap);
    return true;
  }
  // Calls on_holder(id, tier_bits) for each holder of `key` and counts a
  // use of it; false when no worker holds it.
  template <typename F>
  bool ForEachHolder(uint64_t key, F&& on_holder) const {
    const size_t p = Find(key);
    if (p == kNone) return false;
    ForEachHolderAt(p, on_holder);
    return true;
  }
  // Visit's work on slot p (which holds a key).
  template <typename OnList, typename OnBitmap>
  void VisitAt(size_t p, OnList&& on_list, OnBitmap&& on_bitmap) const {
    // Lock-free readers may count a use at once: through atomics.
    std::atomic_ref<uint64_t> shared(slots_[p].holders);
    const uint64_t w = shared.load(std::memory_order_relaxed);
    if ((w & kUses) != kUses) shared.store(w + kOneUse, std::memory_order_relaxed);
    if (Spilled(w)) {
      const Spill& s = *SpillOf(w);
      if (s.IsBitmap()) {
        on_bitmap(BitmapOf(s));
      } else {
        on_list(std::span<const Holder>(s.list(), s.count));
      }
      return;
    }
    Holder inline_holders[kInline];
    size_t n = 0;
    for (int i = 0; i < kInline; ++i) {
      if (InlineAt(w, i) != 0) inline_holders[n++] = InlineAt(w, i);
    }
    on_list(std::span<const Holder>(inline_holders, n));
  }
  // ForEachHolder's work on slot p (which holds a key).
  template <typename F>
  void ForEachHolderAt(size_t p, F&& on_holder) const {
    VisitAt(
        p,
        [&](std::span<const Holder> list) {
          for (Holder h : list) on_holder(IdOf(h), TiersOf(h));
        },
        [&](Bitmap b) {
          for (size_t i = 0; i < b.words; ++i) {
            for (uint64_t any = AnyTier(b, i); any != 0; any &= any - 1) {
              const uint16_t id = static_cast<uint16_t>(64 * i + std::countr_zero(any));
              on_holder(id, BitmapTiers(b, id));
            }
          }
        });
  }
  // Visit for a reader without the shard's lock, inside a
  // Reclaimer::ReadSection, while writers may change the table: what it
  // passes on is whatever it read, torn or not (the caller checks the
  // shard's version afterwards and reads again when it moved), and every
  // read stays within memory still allocated. Counts a use only where the
  // slot still holds what it read.
  template <typename OnList, typename OnBitmap>
  bool VisitConcurrent(Mixed key, OnList&& on_list, OnBitmap&& on_bitmap) const {
    return VisitSlotConcurrent(FindConcurrent(key), on_list, on_bitmap);
  }
  // VisitConcurrent's work where FindHoldersConcurrent found the key, the
  // table unchanged since.
  template <typename OnList, typename OnBitmap>
  bool VisitConcurrentAt(Found found, OnList&& on_list, OnBitmap&& on_bitmap) const {
    return VisitSlotConcurrent(found.slot_, on_list, on_bitmap);
  }
  // Word `i` of the holders in any tier, and in tier `t`. Bitmaps are
  // read through relaxed atomics, since lock-free readers read them while a
  // writer may write.
  static uint64_t AnyTier(Bitmap b, size_t i) {
    const int n = PlaneCount(b.planes);
    uint64_t any = 0;
    for (int k = 0; k < n; ++k) any |= Load(b.bits[i * n + k]);
    return any;
  }
  static uint64_t TierWord(Bitmap b, size_t i, int t) {
    if (((b.planes >> t) & 1) == 0) return 0;
    const int k = PlaneCount(static_cast<uint8_t>(b.planes & ((1u << t) - 1)));
    return Load(b.bits[i * PlaneCount(b.planes) + k]);
  }
  static uint8_t BitmapTiers(Bitmap b, uint16_t id) {
    uint8_t tiers = 0;
    for (int t = 0; t < kMaxTiers; ++t) {
      if ((TierWord(b, id / 64, t) >> (id % 64)) & 1) tiers |= 1u << t;
    }
    return tiers;
  }
  // A relaxed atomic load of a word writers change in place.
  template <typename T>
  static T Load(const T& x) {
    return __atomic_load_n(&x, __ATOMIC_RELAXED);
  }
  // Whether worker `id` holds `key` in any tier (marks nothing).
  bool Holds(uint64_t key, uint16_t id) const;
  // Holds where FindHoldersConcurrent found the key, the table unchanged
  // since (see Found).
  bool Holds(Found found, uint16_t id) const {
    return found.slot_ != nullptr && HoldsAt(*found.slot_, id);
  }
  // Takes the workers `ids` off every key in one pass, calling
  // on_removed(id) for each entry removed; returns how many were. Stops once
  // `expected` are (their entries in this table, if known). With `changes`
  // (held by the caller), marks each key's removals a change on it, and
  // only those: lock-free readers read while it looks.
  int64_t RemoveWorkers(std::span<const uint16_t> ids, int64_t expected, SeqLock* changes,
                        absl::FunctionRef<void(uint16_t id)> on_removed);
  // RemoveWorkers for one worker.
  int64_t RemoveWorker(uint16_t id, int64_t expected = INT64_MAX, SeqLock* changes = nullptr) {
    return RemoveWorkers(std::span(&id, 1), expected, changes, [](uint16_t) {});
  }
  // Grows now if `more` new keys would make it grow. A growth fills a new
  // slot array that lock-free readers do not see until it is whole (the
  // old one stays as it was), so it is no change they must not see half
  // done.
  void Reserve(size_t more) {
    if ((size_ + more) * kLoadDenominator > capacity_ * kLoadNumerator) Grow();
  }
  // Evicts the first key the clock hand finds with no use left, calling
  // on_holder(id) for each of its holders; returns them. 0: the table is
  // empty, or the hand passed `max_visits` keys that all had uses left.
  template <typename F>
  int64_t EvictOne(F&& on_holder, size_t max_visits = SIZE_MAX) {
    if (size_ == 0) return 0;
    for (size_t visits = 0;;) {
      if (hand_ >= capacity_) hand_ = 0;
      const size_t p = hand_;
      if (slots_[p].holders != 0) {
        if (visits++ == max_visits) return 0;
        if ((slots_[p].holders & kUses) != 0) {
          slots_[p].holders -= kOneUse;
        } else {
          int64_t n = 0;
          ForEachHolderAt(p, [&](uint16_t id, uint8_t) {
            on_holder(id);
            ++n;
          });
          FreeSpill(slots_[p].holders);
          Erase(p);  // the hand stays: a later key may have shifted into p
          return n;
        }
      }
      ++hand_;
    }
  }

  // Starts loading the slot where `key` would be. Safe without the lock:
  // it reads the table's location through atomics and never dereferences
  // (a stale location costs only a useless prefetch).
  void Prefetch(Mixed key) const {
    const Slot* slots = slots_view_.load(std::memory_order_relaxed);
    const size_t capacity = capacity_view_.load(std::memory_order_relaxed);
    if (slots == nullptr) return;
    const size_t home = HomeIn(key.v, capacity);
    __builtin_prefetch(slots + home);
    // At 56-70% full, 41-57% of the keys whose home is a line's last slot
    // sit on the next line (16-27% of all keys off their home's line; a
    // little fewer at 52-65%): a load the walk would otherwise wait for
    // (docs/benchmarks.md).
    if ((reinterpret_cast<uintptr_t>(slots + home + 1) & 63) == 0 && home + 1 < capacity) {
      __builtin_prefetch(slots + home + 1);
    }
  }
  // Prefetch for a writer about to change `key`'s slot (no lock needed
  // either): the slot's line and the three after it, to be written, and the
  // table's own state. A new key goes past the keys from its home on, and
  // the ones after it move along; an erased key's followers move back. At
  // 52-65% full those runs often reach past the slot's line, and a
  // removal's slot, last touched when its block was stored, is cold: four
  // lines rather than two took an event 2-5% less time on the Intel Xeon
  // VM, at 2M entries and at 100M (docs/benchmarks.md). Loaded as for a
  // read (prefetcht0), which is what a plain x86-64 build makes of a
  // write hint anyway: asking for ownership at once (PREFETCHW) took the
  // lines routes read on the other core, and was slower for events and
  // routes alike (docs/benchmarks.md).
  void PrefetchForWrite(Mixed key) const {
    const Slot* slots = slots_view_.load(std::memory_order_relaxed);
    const size_t capacity = capacity_view_.load(std::memory_order_relaxed);
    if (slots == nullptr) return;
    const size_t home = HomeIn(key.v, capacity);
    for (size_t line = 0; line < kLinesForWrite; ++line) {
      if (home + line * kSlotsPerLine < capacity) {
        __builtin_prefetch(slots + home + line * kSlotsPerLine);
      }
    }
    __builtin_prefetch(&capacity_);  // the writers' state
  }
  // Starts loading what Prefetch reads (no lock needed).
  void PrefetchHeader() const { __builtin_prefetch(&slots_view_); }
  // Starts loading `key`'s spilled holders, when it has them (the second
  // load of a Visit), without reading them; best once Prefetch(key) has
  // brought the slot in. For the readers of VisitConcurrent (or under the
  // lock). Returns where it found `key` (or that it did not), for a
  // VisitConcurrentAt while the table has not changed: a walk's one probe
  // of the key.
  Found FindHoldersConcurrent(Mixed key) const;
  // Where `key` is now, for a lock-free reader (FindHoldersConcurrent
  // without the holders' load).
  Found FindForReaders(Mixed key) const { return Found(FindConcurrent(key)); }

  size_t size() const { return size_; }  // keys
  size_t capacity() const { return capacity_; }
  // Bytes this table holds: its slots, and its spills' arena.
  size_t MemoryBytes() const;
  // Bytes of the spills now in use, headers included (within the arena's).
  size_t spill_bytes() const { return spill_bytes_; }
  // What this table's growths have cost so far: each moves every key into a
  // fresh slot array, whose pages the kernel zeroes as they are first
  // written (docs/benchmarks.md: on a VM that is most of a growth's time).
  struct Growths {
    int64_t count = 0;
    int64_t keys_moved = 0;
    int64_t nanos = 0;  // the steady clock's, allocation and page faults included
  };
  const Growths& growths() const { return growths_; }

 private:
  static constexpr int kInline = 3;
  // The most a table is full before it grows: 13/20.
  static constexpr size_t kLoadNumerator = 13;
  static constexpr size_t kLoadDenominator = 20;
  static constexpr uint64_t kSpillBit = uint64_t{1} << 63;
  // The clock's count of uses since the hand last passed, saturating at 3.
  static constexpr uint64_t kOneUse = uint64_t{1} << 61;
  static constexpr uint64_t kUses = uint64_t{3} << 61;
  // A spill's address, and (above it) how many cache lines it spans, up
  // to 15, for FindHoldersConcurrent.
  static constexpr int kLinesShift = 57;
  static constexpr uint64_t kPointerBits = (uint64_t{1} << kLinesShift) - 1;
  static constexpr uint64_t kMaxLines = 15;
  // In a spilled word, below the address (a spill's header is 16-byte
  // aligned): a lined bitmap (NewBitmap), read without its header.
  static constexpr uint64_t kLinedBit = 1;
  static constexpr size_t kNone = ~size_t{0};
  // Empty: holders == 0. Inline: holders 0..2 in bits 0..47 (0 = none).
  // Spilled: kSpillBit | the Spill's address (bits 0..56: user-space
  // addresses are below 2^57) | its lines (bits 57..60) | kLinedBit for
  // a lined bitmap, whose lines are then those of its bits. Either way
  // kUses: the clock's count. Writers hold the shard's lock and use plain
  // accesses; readers read through atomics and count a use with a
  // compare-and-swap that fails if the word changed since they read it (a
  // count lost to a writer or another reader: no matter), so a reader never
  // writes back a word a writer has replaced.
  struct Slot {
    uint64_t key;  // mixed
    uint64_t holders;
  };
  static constexpr size_t kSlotsPerLine = 64 / sizeof(Slot);
  static constexpr size_t kLinesForWrite = 4;  // PrefetchForWrite's, from the home's
  // A holder set past kInline, in one allocation: this header, then a list
  // (`count` holders) or, once the list would be a quarter of their size (a
  // block many workers hold), bitmaps (`words` words of 64 workers, each a
  // uint64 per plane: see Bitmap).
  struct Spill {
    uint32_t count;     // holders, either way
    uint32_t capacity;  // bytes after the header; never changes
    uint32_t words;     // 0: a list
    uint16_t planes;    // bitmaps: the tiers with a plane (Bitmap::planes)
    // A lined bitmap's (NewBitmap; else 0): bytes of its allocation before
    // the header, and in all beyond the header and capacity.
    uint8_t lead;
    uint8_t slack;
    bool IsBitmap() const { return words != 0; }
    size_t UsedBytes() const {
      return IsBitmap()
                 ? size_t{words} * PlaneCount(static_cast<uint8_t>(planes)) * sizeof(uint64_t)
                 : count * sizeof(Holder);
    }
    Holder* list() { return reinterpret_cast<Holder*>(this + 1); }
    const Holder* list() const { return reinterpret_cast<const Holder*>(this + 1); }
    uint64_t* bits() { return reinterpret_cast<uint64_t*>(this + 1); }
    const uint64_t* bits() const { return reinterpret_cast<const uint64_t*>(this + 1); }
  };
  static_assert(sizeof(Spill) % alignof(uint64_t) == 0);
  static bool Spilled(uint64_t w) { return (w & kSpillBit) != 0; }
  static Spill* SpillOf(uint64_t w) {
    return reinterpret_cast<Spill*>(w & kPointerBits & ~kLinedBit);
  }
  static size_t LinesOf(uint64_t w) { return static_cast<size_t>((w >> kLinesShift) & kMaxLines); }
  static Holder InlineAt(uint64_t w, int i) { return static_cast<Holder>(w >> (16 * i)); }
  static Bitmap BitmapOf(const Spill& s) {
    return Bitmap{.bits = s.bits(), .words = s.words, .planes = static_cast<uint8_t>(s.planes)};
  }
  // BitmapOf for lock-free readers: whatever the header reads as, within
  // the spill's bytes.
  static Bitmap BitmapConcurrent(const Spill& s) {
    const auto planes = static_cast<uint8_t>(Load(s.planes) & ((1u << kMaxTiers) - 1));
    const size_t per_word = std::max(PlaneCount(planes), 1) * sizeof(uint64_t);
    return Bitmap{.bits = s.bits(),
                  .words = std::min<size_t>(Load(s.words), Load(s.capacity) / per_word),
                  .planes = planes};
  }
  // A bitmap spill of `words` words and `planes`, with w's holders
  // (a bitmap's), pointed to by w.
  Spill* Rebuild(uint64_t& w, size_t words, uint8_t planes);

  // Slots keep their keys mixed (Mix is one to one), so that probing,
  // which needs the home of each key it passes, mixes nothing.
  static size_t HomeIn(uint64_t mixed, size_t capacity) {
    // The top bits choose the block index's shard; the rest, scaled to the
    // capacity (which need not be a power of two), choose the slot.
    const unsigned __int128 m = static_cast<unsigned __int128>(mixed << 12) * capacity;
    return static_cast<size_t>(m >> 64);
  }
  size_t Home(uint64_t mixed) const { return HomeIn(mixed, capacity_); }
  // Of the key in slot p from its home.
  size_t Distance(size_t p) const {
    const size_t home = Home(slots_[p].key);
    return p >= home ? p - home : p + capacity_ - home;
  }
  size_t Find(uint64_t key) const;  // the slot holding `key` (unmixed), or kNone
  // Where a lookup of a key absent stopped: the slot it would take (empty,
  // or holding the first key richer than it).
  struct Probe {
    size_t at = 0;
  };
  // Find for a mixed key; when absent, sets `probe`. Here, not in the .cc,
  // so that Add and Remove, once per event, inline it.
  size_t FindFrom(uint64_t mixed, Probe& probe) const {
    size_t p = Home(mixed);
    for (size_t d = 0;; ++d) {
      // Robin Hood: past a poorer key, `mixed` would be here by now.
      if (!Occupied(p) || (slots_[p].key != mixed && Distance(p) < d)) {
        probe = Probe{.at = p};
        return kNone;
      }
      if (slots_[p].key == mixed) return p;
      if (++p == capacity_) p = 0;
    }
  }
  // Find for lock-free readers: the slot that held `key` when read, or
  // null. Probes at most the whole array, and never past its end.
  const Slot* FindConcurrent(Mixed key) const;
  // VisitConcurrent's work on `slot` (null: the key is absent).
  template <typename OnList, typename OnBitmap>
  bool VisitSlotConcurrent(const Slot* slot, OnList&& on_list, OnBitmap&& on_bitmap) const {
    if (slot == nullptr) return false;
    std::atomic_ref<uint64_t> shared(const_cast<Slot*>(slot)->holders);
    uint64_t w = shared.load(std::memory_order_relaxed);
    if (w == 0) return false;
    if ((w & kUses) != kUses) {
      shared.compare_exchange_strong(w, w + kOneUse, std::memory_order_relaxed);
    }
    if (Spilled(w) && (w & kLinedBit) != 0) {
      // The word says it all: the pool's plane alone, on whole lines past
      // the header, zero past its words (so a route loads two lines of a
      // thousand workers' bitmap rather than three).
      on_bitmap(Bitmap{.bits = SpillOf(w)->bits(), .words = 8 * LinesOf(w), .planes = 1});
      return true;
    }
    if (Spilled(w)) {
      const Spill* s = SpillOf(w);
      // A spill's capacity never changes; its counts may be mid-write.
      if (Load(s->words) != 0) {
        on_bitmap(BitmapConcurrent(*s));
      } else {
        const size_t capacity = Load(s->capacity);
        const size_t count = std::min<size_t>(Load(s->count), capacity / sizeof(Holder));
        on_list(std::span<const Holder>(s->list(), count));
      }
      return true;
    }
    Holder inline_holders[kInline];
    size_t n = 0;
    for (int i = 0; i < kInline; ++i) {
      if (InlineAt(w, i) != 0) inline_holders[n++] = InlineAt(w, i);
    }
    on_list(std::span<const Holder>(inline_holders, n));
    return true;
  }
  // Whether slot p holds a key (readers may be counting a use in it).
  bool Occupied(size_t p) const {
    return std::atomic_ref<uint64_t>(slots_[p].holders).load(std::memory_order_relaxed) != 0;
  }
  static bool NoHolders(uint64_t w) { return (w & ~kUses) == 0; }
  // Places `slot`'s key (mixed), known absent, with room for it.
  void InsertNoGrow(Slot slot);
  // Places `slot`'s key, known absent, where its lookup stopped (Robin
  // Hood: the richer keys from there to the run's end move one slot along,
  // in one copy).
  void InsertAt(Slot slot, Probe probe);
  void Erase(size_t p);
  void Grow();
  // Holds's work on a slot that holds a key.
  bool HoldsAt(const Slot& slot, uint16_t id) const;
  // Removes `id` from the holder word in slot p (by reference); returns its
  // tier bits, 0 when it was not there. Spills shrink back inline.
  uint8_t TakeHolder(size_t p, uint16_t id);
  // The spill functions take the holder word `w` by reference: a spill that
  // is reallocated (grown, or switched between list and bitmaps) is
  // pointed to anew.
  // Sets `tier` of `id` in w's spill; true when `id` is a new holder.
  bool SpillAdd(uint64_t& w, uint16_t id, int tier);
  // Clears `tier` (or, with tier < 0, every tier) of `id` in w's spill;
  // returns the tiers it had.
  uint8_t SpillClear(uint64_t& w, uint16_t id, int tier);
  // Switches w's spill between list and bitmaps by which is smaller.
  void Reshape(uint64_t& w);
  // Moves w's spill back inline when it is small enough.
  void MaybeUnspill(uint64_t& w);
  // A spill with room for `bytes` after its header, empty.
  Spill* NewSpill(size_t bytes);
  // A bitmap spill of `words` words and `planes`, empty. Of the pool's
  // plane alone (most popular blocks'), it is lined where that saves a
  // line and the bytes allow: its bits start on a cache line, with room
  // for whole lines of them (up to kMaxLines), all zero, and its header
  // ends the line before, so that lock-free readers, who learn its shape
  // from the holder word, load only the bits' lines (two for a thousand
  // workers rather than three). That takes 48 bytes more, within which
  // the header finds its place.
  Spill* NewBitmap(size_t words, uint8_t planes);
  // Points `w` at `s` (its clock count kept).
  static void PointTo(uint64_t& w, Spill* s) {
    const bool lined = Lined(*s);
    const uint64_t lines = lined ? s->capacity / 64 : (sizeof(Spill) + s->capacity + 63) / 64;
    w = (w & kUses) | kSpillBit | (std::min(lines, kMaxLines) << kLinesShift) |
        reinterpret_cast<uintptr_t>(s) | (lined ? kLinedBit : 0);
  }
  // Whether readers may read `s` from its holder word alone: NewBitmap
  // leaves slack in lined bitmaps only (whose planes and capacity never
  // change in place).
  static bool Lined(const Spill& s) { return s.slack != 0; }
  // Moves w's spill to one of `bytes` (at least its used bytes).
  Spill* Reallocate(uint64_t& w, size_t bytes);
  void FreeSpill(uint64_t w);
  // Frees `p` (`bytes` long) with `free`, at once or through the limbo.
  void Free(void* p, size_t bytes, FreeFunction free);
  // A slot array of `capacity` slots, all empty; large ones on huge pages
  // (gateway/routing/huge_pages.h). Sets *free to what frees it.
  static Slot* NewSlots(size_t capacity, FreeFunction* free);
  // Shows slots_ and capacity_ to lock-free readers.
  void Publish();

  // slots_ and capacity_ for lock-free readers and Prefetch (see Publish).
  // On a line of their own, written only when the table grows, so that a
  // reader finds it in its cache rather than behind the writer's last
  // change.
  alignas(64) std::atomic<const Slot*> slots_view_{nullptr};
  std::atomic<size_t> capacity_view_{0};
  // The writers' state.
  alignas(64) size_t capacity_;
  FreeFunction free_slots_ = nullptr;  // set by NewSlots, before slots_
  Slot* slots_;                        // from NewSlots
  Reclaimer::Limbo* limbo_ = nullptr;
  size_t size_ = 0;
  size_t hand_ = 0;
  size_t spill_bytes_ = 0;  // allocated for spills, headers included
  Growths growths_;
  SpillArena arena_;        // the spills' memory
};

}  // namespace tandem::gateway

#endif  // TANDEM_GATEWAY_ROUTING_HOLDER_TABLE_H_
