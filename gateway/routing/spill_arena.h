// Memory for the block index's spilled holder sets (gateway/routing/
// holder_table.h). A route reads a spill for each block of a popular
// prefix, and spills from the heap lie on ordinary pages among everything
// else the gateway allocates, so past a few MiB of them most such reads
// also miss the TLB and walk the page tables (and the writers' reads of
// them too). The index's spills come instead from SpillPages: 2 MiB
// mappings on huge pages (gateway/routing/huge_pages.h), each one TLB entry
// for thousands of spills, shared by every shard. Each shard's SpillArena
// takes slices of them (from 1 KiB, doubling up to 64 KiB, so that an index
// of a few blocks takes little) and carves its spills from those: blocks
// rounded up to 16 bytes, a freed block put on the free list of its size
// for the next spill of that size (spills come in few sizes: lists that
// double, bitmaps of a word per 64 workers and tier). Neither gives memory
// back before it goes; what the index holds stays within what its largest
// working set needed. Blocks past kMaxBlockBytes (bitmaps of thousands of
// workers in several tiers) come from the heap.
#ifndef TANDEM_GATEWAY_ROUTING_SPILL_ARENA_H_
#define TANDEM_GATEWAY_ROUTING_SPILL_ARENA_H_

#include <array>
#include <cstddef>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "gateway/routing/huge_pages.h"

namespace tandem::gateway {

// The huge pages an index's arenas take their slices from. Thread-safe.
class SpillPages {
 public:
  SpillPages() = default;
  ~SpillPages();
  SpillPages(const SpillPages&) = delete;
  SpillPages& operator=(const SpillPages&) = delete;

  // `bytes` (a multiple of 16, at most kHugePageBytes), aligned to 16,
  // until this goes.
  void* Take(size_t bytes);
  // Bytes mapped so far.
  size_t mapped() const;

 private:
  struct Mapping {
    void* p;
    FreeFunction free;
  };
  mutable absl::Mutex mu_;
  std::vector<Mapping> mappings_ ABSL_GUARDED_BY(mu_);
  char* next_ ABSL_GUARDED_BY(mu_) = nullptr;  // the last mapping's unused tail
  char* end_ ABSL_GUARDED_BY(mu_) = nullptr;
};

// One shard's spills. Thread-compatible: the shard's lock guards it.
class SpillArena {
 public:
  static constexpr size_t kAlign = 16;
  static constexpr size_t kMaxBlockBytes = 4096;
  static constexpr size_t kFirstSliceBytes = size_t{1} << 10;
  static constexpr size_t kMaxSliceBytes = size_t{64} << 10;

  SpillArena() = default;
  ~SpillArena();
  SpillArena(const SpillArena&) = delete;
  SpillArena& operator=(const SpillArena&) = delete;

  // Takes its slices from `pages` (which must outlive it) rather than the
  // heap; before the first Allocate.
  void set_pages(SpillPages* pages);
  // `bytes` (> 0), aligned to kAlign; not zeroed.
  void* Allocate(size_t bytes);
  // Takes back what Allocate(bytes) returned.
  void Free(void* p, size_t bytes);
  // Free for a Reclaimer::Limbo: `arena` is the SpillArena.
  static void FreeInto(void* arena, void* p, size_t bytes);

  // Bytes this arena took: its slices (their free blocks and unused tails
  // included) and its blocks from the heap.
  size_t footprint() const { return slice_bytes_ + heap_bytes_; }
  // Bytes of blocks of its slices handed out and not freed (rounded up to
  // kAlign).
  size_t in_use() const { return in_use_; }

 private:
  struct FreeBlock {
    FreeBlock* next;
  };
  static size_t RoundUp(size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }
  static size_t ClassOf(size_t rounded) { return rounded / kAlign - 1; }
  // Moves on to a new slice with room for `rounded`, the old one's tail
  // going onto its size's free list.
  void NewSlice(size_t rounded);
  void Push(void* p, size_t rounded);

  SpillPages* pages_ = nullptr;                                // null: slices from the heap
  std::array<FreeBlock*, kMaxBlockBytes / kAlign> free_ = {};  // by ClassOf
  std::vector<std::pair<void*, size_t>> heap_slices_;          // without pages_
  // The current slice's unused tail.
  char* next_ = nullptr;
  char* end_ = nullptr;
  size_t last_slice_bytes_ = 0;
  size_t slice_bytes_ = 0;
  size_t heap_bytes_ = 0;
  size_t in_use_ = 0;
};

}  // namespace tandem::gateway

#endif  // TANDEM_GATEWAY_ROUTING_SPILL_ARENA_H_
