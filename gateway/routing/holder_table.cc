#include "gateway/routing/holder_table.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <new>
#include <utility>

#include "absl/container/inlined_vector.h"
#include "common/check.h"

namespace tandem::gateway {
HolderTable::HolderTable(size_t capacity)
    : capacity_(capacity < 4 ? 4 : capacity), slots_(NewSlots(capacity_, &free_slots_)) {
  Publish();
}

void HolderTable::Publish() {
  // The array first, then its capacity: a reader that loads the capacity
  // and then the array gets this array, or a larger one (tables only grow).
  slots_view_.store(slots_, std::memory_order_release);
  capacity_view_.store(capacity_, std::memory_order_release);
}

HolderTable::~HolderTable() {
  // No reader is left: everything goes at once, what waits in the limbo
  // for the arena first (the limbo may outlive the table, or be gone).
  if (limbo_ != nullptr) limbo_->FreeAllOf(&arena_);
  limbo_ = nullptr;
  for (size_t p = 0; p < capacity_; ++p) FreeSpill(slots_[p].holders);
  free_slots_(slots_, capacity_ * sizeof(Slot));
}

HolderTable::Slot* HolderTable::NewSlots(size_t capacity, FreeFunction* free) {
  // Zeroed: every slot empty (key 0, holders 0).
  return static_cast<Slot*>(AllocateZeroed(capacity * sizeof(Slot), free));
}

void HolderTable::Free(void* p, size_t bytes, FreeFunction free) {
  if (limbo_ != nullptr) {
    limbo_->Retire(p, bytes, free);
  } else {
    free(p, bytes);
  }
}

size_t HolderTable::Find(uint64_t key) const {
  Probe probe;
  return FindFrom(Mix(key), probe);
}

void HolderTable::InsertNoGrow(Slot slot) {
  Probe probe;
  FindFrom(slot.key, probe);  // absent: where it goes
  InsertAt(slot, probe);
}

void HolderTable::InsertAt(Slot slot, Probe probe) {
  // The lookup stopped at the first key richer than `slot`'s (or an empty
  // slot): keys stay in their homes' order, so that key and the rest of
  // its run each move one slot along, into the run's first empty slot, in
  // one copy rather than a swap and a distance a slot.
  const size_t p = probe.at;
  size_t e = p;
  while (slots_[e].holders != 0) {
    if (++e == capacity_) e = 0;
  }
  if (e >= p) {
    std::memmove(&slots_[p + 1], &slots_[p], (e - p) * sizeof(Slot));
  } else {  // the run wraps past the array's end
    std::memmove(&slots_[1], &slots_[0], e * sizeof(Slot));
    slots_[0] = slots_[capacity_ - 1];
    std::memmove(&slots_[p + 1], &slots_[p], (capacity_ - 1 - p) * sizeof(Slot));
  }
  slots_[p] = slot;
  ++size_;
}

void HolderTable::Grow() {
  const auto start = std::chrono::steady_clock::now();
  growths_.keys_moved += static_cast<int64_t>(size_);
  const size_t old_capacity = capacity_;
  Slot* const old_slots = slots_;
  // By a quarter: a table just grown is then 52% full (this table's bytes
  // per entry are the point), and one about to grow 65% (a change's cost
  // rises steeply past that; holder_table.h). The price: over a table's
  // growing each key is moved four times, where growing by half again
  // (50-75% full) moved it twice.
  const FreeFunction free_old_slots = free_slots_;
  capacity_ = old_capacity + old_capacity / 4;
  slots_ = NewSlots(capacity_, &free_slots_);
  size_ = 0;
  hand_ = 0;
  // Robin Hood keeps the keys in the order of their homes, from any empty
  // slot round to it, and homes keep their order at any capacity (HomeIn
  // scales them). So, taken in that order, each key goes to the first free
  // slot at or past its new home, past the key before it: the table that
  // inserting them one by one would build, with no probing and the new
  // array written front to back. Keys that shared an old home may not
  // share the new one, so each such run is sorted first; should the keys
  // wrap round onto the first ones placed, the rest are inserted as usual.
  size_t empty = 0;
  while (old_slots[empty].holders != 0) ++empty;  // never full (Reserve)
  size_t next = 0;       // past the last slot taken, counting on past the end
  bool in_order = true;  // false once the placement has wrapped onto the start
  absl::InlinedVector<std::pair<size_t, Slot>, 8> run;  // (new home, slot)
  auto place_run = [&] {
    std::sort(run.begin(), run.end(),
              [](const auto& a, const auto& b) { return a.first < b.first; });
    for (const auto& [home, slot] : run) {
      const size_t at = std::max(home, next);
      const size_t p = at >= capacity_ ? at - capacity_ : at;
      in_order = in_order && at < 2 * capacity_ && slots_[p].holders == 0;
      if (!in_order) {
        InsertNoGrow(slot);
        continue;
      }
      slots_[p] = slot;
      ++size_;
      next = at + 1;
    }
    run.clear();
  };
  size_t run_home = kNone;
  for (size_t i = 1; i <= old_capacity; ++i) {
    const size_t p = empty + i < old_capacity ? empty + i : empty + i - old_capacity;
    const Slot& slot = old_slots[p];
    if (slot.holders == 0) continue;
    const size_t old_home = HomeIn(slot.key, old_capacity);
    if (old_home != run_home) {
      place_run();
      run_home = old_home;
    }
    // Homes before the empty slot come round after the end.
    run.emplace_back(HomeIn(slot.key, capacity_) + (old_home < empty ? capacity_ : 0), slot);
  }
  place_run();
  // Published filled: a lock-free reader reads either array whole.
  Publish();
  Free(old_slots, old_capacity * sizeof(Slot), free_old_slots);
  ++growths_.count;
  growths_.nanos +=
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start)
          .count();
}

