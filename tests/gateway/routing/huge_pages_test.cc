// Slot arrays' memory: small ones from the heap, large ones mapped on
// their own, aligned to a huge page and advised to use huge pages; all of
// it zeroed, and freed by what allocated it.
#include "gateway/routing/huge_pages.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>

namespace tandem::gateway {
namespace {

bool AllZero(const void* p, size_t bytes) {
  const auto* b = static_cast<const unsigned char*>(p);
  for (size_t i = 0; i < bytes; i += 4093) {
    if (b[i] != 0) return false;
  }
  return b[bytes - 1] == 0;
}

// The VmFlags of the mapping holding `p`, from /proc/self/smaps.
std::string VmFlagsOf(const void* p) {
  std::ifstream smaps("/proc/self/smaps");
  const auto at = reinterpret_cast<uintptr_t>(p);
  std::string line;
  bool inside = false;
  while (std::getline(smaps, line)) {
    uintptr_t from = 0, to = 0;
    char dash = 0;
    std::istringstream range(line);
    if (range >> std::hex >> from >> dash >> to && dash == '-' && line.find(':') > line.find(' ')) {
      inside = from <= at && at < to;
      continue;
    }
    if (inside && line.rfind("VmFlags:", 0) == 0) return line;
  }
  return "";
}

TEST(HugePagesTest, SmallArraysComeFromTheHeapZeroed) {
  FreeFunction free = nullptr;
  void* p = AllocateZeroed(kHugePageBytes - 16, &free);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(free, &FreeWithDelete);
  EXPECT_TRUE(AllZero(p, kHugePageBytes - 16));
  free(p, kHugePageBytes - 16);
}

TEST(HugePagesTest, LargeArraysAreMappedOnHugePagesZeroed) {
  const size_t bytes = 3 * kHugePageBytes + 4096 + 16;  // a tail past the whole pages
  const auto page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  FreeFunction free = nullptr;
  const size_t mapped = MappedBytes();
  auto* p = static_cast<unsigned char*>(AllocateZeroed(bytes, &free));
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(free, &FreeMapping);
  EXPECT_EQ(MappedBytes(), mapped + (bytes + page - 1) / page * page);  // whole pages
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % kHugePageBytes, 0u);
  EXPECT_TRUE(AllZero(p, bytes));
  for (size_t i = 0; i < bytes; i += page) p[i] = 1;  // every page writable
  p[bytes - 1] = 1;
  struct stat thp;
  if (stat("/sys/kernel/mm/transparent_hugepage", &thp) == 0) {
    // Advised ("hg"), whatever the kernel then gives.
    EXPECT_NE(VmFlagsOf(p).find(" hg"), std::string::npos) << VmFlagsOf(p);
  }
  free(p, bytes);
  EXPECT_EQ(MappedBytes(), mapped);
}

}  // namespace
}  // namespace tandem::gateway
