// Content hashes of KV blocks, the identity every part agrees on: XXH3-128
// over (parent block hash, the block's token ids, model fingerprint, block
// size, cache salt), chained from a root parent of 0, so equal hashes mean
// equal prefixes and a cache hit is exact. The gateway (routing, block
// index), the workers (prefix cache, events, transfers) and the cold tier
// must all call this code; tests/engine/kv/block_hash_test.cc pins the values.
// It lives with the engine, the lowest layer that needs it (the prefix
// cache keys its pool by it); the gateway links it with the tokenizer,
// without kernels. Pure; thread-safe.
#ifndef TANDEM_ENGINE_KV_BLOCK_HASH_H_
#define TANDEM_ENGINE_KV_BLOCK_HASH_H_

#include <cstdint>
#include <ostream>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace tandem::engine {

// A 128-bit block hash: 64-bit hashes of every block ever held by a large
// fleet and its cold tier would start to collide, and a collision here is a
// wrong answer, not a miss.
struct BlockHash {
  uint64_t low = 0;
  uint64_t high = 0;

  friend bool operator==(const BlockHash&, const BlockHash&) = default;
  template <typename H>
  friend H AbslHashValue(H h, const BlockHash& b) {
    return H::combine(std::move(h), b.low, b.high);
  }
  // 32 hex digits, high half first (XXH3's canonical order).
  std::string ToHex() const;
  friend std::ostream& operator<<(std::ostream& os, const BlockHash& b) {
    return os << b.ToHex();
  }
};

// Parent of a sequence's first block.
inline constexpr BlockHash kRootParentHash{};

// XXH3 seed of every block hash ("TANDEMKV" in ASCII). Part of the contract:
// changing it, or the byte encoding below, changes every hash and so
// orphans every cached block (the cold tier on disk included).
inline constexpr uint64_t kBlockHashSeed = 0x564B4D45444E4154ull;

// XXH3_128bits_withSeed(kBlockHashSeed) over the little-endian encoding
//   parent.low u64, parent.high u64, model_fingerprint u64, block_size u64,
//   salt u64, token count u64, token ids i32 each.
// `token_ids` is one block's tokens: block_size of them for a full block
// (only full blocks are shared; a transfer also hashes its last, partial
// block to chain-check it, and never publishes that hash).
BlockHash HashBlock(const BlockHash& parent, std::span<const int32_t> token_ids,
                    uint64_t model_fingerprint, int32_t block_size, uint64_t salt = 0);

// The hash chain of every full block of `tokens` (a trailing partial block is
// never hashed for sharing): element i covers tokens [i * block_size,
// (i + 1) * block_size) and chains from element i - 1 (kRootParentHash for
// i = 0). `block_size` must be positive.
std::vector<BlockHash> PrefixBlockHashes(std::span<const int32_t> tokens, int32_t block_size,
                                         uint64_t fingerprint, uint64_t salt = 0);
// The same into `out`, whose storage is reused (a router hashes prompt after
// prompt).
void PrefixBlockHashes(std::span<const int32_t> tokens, int32_t block_size, uint64_t fingerprint,
                       uint64_t salt, std::vector<BlockHash>& out);

}  // namespace tandem::engine

#endif  // TANDEM_ENGINE_KV_BLOCK_HASH_H_
