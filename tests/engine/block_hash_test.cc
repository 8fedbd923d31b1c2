#include "engine/block_hash.h"

#include <gtest/gtest.h>
#include <xxhash.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <set>
#include <span>
#include <utility>
#include <vector>

namespace tandem::engine {
namespace {

constexpr int32_t kBlockSize = 16;
constexpr uint64_t kFingerprint = 0xabcdef0123456789ull;

std::vector<int32_t> RandomTokens(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> id(0, 151935);
  std::vector<int32_t> tokens(n);
  for (int32_t& t : tokens) t = id(rng);
  return tokens;
}

void PutLe(std::vector<uint8_t>& out, uint64_t v, int width) {
  for (int i = 0; i < width; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}

TEST(BlockHashTest, HashesTheDocumentedCanonicalBytes) {
  const std::vector<int32_t> ids = {1, -2, 70000, 0};
  std::vector<uint8_t> bytes;
  PutLe(bytes, 0x1122334455667788ull, 8);  // parent
  PutLe(bytes, kFingerprint, 8);
  PutLe(bytes, 42, 8);                     // salt
  PutLe(bytes, ids.size(), 8);
  for (const int32_t id : ids) PutLe(bytes, static_cast<uint32_t>(id), 4);
  EXPECT_EQ(BlockHash(0x1122334455667788ull, ids, kFingerprint, 42),
            XXH3_64bits_withSeed(bytes.data(), bytes.size(), kBlockHashSeed));
}

// Pins the hash: a change here orphans every block in every cache and index,
// so it must be deliberate.
TEST(BlockHashTest, GoldenValueIsStable) {
  const std::vector<int32_t> ids = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
  EXPECT_EQ(BlockHash(kRootParentHash, ids, 1, 0), 0xf555275076e0cf08ull);
}

TEST(BlockHashTest, ChainLinksEachFullBlockToItsParent) {
  const std::vector<int32_t> tokens = RandomTokens(5 * kBlockSize, 1);
  const std::vector<uint64_t> hashes = PrefixBlockHashes(tokens, kBlockSize, kFingerprint);
  ASSERT_EQ(hashes.size(), 5u);
  uint64_t parent = kRootParentHash;
  for (size_t i = 0; i < hashes.size(); ++i) {
    const std::span<const int32_t> block(tokens.data() + i * kBlockSize, kBlockSize);
    EXPECT_EQ(hashes[i], BlockHash(parent, block, kFingerprint));
    parent = hashes[i];
  }
}

TEST(BlockHashTest, OnlyFullBlocksAreHashed) {
  const std::vector<int32_t> tokens = RandomTokens(3 * kBlockSize + 5, 2);
  const std::vector<uint64_t> all = PrefixBlockHashes(tokens, kBlockSize, kFingerprint);
  for (size_t n = 0; n <= tokens.size(); ++n) {
    const std::vector<uint64_t> prefix =
        PrefixBlockHashes(std::span(tokens).first(n), kBlockSize, kFingerprint);
    ASSERT_EQ(prefix.size(), n / kBlockSize) << n;
    EXPECT_TRUE(std::equal(prefix.begin(), prefix.end(), all.begin())) << n;
  }
}

TEST(BlockHashTest, SamePrefixGivesSameHashes) {
  std::vector<int32_t> a = RandomTokens(6 * kBlockSize, 3);
  std::vector<int32_t> b = a;
  b[3 * kBlockSize + 7] += 1;  // diverge inside block 3
  b.resize(5 * kBlockSize + 3);
  const std::vector<uint64_t> ha = PrefixBlockHashes(a, kBlockSize, kFingerprint);
  const std::vector<uint64_t> hb = PrefixBlockHashes(b, kBlockSize, kFingerprint);
  ASSERT_EQ(hb.size(), 5u);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(ha[i], hb[i]) << i;
  for (size_t i = 3; i < 5; ++i) EXPECT_NE(ha[i], hb[i]) << i;
  EXPECT_EQ(PrefixBlockHashes(a, kBlockSize, kFingerprint), ha);  // deterministic
}

TEST(BlockHashTest, OneChangedTokenChangesItsBlockAndAllAfter) {
  const std::vector<int32_t> tokens = RandomTokens(5 * kBlockSize, 4);
  const std::vector<uint64_t> base = PrefixBlockHashes(tokens, kBlockSize, kFingerprint);
  for (size_t pos = 0; pos < tokens.size(); ++pos) {
    std::vector<int32_t> changed = tokens;
    changed[pos] ^= 1;
    const std::vector<uint64_t> h = PrefixBlockHashes(changed, kBlockSize, kFingerprint);
    const size_t block = pos / kBlockSize;
    for (size_t i = 0; i < base.size(); ++i) {
      if (i < block) {
        EXPECT_EQ(h[i], base[i]) << "pos " << pos << " block " << i;
      } else {
        EXPECT_NE(h[i], base[i]) << "pos " << pos << " block " << i;
      }
    }
  }
}

TEST(BlockHashTest, SwappedTokensChangeTheHash) {
  std::vector<int32_t> tokens = RandomTokens(kBlockSize, 5);
  tokens[0] = 1;
  tokens[1] = 2;
  const uint64_t before = BlockHash(kRootParentHash, tokens, kFingerprint);
  std::swap(tokens[0], tokens[1]);
  EXPECT_NE(BlockHash(kRootParentHash, tokens, kFingerprint), before);
}

TEST(BlockHashTest, SaltAndFingerprintChangeEveryHash) {
  const std::vector<int32_t> tokens = RandomTokens(4 * kBlockSize, 6);
  const std::vector<uint64_t> base = PrefixBlockHashes(tokens, kBlockSize, kFingerprint, 0);
  const std::vector<uint64_t> salted = PrefixBlockHashes(tokens, kBlockSize, kFingerprint, 1);
  const std::vector<uint64_t> other = PrefixBlockHashes(tokens, kBlockSize, kFingerprint + 1, 0);
  ASSERT_EQ(salted.size(), base.size());
  for (size_t i = 0; i < base.size(); ++i) {
    EXPECT_NE(salted[i], base[i]) << i;
    EXPECT_NE(other[i], base[i]) << i;
  }
  EXPECT_EQ(PrefixBlockHashes(tokens, kBlockSize, kFingerprint, 1), salted);
}

TEST(BlockHashTest, LengthIsPartOfTheHash) {
  const std::vector<int32_t> a = {5, 6, 7};
  const std::vector<int32_t> b = {5, 6, 7, 0};
  EXPECT_NE(BlockHash(kRootParentHash, a, kFingerprint),
            BlockHash(kRootParentHash, b, kFingerprint));
}

TEST(BlockHashTest, DistinctBlocksGetDistinctHashes) {
  std::set<uint64_t> seen;
  const std::vector<int32_t> tokens = RandomTokens(2000 * kBlockSize, 7);
  for (const uint64_t h : PrefixBlockHashes(tokens, kBlockSize, kFingerprint)) {
    EXPECT_TRUE(seen.insert(h).second);
  }
  EXPECT_EQ(seen.size(), 2000u);
}

}  // namespace
}  // namespace tandem::engine
