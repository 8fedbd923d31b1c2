// Memory for the block index's slot arrays (gateway/routing/holder_table.h).
// A route reads one slot of a shard's array per block of the prompt, each
// on a page of its own, so past a few MiB of tables every read also misses
// the TLB and walks the page tables (a walk's prefetches stall on it). An
// array of kHugePageBytes or more is therefore mapped on its own, aligned to
// a huge page, and advised to the kernel's transparent huge pages
// (madvise(MADV_HUGEPAGE)): each whole 2 MiB it spans is then one TLB entry
// rather than 512, while a smaller array (or the tail past its last whole
// huge page) stays on ordinary pages, so no memory is spent on rounding.
// Where the kernel gives no huge pages (transparent_hugepage "never"), the
// mapping works as ordinary memory. A table grows into such an array under
// its shard's writers' lock, so a fault that waits for the kernel to find
// a huge page delays that shard's writers, never a route.
#ifndef TANDEM_GATEWAY_ROUTING_HUGE_PAGES_H_
#define TANDEM_GATEWAY_ROUTING_HUGE_PAGES_H_

#include <cstddef>

namespace tandem::gateway {

inline constexpr size_t kHugePageBytes = size_t{2} << 20;

// How an allocation is freed: ::operator delete, or munmap for a mapping.
using FreeFunction = void (*)(void* p, size_t bytes);
void FreeWithDelete(void* p, size_t bytes);
void FreeMapping(void* p, size_t bytes);

// `bytes` of zeroed memory, aligned as ::operator new's; sets *free to what
// frees it (with the same `bytes`). From kHugePageBytes up, a mapping on
// huge pages where the kernel allows (falling back to the heap where a
// mapping fails).
void* AllocateZeroed(size_t bytes, FreeFunction* free);

// Bytes of the mappings AllocateZeroed made that are not freed yet, for the
// whole process (the heap's own statistics do not see them).
size_t MappedBytes();

}  // namespace tandem::gateway

#endif  // TANDEM_GATEWAY_ROUTING_HUGE_PAGES_H_