void HolderTable::Erase(size_t p) {
  // Backward shift: the keys after p that are not home move one back, so no
  // tombstone is left for lookups to walk over.
  size_t q = p + 1 == capacity_ ? 0 : p + 1;
  while (slots_[q].holders != 0 && Distance(q) > 0) {
    slots_[p] = slots_[q];
    p = q;
    if (++q == capacity_) q = 0;
  }
  slots_[p] = Slot{.key = 0, .holders = 0};
  --size_;
}

HolderTable::Spill* HolderTable::NewSpill(size_t bytes) {
  TANDEM_CHECK(bytes <= UINT32_MAX, "a spill's size is 32 bits");
  void* p = arena_.Allocate(sizeof(Spill) + bytes);
  TANDEM_CHECK((reinterpret_cast<uintptr_t>(p) & ~kPointerBits) == 0,
               "a spill's address fits the holder word's 57 bits");
  spill_bytes_ += sizeof(Spill) + bytes;
  return new (p) Spill{.count = 0,
                       .capacity = static_cast<uint32_t>(bytes),
                       .words = 0,
                       .planes = 0,
                       .lead = 0,
                       .slack = 0};
}

HolderTable::Spill* HolderTable::NewBitmap(size_t words, uint8_t planes) {
  const size_t bytes = words * static_cast<size_t>(PlaneCount(planes)) * sizeof(uint64_t);
  const size_t lined = (bytes + 63) / 64 * 64;
  static_assert(SpillArena::kAlign == 16 && sizeof(Spill) == 16);
  constexpr size_t kSlack = 64 - SpillArena::kAlign;
  // Lined only where that saves a line however the ordinary one falls, and
  // costs an entry no more than the index's worst case (a slot to each
  // holder at 52% full, 16 / 0.52 bytes) with as few holders as a bitmap
  // keeps (Reshape: past kInline, and half its words' bits in list bytes).
  const size_t fewest = std::max<size_t>(kInline + 1, (words + 1) / 2);
  const bool saves = lined < sizeof(Spill) + bytes;
  const bool within = (kSlack + sizeof(Spill) + lined + sizeof(Slot)) * kLoadNumerator * 4 <=
                      sizeof(Slot) * kLoadDenominator * 5 * fewest;
  if (planes != 1 || lined / 64 > kMaxLines || !saves || !within) {
    Spill* s = NewSpill(bytes);
    s->words = static_cast<uint32_t>(words);
    s->planes = planes;
    std::fill(s->bits(), s->bits() + bytes / sizeof(uint64_t), 0);
    return s;
  }
  // The arena aligns to 16 bytes: the header goes 0, 16, 32 or 48 bytes in,
  // wherever it ends on a line.
  const size_t allocated = kSlack + sizeof(Spill) + lined;
  char* p = static_cast<char*>(arena_.Allocate(allocated));
  const auto lead =
      static_cast<uint8_t>((64 - sizeof(Spill) - reinterpret_cast<uintptr_t>(p) % 64) % 64);
  TANDEM_CHECK((reinterpret_cast<uintptr_t>(p + lead) & ~kPointerBits) == 0,
               "a spill's address fits the holder word's 57 bits");
  spill_bytes_ += allocated;
  Spill* s = new (p + lead) Spill{.count = 0,
                                  .capacity = static_cast<uint32_t>(lined),
                                  .words = static_cast<uint32_t>(words),
                                  .planes = planes,
                                  .lead = lead,
                                  .slack = static_cast<uint8_t>(kSlack)};
  std::fill(s->bits(), s->bits() + lined / sizeof(uint64_t), 0);
  return s;
}

