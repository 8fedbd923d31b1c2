#include "gateway/routing/spill_arena.h"

#include <algorithm>
#include <new>

#include "common/check.h"

namespace tandem::gateway {

SpillPages::~SpillPages() {
  absl::MutexLock lock(&mu_);
  for (const Mapping& m : mappings_) m.free(m.p, kHugePageBytes);
}

void* SpillPages::Take(size_t bytes) {
  TANDEM_CHECK(bytes <= kHugePageBytes && bytes % 16 == 0, "a slice of at most a huge page")
      << bytes;
  absl::MutexLock lock(&mu_);
  if (static_cast<size_t>(end_ - next_) < bytes) {
    // The old tail (less than a slice) stays unused.
    Mapping m{.p = nullptr, .free = nullptr};
    m.p = AllocateZeroed(kHugePageBytes, &m.free);
    mappings_.push_back(m);
    next_ = static_cast<char*>(m.p);
    end_ = next_ + kHugePageBytes;
  }
  void* p = next_;
  next_ += bytes;
  return p;
}

size_t SpillPages::mapped() const {
  absl::MutexLock lock(&mu_);
  return mappings_.size() * kHugePageBytes;
}

SpillArena::~SpillArena() {
  for (void* p : heap_slices_) ::operator delete (p, std::align_val_t{kAlign});
}

void SpillArena::set_pages(SpillPages* pages) {
  TANDEM_CHECK(slice_bytes_ == 0, "an arena's pages are set before it allocates");
  pages_ = pages;
}

void* SpillArena::Allocate(size_t bytes) {
  const size_t rounded = RoundUp(bytes);
  if (rounded > kMaxBlockBytes) {
    heap_bytes_ += bytes;
    return ::operator new (bytes, std::align_val_t{kAlign});
  }
  in_use_ += rounded;
  FreeBlock*& head = free_[ClassOf(rounded)];
  if (head != nullptr) {
    FreeBlock* b = head;
    head = b->next;
    return b;
  }
  if (static_cast<size_t>(end_ - next_) < rounded) NewSlice(rounded);
  void* p = next_;
  next_ += rounded;
  return p;
}

void SpillArena::Free(void* p, size_t bytes) {
  const size_t rounded = RoundUp(bytes);
  if (rounded > kMaxBlockBytes) {
    heap_bytes_ -= bytes;
    ::operator delete (p, std::align_val_t{kAlign});
    return;
  }
  in_use_ -= rounded;
  Push(p, rounded);
}

void SpillArena::FreeInto(void* arena, void* p, size_t bytes) {
  static_cast<SpillArena*>(arena)->Free(p, bytes);
}

void SpillArena::Push(void* p, size_t rounded) {
  FreeBlock*& head = free_[ClassOf(rounded)];
  head = new (p) FreeBlock{.next = head};
}

void SpillArena::NewSlice(size_t rounded) {
  // The old tail (shorter than `rounded`, so within the classes) is a
  // block of its own size.
  if (const auto tail = static_cast<size_t>(end_ - next_); tail >= kAlign) Push(next_, tail);
  const size_t bytes =
      std::max(rounded, last_slice_bytes_ == 0 ? kFirstSliceBytes
                                               : std::min(2 * last_slice_bytes_, kMaxSliceBytes));
  void* p = nullptr;
  if (pages_ != nullptr) {
    p = pages_->Take(bytes);
  } else {
    p = ::operator new (bytes, std::align_val_t{kAlign});
    heap_slices_.push_back(p);
  }
  last_slice_bytes_ = bytes;
  slice_bytes_ += bytes;
  next_ = static_cast<char*>(p);
  end_ = next_ + bytes;
}

}  // namespace tandem::gateway
