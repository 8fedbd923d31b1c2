// The dispatched checksum is XXH3-64 exactly: the system libxxhash's digest
// for every size (each of XXH3's size classes and stripe boundaries) and
// however the bytes are cut into pieces.
#include "kvtransfer/checksum.h"

#include <gtest/gtest.h>
#include <xxhash.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

namespace tandem::kvtransfer {
namespace {

std::string RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string bytes(n, '\0');
  for (char& c : bytes) c = static_cast<char>(rng());
  return bytes;
}

TEST(ChecksumTest, OneShotIsXxh3AtEverySizeClass) {
  std::printf("checksum implementation: %.*s\n",
              static_cast<int>(ChecksumImplementation().size()), ChecksumImplementation().data());
  for (size_t n = 0; n <= 2100; ++n) {
    const std::string bytes = RandomBytes(n, static_cast<uint32_t>(n));
    ASSERT_EQ(ChecksumOf(bytes.data(), n), XXH3_64bits(bytes.data(), n)) << n << " bytes";
  }
  for (const size_t n : {size_t{262144}, size_t{262144 + 72}, size_t{1} << 20}) {
    const std::string bytes = RandomBytes(n, 9);
    ASSERT_EQ(ChecksumOf(bytes.data(), n), XXH3_64bits(bytes.data(), n)) << n << " bytes";
  }
}

TEST(ChecksumTest, PiecesDigestAsTheirConcatenation) {
  std::mt19937 rng(5);
  for (int trial = 0; trial < 300; ++trial) {
    const size_t n = rng() % (trial < 200 ? 3000 : 300000);
    const std::string bytes = RandomBytes(n, static_cast<uint32_t>(trial));
    Checksum checksum;
    size_t at = 0;
    while (at < n) {
      const size_t piece = std::min<size_t>(n - at, rng() % 9000);
      checksum.Update(bytes.data() + at, piece);
      at += piece;
    }
    ASSERT_EQ(checksum.Digest(), XXH3_64bits(bytes.data(), n)) << "trial " << trial;
  }
}

TEST(ChecksumTest, MovedChecksumKeepsItsState) {
  const std::string bytes = RandomBytes(5000, 1);
  Checksum a;
  a.Update(bytes.data(), 1000);
  Checksum b = std::move(a);
  b.Update(bytes.data() + 1000, 4000);
  EXPECT_EQ(b.Digest(), XXH3_64bits(bytes.data(), bytes.size()));
}

}  // namespace
}  // namespace tandem::kvtransfer