void HolderTable::FreeSpill(uint64_t w) {
  if (!Spilled(w)) return;
  Spill* s = SpillOf(w);
  const size_t bytes = s->slack + sizeof(Spill) + s->capacity;
  char* start = reinterpret_cast<char*>(s) - s->lead;
  spill_bytes_ -= bytes;
  if (limbo_ != nullptr) {
    limbo_->Retire(start, bytes, &SpillArena::FreeInto, &arena_);
  } else {
    arena_.Free(start, bytes);
  }
}

HolderTable::Spill* HolderTable::Reallocate(uint64_t& w, size_t bytes) {
  const Spill* old = SpillOf(w);
  Spill* s = NewSpill(bytes);
  s->count = old->count;
  s->words = old->words;
  s->planes = old->planes;
  std::memcpy(s + 1, old + 1, old->UsedBytes());
  FreeSpill(w);
  PointTo(w, s);
  return s;
}

HolderTable::Spill* HolderTable::Rebuild(uint64_t& w, size_t words, uint8_t planes) {
  const Spill& old = *SpillOf(w);
  const Bitmap from = BitmapOf(old);
  const int n = PlaneCount(planes);
  Spill* s = NewBitmap(words, planes);
  s->count = old.count;
  for (int t = 0, k = 0; t < kMaxTiers; ++t) {
    if (((planes >> t) & 1) == 0) continue;
    for (size_t i = 0; i < std::min(words, from.words); ++i) {
      s->bits()[i * static_cast<size_t>(n) + static_cast<size_t>(k)] = TierWord(from, i, t);
    }
    ++k;
  }
  FreeSpill(w);
  PointTo(w, s);
  return s;
}

void HolderTable::Reshape(uint64_t& w) {
  const Spill& s = *SpillOf(w);
  size_t max_id = 0;
  uint8_t planes = 0;  // of the bitmaps it would be
  if (s.IsBitmap()) {
    const Bitmap b = BitmapOf(s);
    for (size_t i = b.words; i-- > 0;) {
      if (AnyTier(b, i) != 0) {
        max_id = 64 * i + 63;
        break;
      }
    }
    planes = b.planes;
  } else {
    for (uint32_t i = 0; i < s.count; ++i) {
      max_id = std::max<size_t>(max_id, IdOf(s.list()[i]));
      planes |= TiersOf(s.list()[i]);
    }
  }
  const size_t bitmap_bytes =
      (max_id / 64 + 1) * static_cast<size_t>(PlaneCount(planes)) * sizeof(uint64_t);
  const size_t list_bytes = s.count * sizeof(Holder);
  // Bitmaps from a quarter of their size in list bytes: a route reads a
  // popular block's holders a word per 64 workers rather than one by one,
  // and such blocks are few.
  if (!s.IsBitmap() && list_bytes * 4 > bitmap_bytes) {
    const int n = PlaneCount(planes);
    Spill* b = NewBitmap(max_id / 64 + 1, planes);
    b->count = s.count;
    for (uint32_t i = 0; i < s.count; ++i) {
      const Holder h = s.list()[i];
      for (int t = 0, k = 0; t < kMaxTiers; ++t) {
        if (((planes >> t) & 1) == 0) continue;
        if ((TiersOf(h) >> t) & 1) {
          b->bits()[(IdOf(h) / 64) * static_cast<size_t>(n) + static_cast<size_t>(k)] |=
              uint64_t{1} << (IdOf(h) % 64);
        }
        ++k;
      }
    }
    FreeSpill(w);
    PointTo(w, b);
  } else if (s.IsBitmap() && list_bytes * 8 < bitmap_bytes) {  // hysteresis
    const Bitmap b = BitmapOf(s);
    Spill* l = NewSpill(std::max<size_t>(list_bytes, 2 * kInline * sizeof(Holder)));
    for (size_t i = 0; i < b.words; ++i) {
      for (uint64_t any = AnyTier(b, i); any != 0; any &= any - 1) {
        const uint16_t id = static_cast<uint16_t>(64 * i + std::countr_zero(any));
        l->list()[l->count++] = static_cast<Holder>(id | (BitmapTiers(b, id) << kIdBits));
      }
    }
    FreeSpill(w);
    PointTo(w, l);
  }
}

