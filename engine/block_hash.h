// Content hashes of KV blocks: hash(parent hash, the block's token ids, model
// fingerprint, tenant salt), chained from a root parent of 0, so equal hashes
// mean equal prefixes. The gateway (routing, block index) and the workers
// (prefix cache, transfers) must all call this code. Pure; thread-safe.
#ifndef TANDEM_ENGINE_BLOCK_HASH_H_
#define TANDEM_ENGINE_BLOCK_HASH_H_

#include <cstdint>
#include <span>
#include <vector>

namespace tandem::engine {

// XXH3 seed of every block hash ("TANDEMKV" in ASCII). Part of the contract:
// changing it, or the byte encoding in block_hash.cc, changes every hash and
// so orphans every cached block (the cold tier on disk included).
inline constexpr uint64_t kBlockHashSeed = 0x564B4D45444E4154ull;

// Parent hash of a sequence's first block.
inline constexpr uint64_t kRootParentHash = 0;

// XXH3_64bits_withSeed(kBlockHashSeed) over the little-endian encoding
//   parent_hash u64, model_fingerprint u64, tenant_salt u64,
//   token count u64, token ids i32 each.
// `token_ids` is one block's tokens: block_size of them for a full block.
uint64_t BlockHash(uint64_t parent_hash, std::span<const int32_t> token_ids,
                   uint64_t model_fingerprint, uint64_t tenant_salt = 0);

// The hash chain of every full block of `tokens` (a trailing partial block is
// never hashed for sharing): element i covers tokens [i * block_size,
// (i + 1) * block_size) and chains from element i - 1 (kRootParentHash for
// i = 0). `block_size` must be positive.
std::vector<uint64_t> PrefixBlockHashes(std::span<const int32_t> tokens, int32_t block_size,
                                        uint64_t fingerprint, uint64_t salt = 0);

}  // namespace tandem::engine

#endif  // TANDEM_ENGINE_BLOCK_HASH_H_
