// A shard's spills' memory: blocks aligned and reused by size, chunks that
// double from 64 KiB up to one huge page each, large blocks from the heap,
// and its count of what it holds. Freed blocks are written to (the free
// list), so the sanitizers' runs check that nothing is handed out twice.
#include "gateway/routing/spill_arena.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <set>
#include <vector>

#include "gateway/routing/huge_pages.h"

namespace tandem::gateway {
namespace {

TEST(SpillArenaTest, BlocksAreAlignedDistinctAndWritable) {
  SpillArena arena;
  std::set<uintptr_t> seen;
  for (size_t bytes = 1; bytes <= SpillArena::kMaxBlockBytes; bytes += 7) {
    void* p = arena.Allocate(bytes);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % SpillArena::kAlign, 0u) << bytes;
    EXPECT_TRUE(seen.insert(reinterpret_cast<uintptr_t>(p)).second) << bytes;
    std::memset(p, 0xab, bytes);
  }
}

TEST(SpillArenaTest, AFreedBlockIsTheNextOfItsSize) {
  SpillArena arena;
  void* a = arena.Allocate(40);
  void* b = arena.Allocate(48);
  const size_t in_use = arena.in_use();
  EXPECT_EQ(in_use, 48u + 48u);  // rounded up to 16 bytes
  arena.Free(a, 40);
  EXPECT_EQ(arena.in_use(), 48u);
  void* c = arena.Allocate(100);  // another size: not a's
  EXPECT_NE(c, a);
  EXPECT_EQ(arena.Allocate(33), a);  // 33 and 40 round to 48
  arena.Free(b, 48);
  arena.Free(c, 100);
  arena.Free(a, 33);
  EXPECT_EQ(arena.in_use(), 0u);
}

TEST(SpillArenaTest, SlicesDoubleFromOneKibUpTo64Kib) {
  SpillArena arena;
  EXPECT_EQ(arena.footprint(), 0u);
  arena.Allocate(16);
  EXPECT_EQ(arena.footprint(), SpillArena::kFirstSliceBytes);
  size_t total = 16;
  while (total < size_t{1} << 20) {
    arena.Allocate(16);
    total += 16;
  }
  size_t expected = 0;
  for (size_t slice = SpillArena::kFirstSliceBytes; expected < total;
       slice = std::min(2 * slice, SpillArena::kMaxSliceBytes)) {
    expected += slice;
  }
  EXPECT_EQ(arena.footprint(), expected);
  EXPECT_EQ(arena.in_use(), total);
}

TEST(SpillArenaTest, ABlockLargerThanTheNextSliceGetsASliceOfItsOwnSize) {
  SpillArena arena;
  arena.Allocate(16);  // the first slice: 1 KiB
  void* big = arena.Allocate(SpillArena::kMaxBlockBytes);
  std::memset(big, 1, SpillArena::kMaxBlockBytes);
  EXPECT_EQ(arena.footprint(), SpillArena::kFirstSliceBytes + SpillArena::kMaxBlockBytes);
  // The first slice's tail went onto a free list: the next small block is
  // carved from it, not from a new slice.
  void* small = arena.Allocate(SpillArena::kFirstSliceBytes - 16);
  EXPECT_EQ(arena.footprint(), SpillArena::kFirstSliceBytes + SpillArena::kMaxBlockBytes);
  std::memset(small, 2, SpillArena::kFirstSliceBytes - 16);
}

TEST(SpillArenaTest, ArenasShareTheIndexsHugePages) {
  SpillPages pages;
  const size_t mapped = MappedBytes();
  SpillArena a;
  SpillArena b;
  a.set_pages(&pages);
  b.set_pages(&pages);
  EXPECT_EQ(pages.mapped(), 0u);
  auto* pa = static_cast<char*>(a.Allocate(100));
  auto* pb = static_cast<char*>(b.Allocate(100));
  // One mapping of a huge page (huge_pages.h), a slice for each.
  EXPECT_EQ(pages.mapped(), kHugePageBytes);
  EXPECT_EQ(MappedBytes() - mapped, kHugePageBytes);
  EXPECT_EQ(a.footprint(), SpillArena::kFirstSliceBytes);
  const auto distance = pa < pb ? pb - pa : pa - pb;
  EXPECT_LT(static_cast<size_t>(distance), kHugePageBytes);
  std::memset(pa, 1, 100);
  std::memset(pb, 2, 100);
  // Past the mapping's end, another.
  size_t taken = 2 * SpillArena::kFirstSliceBytes;
  while (taken <= kHugePageBytes) {
    a.Allocate(SpillArena::kMaxBlockBytes);
    taken += SpillArena::kMaxBlockBytes;
  }
  EXPECT_EQ(pages.mapped(), 2 * kHugePageBytes);
}

TEST(SpillArenaTest, LargeBlocksComeFromTheHeapAndCount) {
  SpillArena arena;
  const size_t bytes = SpillArena::kMaxBlockBytes + 1;
  void* p = arena.Allocate(bytes);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % SpillArena::kAlign, 0u);
  std::memset(p, 1, bytes);
  EXPECT_EQ(arena.footprint(), bytes);
  EXPECT_EQ(arena.in_use(), 0u);  // blocks of the chunks only
  arena.Free(p, bytes);
  EXPECT_EQ(arena.footprint(), 0u);
}

TEST(SpillArenaTest, ALimboFreesIntoTheArena) {
  SpillArena arena;
  void* p = arena.Allocate(64);
  SpillArena::FreeInto(&arena, p, 64);
  EXPECT_EQ(arena.in_use(), 0u);
  EXPECT_EQ(arena.Allocate(64), p);
}

}  // namespace
}  // namespace tandem::gateway