bool HolderTable::SpillAdd(uint64_t& w, uint16_t id, int tier) {
  Spill* s = SpillOf(w);
  if (s->IsBitmap()) {
    const size_t need = std::max<size_t>(s->words, id / 64 + 1);
    const auto planes = static_cast<uint8_t>(s->planes | (1u << tier));
    const size_t n = static_cast<size_t>(PlaneCount(planes));
    if (planes != s->planes || need * n * sizeof(uint64_t) > s->capacity) {
      s = Rebuild(w, need, planes);
    } else if (need > s->words) {  // room for more words where it is
      std::fill(s->bits() + s->words * n, s->bits() + need * n, 0);
      s->words = static_cast<uint32_t>(need);
    }
    const Bitmap b = BitmapOf(*s);
    const bool fresh = BitmapTiers(b, id) == 0;
    const int k = PlaneCount(static_cast<uint8_t>(planes & ((1u << tier) - 1)));
    s->bits()[(id / 64) * n + static_cast<size_t>(k)] |= uint64_t{1} << (id % 64);
    if (fresh) ++s->count;
    return fresh;
  }
  const Holder bit = static_cast<Holder>(1u << (kIdBits + tier));
  for (uint32_t i = 0; i < s->count; ++i) {
    Holder& h = s->list()[i];
    if (IdOf(h) == id) {
      h |= bit;
      return false;
    }
  }
  if ((s->count + 1) * sizeof(Holder) > s->capacity) s = Reallocate(w, 2 * s->capacity);
  s->list()[s->count++] = static_cast<Holder>(id | bit);
  if ((s->count & (s->count - 1)) == 0) Reshape(w);  // at powers of two: amortized
  return true;
}

uint8_t HolderTable::SpillClear(uint64_t& w, uint16_t id, int tier) {
  Spill* s = SpillOf(w);
  const uint8_t mask = tier < 0 ? uint8_t{0xff} : static_cast<uint8_t>(1u << tier);
  if (s->IsBitmap()) {
    if (static_cast<size_t>(id / 64) >= s->words) return 0;
    const Bitmap b = BitmapOf(*s);
    const uint8_t had = BitmapTiers(b, id);
    if ((had & mask) == 0) return had;
    const auto n = static_cast<size_t>(PlaneCount(b.planes));
    for (int t = 0, k = 0; t < kMaxTiers; ++t) {
      if (((b.planes >> t) & 1) == 0) continue;
      if ((mask >> t) & 1)
        s->bits()[(id / 64) * n + static_cast<size_t>(k)] &= ~(uint64_t{1} << (id % 64));
      ++k;
    }
    if ((had & ~mask) == 0) {
      --s->count;
      if ((s->count & (s->count - 1)) == 0) Reshape(w);
    }
    return had;
  }
  Holder* list = s->list();
  for (uint32_t i = 0; i < s->count; ++i) {
    if (IdOf(list[i]) != id) continue;
    const uint8_t had = TiersOf(list[i]);
    const uint8_t left = had & static_cast<uint8_t>(~mask);
    if (left != 0) {
      list[i] = static_cast<Holder>(id | (left << kIdBits));
    } else if (had != 0) {
      list[i] = list[--s->count];
    }
    return had;
  }
  return 0;
}

