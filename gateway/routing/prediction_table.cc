#include "gateway/routing/prediction_table.h"

#include <utility>

namespace tandem::gateway {

void PredictionTable::Insert(uint64_t key, uint16_t id, int64_t until_ns) {
  if (records_ == nullptr) {
    Resize(kMinCapacity);
  } else if (2 * (size_ + 1) > mask_ + 1) {
    Resize(2 * (mask_ + 1));
  }
  Place(Record{.key = key, .until_ns = until_ns, .id = id});
  ++size_;
}

int64_t PredictionTable::EraseIf(absl::FunctionRef<bool(uint16_t id, int64_t until_ns)> gone,
                                 absl::FunctionRef<void(uint64_t key)> erased) {
  if (size_ == 0) return 0;
  const size_t capacity = mask_ + 1;
  int64_t n = 0;
  for (size_t p = 0; p < capacity; ++p) {
    Record& r = records_[p];
    if (r.id == 0 || !gone(r.id, r.until_ns)) continue;
    erased(r.key);
    r.id = 0;  // a hole for now: the runs are rebuilt below
    ++n;
  }
  if (n == 0) return 0;
  size_ -= static_cast<size_t>(n);
  // The kept records go into a fresh array; a table a burst grew, left an
  // eighth full, shrinks.
  size_t target = capacity;
  while (target > kMinCapacity && 8 * size_ < target) target /= 2;
  Resize(target);
  return n;
}

void PredictionTable::Resize(size_t capacity) {
  std::unique_ptr<Record[]> old = std::move(records_);
  const size_t old_capacity = old == nullptr ? 0 : mask_ + 1;
  records_.reset(new Record[capacity]);
  mask_ = capacity - 1;
  for (size_t p = 0; p < old_capacity; ++p) {
    if (old[p].id != 0) Place(old[p]);
  }
}

}  // namespace tandem::gateway
