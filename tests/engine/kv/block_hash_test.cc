#include "engine/kv/block_hash.h"

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
  const BlockHash parent{.low = 0x1122334455667788ull, .high = 0x99aabbccddeeff00ull};
  std::vector<uint8_t> bytes;
  PutLe(bytes, parent.low, 8);
  PutLe(bytes, parent.high, 8);
  PutLe(bytes, kFingerprint, 8);
  PutLe(bytes, kBlockSize, 8);
  PutLe(bytes, 42, 8);  // salt
  PutLe(bytes, ids.size(), 8);
  for (const int32_t id : ids) PutLe(bytes, static_cast<uint32_t>(id), 4);
  const XXH128_hash_t want = XXH3_128bits_withSeed(bytes.data(), bytes.size(), kBlockHashSeed);
  const BlockHash got = HashBlock(parent, ids, kFingerprint, kBlockSize, 42);
  EXPECT_EQ(got.low, want.low64);
  EXPECT_EQ(got.high, want.high64);
}

// Pins the hashes of a known prompt: a change here orphans every block in
// every cache and index, and makes gateways and workers of different
// versions silently disagree, so it must be deliberate (and bump the block
// format version).
TEST(BlockHashTest, GoldenChainIsStable) {
  std::vector<int32_t> prompt;
  for (int32_t i = 0; i < 3 * kBlockSize + 5; ++i) prompt.push_back(1 + i * 7);
  const std::vector<BlockHash> chain = PrefixBlockHashes(prompt, kBlockSize, 1);
  ASSERT_EQ(chain.size(), 3u);
  EXPECT_EQ(chain[0].ToHex(), "e8fb1543eb30e1f06c87a070f9aff7e4");
  EXPECT_EQ(chain[1].ToHex(), "03abb83c54f18f69e94197e3bbc67bd9");
  EXPECT_EQ(chain[2].ToHex(), "91a67959ff39c82933194bfe6d11d12b");
  EXPECT_EQ(PrefixBlockHashes(prompt, kBlockSize, 1, 7)[2].ToHex(), "1b67d0bf25d2ddb5784327e02765050e");
}

TEST(BlockHashTest, ChainLinksEachFullBlockToItsParent) {
  const std::vector<int32_t> tokens = RandomTokens(5 * kBlockSize, 1);
  const std::vector<BlockHash> hashes = PrefixBlockHashes(tokens, kBlockSize, kFingerprint);
  ASSERT_EQ(hashes.size(), 5u);
  BlockHash parent = kRootParentHash;
  for (size_t i = 0; i < hashes.size(); ++i) {
    const std::span<const int32_t> block(tokens.data() + i * kBlockSize, kBlockSize);
    EXPECT_EQ(hashes[i], HashBlock(parent, block, kFingerprint, kBlockSize));
    parent = hashes[i];
  }
}

TEST(BlockHashTest, OnlyFullBlocksAreHashed) {
  const std::vector<int32_t> tokens = RandomTokens(3 * kBlockSize + 5, 2);
  const std::vector<BlockHash> all = PrefixBlockHashes(tokens, kBlockSize, kFingerprint);
  for (size_t n = 0; n <= tokens.size(); ++n) {
    const std::vector<BlockHash> prefix =
        PrefixBlockHashes(std::span(tokens).first(n), kBlockSize, kFingerprint);
    ASSERT_EQ(prefix.size(), n / kBlockSize) << n;
    EXPECT_TRUE(std::equal(prefix.begin(), prefix.end(), all.begin())) << n;
  }
}

