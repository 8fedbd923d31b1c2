// Process-wide allocator settings for processes that move large buffers
// (KV blocks of 100+ KiB each, several per request). glibc serves such
// allocations with mmap and returns them with munmap, so every block a
// transfer touches costs page faults and zeroed pages; the KV transfer
// bench showed ~40% of a transfer's time there. Keeping them in the heap
// (reused, trimmed past a threshold) removes that. Call once, first thing in
// main. Not thread-safe (before other threads start).
#ifndef TANDEM_COMMON_MALLOC_TUNING_H_
#define TANDEM_COMMON_MALLOC_TUNING_H_

#include <cstdint>

namespace tandem::common {

// Allocations below `mmap_threshold` come from the heap; free memory at the
// heap's top is returned to the OS past `trim_threshold`. The trim threshold
// must exceed what one request frees at once (a 2000-token prompt's KV is
// 33 MB on the 25.7M model, and is freed together with its wire buffers):
// at 64 MiB the bench still spent its time in page faults, at 256 MiB not.
void KeepLargeBuffersInHeap(int64_t mmap_threshold = int64_t{32} << 20,
                            int64_t trim_threshold = int64_t{256} << 20);

}  // namespace tandem::common

#endif  // TANDEM_COMMON_MALLOC_TUNING_H_
