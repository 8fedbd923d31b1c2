#include "gateway/routing/spill_arena.h"

#include <sanitizer/asan_interface.h>

#include <algorithm>
#include <new>

#include "common/check.h"

namespace tandem::gateway {

SpillPages::~SpillPages() {
  absl::MutexLock lock(&mu_);
  for (const Mapping& m : mappings_) {
    // Freed blocks are poisoned under ASan (SpillArena::Push): a later
    // mapping at this address must not read as poisoned.
    ASAN_UNPOISON_MEMORY_REGION(m.p, kHugePageBytes);
    m.free(m.p, kHugePageBytes);
  }
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

namespace {

void* HeapBlock(size_t bytes) {
  return ::operator new(bytes, std::align_val_t{SpillArena::kAlign});
}

void FreeHeapBlock(void* p) { ::operator delete(p, std::align_val_t{SpillArena::kAlign}); }

}  // namespace

SpillArena::~SpillArena() {
  for (const auto& [p, bytes] : heap_slices_) {
    ASAN_UNPOISON_MEMORY_REGION(p, bytes);
    FreeHeapBlock(p);
  }
}

void SpillArena::set_pages(SpillPages* pages) {
  TANDEM_CHECK(slice_bytes_ == 0, "an arena's pages are set before it allocates");
  pages_ = pages;
}

void* SpillArena::Allocate(size_t bytes) {
  const size_t rounded = RoundUp(bytes);
  if (rounded > kMaxBlockBytes) {
    heap_bytes_ += bytes;
    return HeapBlock(bytes);
  }
  in_use_ += rounded;
  FreeBlock*& head = free_[ClassOf(rounded)];
  if (head != nullptr) {
    FreeBlock* b = head;
    ASAN_UNPOISON_MEMORY_REGION(b, rounded);
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
    FreeHeapBlock(p);
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
  // Under ASan a read of a freed spill (by a reader the limbo should have
  // waited for) fails as a use after free, as it would with the heap's.
  ASAN_POISON_MEMORY_REGION(p, rounded);
}

void SpillArena::NewSlice(size_t rounded) {
  // The old tail (shorter than `rounded`, so within the classes) is a
  // block of its own size.
  if (const auto tail = static_cast<size_t>(end_ - next_); tail >= kAlign) Push(next_, tail);
  const size_t next_slice =
      last_slice_bytes_ == 0 ? kFirstSliceBytes : std::min(2 * last_slice_bytes_, kMaxSliceBytes);
  const size_t bytes = std::max(rounded, next_slice);
  void* p = nullptr;
  if (pages_ != nullptr) {
    p = pages_->Take(bytes);
  } else {
    p = HeapBlock(bytes);
    heap_slices_.emplace_back(p, bytes);
  }
  last_slice_bytes_ = bytes;
  slice_bytes_ += bytes;
  next_ = static_cast<char*>(p);
  end_ = next_ + bytes;
}

}  // namespace tandem::gateway