bool HolderTable::AddReserved(Mixed key, uint16_t id, int tier) {
  const Holder bit = static_cast<Holder>(1u << (kIdBits + tier));
  const uint64_t mixed = key.v;
  Probe probe;
  const size_t p = FindFrom(mixed, probe);
  if (p == kNone) {
    InsertAt(Slot{.key = mixed, .holders = kOneUse | id | bit}, probe);
    return true;
  }
  uint64_t& w = slots_[p].holders;
  if ((w & kUses) != kUses) w += kOneUse;
  if (Spilled(w)) return SpillAdd(w, id, tier);
  for (int i = 0; i < kInline; ++i) {
    if (InlineAt(w, i) != 0 && IdOf(InlineAt(w, i)) == id) {
      w |= uint64_t{bit} << (16 * i);
      return false;
    }
  }
  for (int i = 0; i < kInline; ++i) {
    if (InlineAt(w, i) == 0) {
      w |= uint64_t{static_cast<Holder>(id | bit)} << (16 * i);
      return true;
    }
  }
  // A fourth holder: the set moves to a spill of its own.
  Spill* s = NewSpill(2 * kInline * sizeof(Holder));
  for (int i = 0; i < kInline; ++i) s->list()[s->count++] = InlineAt(w, i);
  PointTo(w, s);
  return SpillAdd(w, id, tier);
}

// Back inline when a spill has kInline holders or fewer.
void HolderTable::MaybeUnspill(uint64_t& w) {
  const Spill& s = *SpillOf(w);
  if (s.count > kInline) return;
  uint64_t inline_word = 0;
  int i = 0;
  if (s.IsBitmap()) {
    const Bitmap b = BitmapOf(s);
    for (size_t k = 0; k < b.words; ++k) {
      for (uint64_t any = AnyTier(b, k); any != 0; any &= any - 1) {
        const uint16_t id = static_cast<uint16_t>(64 * k + std::countr_zero(any));
        inline_word |= uint64_t{static_cast<Holder>(id | (BitmapTiers(b, id) << kIdBits))} << (16 * i++);
      }
    }
  } else {
    for (uint32_t k = 0; k < s.count; ++k) inline_word |= uint64_t{s.list()[k]} << (16 * i++);
  }
  FreeSpill(w);
  w = (w & kUses) | inline_word;
}

uint8_t HolderTable::TakeHolder(size_t p, uint16_t id) {
  uint64_t& w = slots_[p].holders;
  if (Spilled(w)) {
    const uint8_t had = SpillClear(w, id, -1);
    if (had != 0) MaybeUnspill(w);
    return had;
  }
  for (int i = 0; i < kInline; ++i) {
    const Holder h = InlineAt(w, i);
    if (h != 0 && IdOf(h) == id) {
      w &= ~(uint64_t{0xffff} << (16 * i));
      return TiersOf(h);
    }
  }
  return 0;
}

bool HolderTable::Remove(Mixed key, uint16_t id, int tier) {
  Probe unused;
  const size_t p = FindFrom(key.v, unused);
  if (p == kNone) return false;
  uint64_t& w = slots_[p].holders;
  const uint8_t bit = static_cast<uint8_t>(1u << tier);
  if (Spilled(w)) {
    const uint8_t had = SpillClear(w, id, tier);
    if ((had & bit) == 0 || (had & ~bit) != 0) return false;
    MaybeUnspill(w);
    return true;
  }
  for (int i = 0; i < kInline; ++i) {
    const Holder h = InlineAt(w, i);
    if (h == 0 || IdOf(h) != id) continue;
    if ((TiersOf(h) & bit) == 0) return false;
    w &= ~(uint64_t{bit} << (16 * i + kIdBits));
    if ((TiersOf(h) & ~bit) != 0) return false;  // another tier still holds it
    w &= ~(uint64_t{0xffff} << (16 * i));
    if (NoHolders(w)) Erase(p);
    return true;
  }
  return false;
}

