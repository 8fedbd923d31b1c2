// Transparent huge pages for the CPU backend's large buffers (packed
// weights, the KV pool): memory read end to end every step, where 4 KiB
// pages cost a TLB walk each and stop the hardware prefetchers at their
// edge. The advice needs 2 MiB-aligned memory; where THP is off
// (/sys/kernel/mm/transparent_hugepage/enabled = never) it is ignored.
#ifndef TANDEM_ENGINE_CPU_HUGE_PAGES_H_
#define TANDEM_ENGINE_CPU_HUGE_PAGES_H_

#include <sys/mman.h>

#include <cstddef>

namespace tandem::engine::cpu {

inline constexpr size_t kHugePageBytes = size_t{2} << 20;

// Asks for [p, p + bytes) to be backed by huge pages (a hint).
inline void AdviseHugePages(void* p, size_t bytes) { (void)madvise(p, bytes, MADV_HUGEPAGE); }

}  // namespace tandem::engine::cpu

#endif  // TANDEM_ENGINE_CPU_HUGE_PAGES_H_
