#include "gateway/routing/holder_table.h"

#include <algorithm>
#include <utility>

#include "common/check.h"

namespace tandem::gateway {
HolderTable::HolderTable(size_t capacity)
    : capacity_(capacity < 4 ? 4 : capacity),
      slots_(new Slot[capacity_]()) {
  slots_view_.store(slots_.get(), std::memory_order_relaxed);
  capacity_view_.store(capacity_, std::memory_order_relaxed);
}

size_t HolderTable::Distance(size_t p) const {
  const size_t home = Home(slots_[p].key);
  return p >= home ? p - home : p + capacity_ - home;
}

size_t HolderTable::Find(uint64_t key) const {
  size_t p = Home(key);
  for (size_t d = 0;; ++d) {
    if (!Occupied(p)) return kNone;
    if (slots_[p].key == key) return p;
    if (Distance(p) < d) return kNone;  // Robin Hood: it would be here by now
    if (++p == capacity_) p = 0;
  }
}

void HolderTable::InsertNoGrow(Slot slot) {
  size_t p = Home(slot.key);
  size_t d = 0;
  while (true) {
    if (slots_[p].holders == 0) {
      slots_[p] = slot;
      ++size_;
      return;
    }
    const size_t resident = Distance(p);
    if (resident < d) {  // the poorer key takes the slot and the richer moves on
      std::swap(slot, slots_[p]);
      d = resident;
    }
    if (++p == capacity_) p = 0;
    ++d;
  }
}

void HolderTable::Insert(uint64_t key, uint64_t holders) {
  if ((size_ + 1) * 8 > capacity_ * 7) Grow();  // at most 7/8 full
  InsertNoGrow(Slot{.key = key, .holders = holders});
}

void HolderTable::Grow() {
  const size_t old_capacity = capacity_;
  std::unique_ptr<Slot[]> old_slots = std::move(slots_);
  // By half again rather than double: a table just grown is then 58% full,
  // not 44% (this table's bytes per entry are the point).
  capacity_ = old_capacity + old_capacity / 2;
  slots_.reset(new Slot[capacity_]());
  size_ = 0;
  hand_ = 0;
  slots_view_.store(slots_.get(), std::memory_order_relaxed);
  capacity_view_.store(capacity_, std::memory_order_relaxed);
  for (size_t p = 0; p < old_capacity; ++p) {
    if (old_slots[p].holders != 0) {
      InsertNoGrow(old_slots[p]);
    }
  }
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

uint32_t HolderTable::NewSpill() {
  if (!free_spills_.empty()) {
    const uint32_t i = free_spills_.back();
    free_spills_.pop_back();
    return i;
  }
  TANDEM_CHECK(spills_.size() < (size_t{1} << 32), "a spill's index is 32 bits");
  spills_.emplace_back();
  return static_cast<uint32_t>(spills_.size() - 1);
}

void HolderTable::FreeSpill(uint64_t w) {
  if (!Spilled(w)) return;
  spills_[SpillIndex(w)] = Spill{};
  free_spills_.push_back(SpillIndex(w));
}

void HolderTable::Reshape(Spill& s) {
  size_t max_id = 0;
  if (s.IsBitmap()) {
    const size_t words = s.bits.size() / kMaxTiers;
    for (size_t i = words; i-- > 0;) {
      if (AnyTier(Bitmap{.bits = s.bits.data(), .words = words}, i) != 0) {
        max_id = 64 * i + 63;
        break;
      }
    }
  } else {
    for (Holder h : s.list) max_id = std::max<size_t>(max_id, IdOf(h));
  }
  const size_t bitmap_bytes = (max_id / 64 + 1) * kMaxTiers * sizeof(uint64_t);
  const size_t list_bytes = s.count * sizeof(Holder);
  // Bitmaps from a quarter of their size in list bytes: a route reads a
  // popular block's holders a word per 64 workers rather than one by one,
  // and such blocks are few.
  if (!s.IsBitmap() && list_bytes * 4 > bitmap_bytes) {
    std::vector<uint64_t> bits((max_id / 64 + 1) * kMaxTiers, 0);
    for (Holder h : s.list) {
      for (int t = 0; t < kMaxTiers; ++t) {
        if ((TiersOf(h) >> t) & 1) bits[(IdOf(h) / 64) * kMaxTiers + t] |= uint64_t{1} << (IdOf(h) % 64);
      }
    }
    s.bits = std::move(bits);
    std::vector<Holder>().swap(s.list);
  } else if (s.IsBitmap() && list_bytes * 8 < bitmap_bytes) {  // hysteresis
    const Bitmap b{.bits = s.bits.data(), .words = s.bits.size() / kMaxTiers};
    std::vector<Holder> list;
    list.reserve(s.count);
    for (size_t i = 0; i < b.words; ++i) {
      for (uint64_t any = AnyTier(b, i); any != 0; any &= any - 1) {
        const uint16_t id = static_cast<uint16_t>(64 * i + std::countr_zero(any));
        list.push_back(static_cast<Holder>(id | (BitmapTiers(b, id) << kIdBits)));
      }
    }
    s.list = std::move(list);
    std::vector<uint64_t>().swap(s.bits);
  }
}

bool HolderTable::SpillAdd(Spill& s, uint16_t id, int tier) {
  if (s.IsBitmap()) {
    const size_t need = (id / 64 + 1) * kMaxTiers;
    if (s.bits.size() < need) s.bits.resize(need, 0);
    const Bitmap b{.bits = s.bits.data(), .words = s.bits.size() / kMaxTiers};
    const bool fresh = BitmapTiers(b, id) == 0;
    s.bits[(id / 64) * kMaxTiers + tier] |= uint64_t{1} << (id % 64);
    if (fresh) ++s.count;
    return fresh;
  }
  const Holder bit = static_cast<Holder>(1u << (kIdBits + tier));
  for (Holder& h : s.list) {
    if (IdOf(h) == id) {
      h |= bit;
      return false;
    }
  }
  s.list.push_back(id | bit);
  ++s.count;
  if ((s.count & (s.count - 1)) == 0) Reshape(s);  // at powers of two: amortized
  return true;
}

uint8_t HolderTable::SpillClear(Spill& s, uint16_t id, int tier) {
  const uint8_t mask = tier < 0 ? uint8_t{0xff} : static_cast<uint8_t>(1u << tier);
  if (s.IsBitmap()) {
    if (static_cast<size_t>(id / 64) >= s.bits.size() / kMaxTiers) return 0;
    const Bitmap b{.bits = s.bits.data(), .words = s.bits.size() / kMaxTiers};
    const uint8_t had = BitmapTiers(b, id);
    if ((had & mask) == 0) return had;
    for (int t = 0; t < kMaxTiers; ++t) {
      if ((mask >> t) & 1) s.bits[(id / 64) * kMaxTiers + t] &= ~(uint64_t{1} << (id % 64));
    }
    if ((had & ~mask) == 0) {
      --s.count;
      if ((s.count & (s.count - 1)) == 0) Reshape(s);
    }
    return had;
  }
  for (size_t i = 0; i < s.list.size(); ++i) {
    if (IdOf(s.list[i]) != id) continue;
    const uint8_t had = TiersOf(s.list[i]);
    const uint8_t left = had & static_cast<uint8_t>(~mask);
    if (left != 0) {
      s.list[i] = static_cast<Holder>(id | (left << kIdBits));
    } else if (had != 0) {
      s.list[i] = s.list.back();
      s.list.pop_back();
      --s.count;
    }
    return had;
  }
  return 0;
}

bool HolderTable::Add(uint64_t key, uint16_t id, int tier) {
  const Holder bit = static_cast<Holder>(1u << (kIdBits + tier));
  const size_t p = Find(key);
  if (p == kNone) {
    Insert(key, kOneUse | id | bit);
    return true;
  }
  uint64_t& w = slots_[p].holders;
  if ((w & kUses) != kUses) w += kOneUse;
  if (Spilled(w)) return SpillAdd(spills_[SpillIndex(w)], id, tier);
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
  const uint32_t index = NewSpill();
  Spill& s = spills_[index];
  s.list.reserve(kInline * 2);
  for (int i = 0; i < kInline; ++i) s.list.push_back(InlineAt(w, i));
  s.count = kInline;
  w = (w & kUses) | kSpillBit | index;
  return SpillAdd(s, id, tier);
}

// Back inline when a spill has kInline holders or fewer.
void HolderTable::MaybeUnspill(uint64_t& w) {
  Spill& s = spills_[SpillIndex(w)];
  if (s.count > kInline) return;
  uint64_t inline_word = 0;
  int i = 0;
  if (s.IsBitmap()) {
    const Bitmap b{.bits = s.bits.data(), .words = s.bits.size() / kMaxTiers};
    for (size_t k = 0; k < b.words; ++k) {
      for (uint64_t any = AnyTier(b, k); any != 0; any &= any - 1) {
        const uint16_t id = static_cast<uint16_t>(64 * k + std::countr_zero(any));
        inline_word |= uint64_t{static_cast<Holder>(id | (BitmapTiers(b, id) << kIdBits))} << (16 * i++);
      }
    }
  } else {
    for (Holder h : s.list) inline_word |= uint64_t{h} << (16 * i++);
  }
  FreeSpill(w);
  w = (w & kUses) | inline_word;
}

uint8_t HolderTable::TakeHolder(size_t p, uint16_t id) {
  uint64_t& w = slots_[p].holders;
  if (Spilled(w)) {
    const uint8_t had = SpillClear(spills_[SpillIndex(w)], id, -1);
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

bool HolderTable::Remove(uint64_t key, uint16_t id, int tier) {
  const size_t p = Find(key);
  if (p == kNone) return false;
  uint64_t& w = slots_[p].holders;
  const uint8_t bit = static_cast<uint8_t>(1u << tier);
  if (Spilled(w)) {
    const uint8_t had = SpillClear(spills_[SpillIndex(w)], id, tier);
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
  if (p == kNone) return false;
  const uint64_t w = slots_[p].holders;
  if (Spilled(w)) {
    const Spill& s = spills_[SpillIndex(w)];
    if (s.IsBitmap()) {
      const Bitmap b{.bits = s.bits.data(), .words = s.bits.size() / kMaxTiers};
      return static_cast<size_t>(id / 64) < b.words && BitmapTiers(b, id) != 0;
    }
    for (Holder h : s.list) {
      if (IdOf(h) == id) return true;
    }
    return false;
  }
  for (int i = 0; i < kInline; ++i) {
    if (InlineAt(w, i) != 0 && IdOf(InlineAt(w, i)) == id) return true;
  }
  return false;
}

int64_t HolderTable::RemoveWorker(uint16_t id, int64_t expected) {
  int64_t removed = 0;
  for (size_t p = 0; p < capacity_ && removed < expected;) {
    if (slots_[p].holders != 0 && TakeHolder(p, id) != 0) {
      ++removed;
      if (NoHolders(slots_[p].holders)) {
        Erase(p);
        continue;  // a later key may have shifted into p
      }
    }
    ++p;
  }
  return removed;
}

size_t HolderTable::MemoryBytes() const {
  size_t bytes = capacity_ * sizeof(Slot);
  bytes += spills_.capacity() * sizeof(Spill);
  for (const Spill& s : spills_) {
    bytes += s.list.capacity() * sizeof(Holder) + s.bits.capacity() * sizeof(uint64_t);
  }
  bytes += free_spills_.capacity() * sizeof(uint32_t);
  return bytes;
}

}  // namespace tandem::gateway