bool HolderTable::Holds(uint64_t key, uint16_t id) const {
  const size_t p = Find(key);
  return p != kNone && HoldsAt(slots_[p], id);
}

bool HolderTable::HoldsAt(const Slot& slot, uint16_t id) const {
  const uint64_t w = slot.holders;
  if (Spilled(w)) {
    const Spill& s = *SpillOf(w);
    if (s.IsBitmap()) {
      const Bitmap b = BitmapOf(s);
      return static_cast<size_t>(id / 64) < b.words && BitmapTiers(b, id) != 0;
    }
    for (uint32_t i = 0; i < s.count; ++i) {
      if (IdOf(s.list()[i]) == id) return true;
    }
    return false;
  }
  for (int i = 0; i < kInline; ++i) {
    if (InlineAt(w, i) != 0 && IdOf(InlineAt(w, i)) == id) return true;
  }
  return false;
}

int64_t HolderTable::RemoveWorkers(std::span<const uint16_t> ids, int64_t expected,
                                   SeqLock* changes,
                                   absl::FunctionRef<void(uint16_t id)> on_removed) {
  // A pass over every slot: an inline word's three holders are looked up in
  // a bitmap of the ids (id 0, an empty lane, is never in it), and only a
  // word that holds one of them, or a spill, is looked at further.
  uint64_t listed[(kMaxId + 1) / 64] = {};
  for (uint16_t id : ids) listed[id / 64] |= uint64_t{1} << (id % 64);
  auto is_listed = [&](Holder h) { return (listed[IdOf(h) / 64] >> (IdOf(h) % 64)) & 1; };
  auto may_hold = [&](uint64_t w) {
    if (w == 0) return false;
    if (Spilled(w)) return true;
    return (is_listed(InlineAt(w, 0)) | is_listed(InlineAt(w, 1)) | is_listed(InlineAt(w, 2))) != 0;
  };
  int64_t removed = 0;
  for (size_t p = 0; p < capacity_ && removed < expected;) {
    if (!may_hold(slots_[p].holders)) {
      ++p;
      continue;
    }
    bool changed = false;
    for (uint16_t id : ids) {
      if (!HoldsAt(slots_[p], id)) continue;
      if (!changed && changes != nullptr) changes->BeginChange();
      changed = true;
      TakeHolder(p, id);
      ++removed;
      on_removed(id);
    }
    const bool erase = changed && NoHolders(slots_[p].holders);
    if (erase) Erase(p);
    if (changed && changes != nullptr) changes->EndChange();
    if (!erase) ++p;  // else a later key may have shifted into p
  }
  return removed;
}

const HolderTable::Slot* HolderTable::FindConcurrent(Mixed key) const {
  // The capacity first (see Publish).
  const size_t capacity = capacity_view_.load(std::memory_order_acquire);
  const Slot* slots = slots_view_.load(std::memory_order_acquire);
  const uint64_t mixed = key.v;
  size_t p = HomeIn(mixed, capacity);
  for (size_t d = 0; d < capacity; ++d) {
    if (Load(slots[p].holders) == 0) return nullptr;
    const uint64_t k = Load(slots[p].key);
    if (k == mixed) return &slots[p];
    const size_t home = HomeIn(k, capacity);
    if ((p >= home ? p - home : p + capacity - home) < d) return nullptr;
    if (++p == capacity) p = 0;
  }
  return nullptr;
}

HolderTable::Found HolderTable::FindHoldersConcurrent(Mixed key) const {
  const Slot* slot = FindConcurrent(key);
  if (slot == nullptr) return Found();
  const uint64_t w = Load(slot->holders);
  if (!Spilled(w)) return Found(slot);
  // Every line of it (the word says how many), without reading it.
  const char* at = (w & kLinedBit) != 0 ? reinterpret_cast<const char*>(SpillOf(w)->bits())
                                        : reinterpret_cast<const char*>(SpillOf(w));
  const uint64_t lines = LinesOf(w);
  for (uint64_t i = 0; i < lines; ++i) __builtin_prefetch(at + 64 * i);
  return Found(slot);
}

size_t HolderTable::MemoryBytes() const { return capacity_ * sizeof(Slot) + arena_.footprint(); }

}  // namespace tandem::gateway