// A router fills one vector prompt after prompt: each fill is the chain a
// fresh call returns, whatever the vector held (longer, shorter, other salt).
TEST(BlockHashTest, AKeptVectorIsFilledAsAFreshOne) {
  const std::vector<int32_t> tokens = RandomTokens(7 * kBlockSize + 3, 12);
  std::vector<BlockHash> kept;
  for (const auto& [n, salt] : {std::pair<size_t, uint64_t>{tokens.size(), 0},
                                {2 * kBlockSize, 0},
                                {5 * kBlockSize + 1, 9},
                                {0, 0},
                                {tokens.size(), 9}}) {
    const std::span<const int32_t> prompt = std::span(tokens).first(n);
    PrefixBlockHashes(prompt, kBlockSize, kFingerprint, salt, kept);
    EXPECT_EQ(kept, PrefixBlockHashes(prompt, kBlockSize, kFingerprint, salt))
        << n << " tokens, salt " << salt;
  }
}

TEST(BlockHashTest, SamePrefixGivesSameHashes) {
  std::vector<int32_t> a = RandomTokens(6 * kBlockSize, 3);
  std::vector<int32_t> b = a;
  b[3 * kBlockSize + 7] += 1;  // diverge inside block 3
  b.resize(5 * kBlockSize + 3);
  const std::vector<BlockHash> ha = PrefixBlockHashes(a, kBlockSize, kFingerprint);
  const std::vector<BlockHash> hb = PrefixBlockHashes(b, kBlockSize, kFingerprint);
  ASSERT_EQ(hb.size(), 5u);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(ha[i], hb[i]) << i;
  for (size_t i = 3; i < 5; ++i) EXPECT_NE(ha[i], hb[i]) << i;
  EXPECT_EQ(PrefixBlockHashes(a, kBlockSize, kFingerprint), ha);  // deterministic
}

TEST(BlockHashTest, OneChangedTokenChangesItsBlockAndAllAfter) {
  const std::vector<int32_t> tokens = RandomTokens(5 * kBlockSize, 4);
  const std::vector<BlockHash> base = PrefixBlockHashes(tokens, kBlockSize, kFingerprint);
  for (size_t pos = 0; pos < tokens.size(); ++pos) {
    std::vector<int32_t> changed = tokens;
    changed[pos] ^= 1;
    const std::vector<BlockHash> h = PrefixBlockHashes(changed, kBlockSize, kFingerprint);
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
  const BlockHash before = HashBlock(kRootParentHash, tokens, kFingerprint, kBlockSize);
  std::swap(tokens[0], tokens[1]);
  EXPECT_NE(HashBlock(kRootParentHash, tokens, kFingerprint, kBlockSize), before);
}

TEST(BlockHashTest, SaltAndFingerprintChangeEveryHash) {
  const std::vector<int32_t> tokens = RandomTokens(4 * kBlockSize, 6);
  const std::vector<BlockHash> base = PrefixBlockHashes(tokens, kBlockSize, kFingerprint, 0);
  const std::vector<BlockHash> salted = PrefixBlockHashes(tokens, kBlockSize, kFingerprint, 1);
  const std::vector<BlockHash> other = PrefixBlockHashes(tokens, kBlockSize, kFingerprint + 1, 0);
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
  EXPECT_NE(HashBlock(kRootParentHash, a, kFingerprint, kBlockSize),
            HashBlock(kRootParentHash, b, kFingerprint, kBlockSize));
  // So is the block size: the same tokens under another size are another
  // block.
  EXPECT_NE(HashBlock(kRootParentHash, a, kFingerprint, 16),
            HashBlock(kRootParentHash, a, kFingerprint, 32));
}

TEST(BlockHashTest, DistinctBlocksGetDistinctHashes) {
  std::set<std::pair<uint64_t, uint64_t>> seen;
  const std::vector<int32_t> tokens = RandomTokens(2000 * kBlockSize, 7);
  for (const BlockHash& h : PrefixBlockHashes(tokens, kBlockSize, kFingerprint)) {
    EXPECT_TRUE(seen.insert({h.low, h.high}).second);
  }
  EXPECT_EQ(seen.size(), 2000u);
}

}  // namespace
}  // namespace tandem::engine
