#include "gateway/routing/huge_pages.h"

#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <new>

namespace tandem::gateway {
namespace {

std::atomic<size_t> mapped_bytes{0};

size_t RoundUp(size_t bytes, size_t to) { return (bytes + to - 1) / to * to; }

size_t PageBytes() {
  static const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return page;
}

// A mapping of `bytes` (rounded up to pages) starting on a huge page, or
// null.
void* MapAligned(size_t bytes) {
  const size_t length = RoundUp(bytes, PageBytes());
  // Over-mapped by a huge page, then trimmed to start on one.
  const size_t over = length + kHugePageBytes;
  void* m = mmap(nullptr, over, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) return nullptr;
  const auto at = reinterpret_cast<uintptr_t>(m);
  const uintptr_t aligned = RoundUp(at, kHugePageBytes);
  if (aligned > at) munmap(m, aligned - at);
  const uintptr_t end = at + over;
  if (end > aligned + length)
    munmap(reinterpret_cast<void*>(aligned + length), end - aligned - length);
  void* p = reinterpret_cast<void*>(aligned);
  mapped_bytes.fetch_add(length, std::memory_order_relaxed);
  // Advice only: on a kernel without transparent huge pages it fails, and
  // the mapping is ordinary memory.
  madvise(p, length, MADV_HUGEPAGE);
  return p;
}

}  // namespace

void FreeWithDelete(void* p, size_t) { ::operator delete(p); }

void FreeMapping(void* p, size_t bytes) {
  const size_t length = RoundUp(bytes, PageBytes());
  munmap(p, length);
  mapped_bytes.fetch_sub(length, std::memory_order_relaxed);
}

size_t MappedBytes() { return mapped_bytes.load(std::memory_order_relaxed); }

void* AllocateZeroed(size_t bytes, FreeFunction* free) {
  if (bytes >= kHugePageBytes) {
    // Fresh anonymous pages read as zeros, and only those written are
    // backed.
    if (void* p = MapAligned(bytes); p != nullptr) {
      *free = &FreeMapping;
      return p;
    }
  }
  void* p = ::operator new(bytes);
  std::memset(p, 0, bytes);
  *free = &FreeWithDelete;
  return p;
}

}  // namespace tandem::gateway
