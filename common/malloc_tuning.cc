#include "common/malloc_tuning.h"

#include <malloc.h>

namespace tandem::common {

void KeepLargeBuffersInHeap(int64_t mmap_threshold, int64_t trim_threshold) {
  // Fixed values also switch off glibc's dynamic threshold adjustment.
  mallopt(M_MMAP_THRESHOLD, static_cast<int>(mmap_threshold));
  mallopt(M_TRIM_THRESHOLD, static_cast<int>(trim_threshold));
}

}  // namespace tandem::common
