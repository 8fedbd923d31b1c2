#include "engine/block_hash.h"

#include <xxhash.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "common/check.h"
#include "common/little_endian.h"

namespace tandem::engine {
namespace {

// Hashes through a caller-owned buffer so PrefixBlockHashes allocates once for
// a whole prompt. The canonical bytes (rather than hashing the int32 array in
// place) keep the hash independent of host byte order; a streaming XXH3 state
// was rejected as slower for inputs this small (~100 bytes).
uint64_t HashInto(std::vector<uint8_t>& buffer, uint64_t parent_hash,
                  std::span<const int32_t> token_ids, uint64_t model_fingerprint,
                  uint64_t tenant_salt) {
  buffer.clear();
  buffer.reserve(4 * sizeof(uint64_t) + token_ids.size() * sizeof(int32_t));
  common::AppendLe64(buffer, parent_hash);
  common::AppendLe64(buffer, model_fingerprint);
  common::AppendLe64(buffer, tenant_salt);
  common::AppendLe64(buffer, token_ids.size());
  for (const int32_t id : token_ids) {
    common::AppendLe32(buffer, static_cast<uint32_t>(id));
  }
  return XXH3_64bits_withSeed(buffer.data(), buffer.size(), kBlockHashSeed);
}

}  // namespace

uint64_t BlockHash(uint64_t parent_hash, std::span<const int32_t> token_ids,
                   uint64_t model_fingerprint, uint64_t tenant_salt) {
  std::vector<uint8_t> buffer;
  return HashInto(buffer, parent_hash, token_ids, model_fingerprint, tenant_salt);
}

std::vector<uint64_t> PrefixBlockHashes(std::span<const int32_t> tokens, int32_t block_size,
                                        uint64_t fingerprint, uint64_t salt) {
  TANDEM_CHECK(block_size > 0, "block size must be positive") << "block_size=" << block_size;
  const size_t full_blocks = tokens.size() / static_cast<size_t>(block_size);
  std::vector<uint64_t> hashes;
  hashes.reserve(full_blocks);
  std::vector<uint8_t> buffer;
  uint64_t parent = kRootParentHash;
  for (size_t i = 0; i < full_blocks; ++i) {
    parent = HashInto(buffer, parent, tokens.subspan(i * block_size, block_size), fingerprint,
                      salt);
    hashes.push_back(parent);
  }
  return hashes;
}

}  // namespace tandem::engine
