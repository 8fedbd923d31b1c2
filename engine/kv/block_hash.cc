#include "engine/kv/block_hash.h"

#include <xxhash.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "absl/strings/str_format.h"
#include "common/check.h"
#include "common/little_endian.h"

namespace tandem::engine {
namespace {

// Hashes through a caller-owned buffer so PrefixBlockHashes allocates once for
// a whole prompt. The canonical bytes (rather than hashing the int32 array in
// place) keep the hash independent of host byte order; a streaming XXH3 state
// was rejected as slower for inputs this small (~100 bytes).
BlockHash HashInto(std::vector<uint8_t>& buffer, const BlockHash& parent,
                   std::span<const int32_t> token_ids, uint64_t model_fingerprint,
                   int32_t block_size, uint64_t salt) {
  buffer.clear();
  buffer.reserve(6 * sizeof(uint64_t) + token_ids.size() * sizeof(int32_t));
  common::AppendLe64(buffer, parent.low);
  common::AppendLe64(buffer, parent.high);
  common::AppendLe64(buffer, model_fingerprint);
  common::AppendLe64(buffer, static_cast<uint64_t>(block_size));
  common::AppendLe64(buffer, salt);
  common::AppendLe64(buffer, token_ids.size());
  for (const int32_t id : token_ids) {
    common::AppendLe32(buffer, static_cast<uint32_t>(id));
  }
  const XXH128_hash_t h = XXH3_128bits_withSeed(buffer.data(), buffer.size(), kBlockHashSeed);
  return BlockHash{.low = h.low64, .high = h.high64};
}

}  // namespace

std::string BlockHash::ToHex() const { return absl::StrFormat("%016x%016x", high, low); }

BlockHash HashBlock(const BlockHash& parent, std::span<const int32_t> token_ids,
                    uint64_t model_fingerprint, int32_t block_size, uint64_t salt) {
  std::vector<uint8_t> buffer;
  return HashInto(buffer, parent, token_ids, model_fingerprint, block_size, salt);
}

std::vector<BlockHash> PrefixBlockHashes(std::span<const int32_t> tokens, int32_t block_size,
                                         uint64_t fingerprint, uint64_t salt) {
  TANDEM_CHECK(block_size > 0, "block size must be positive") << "block_size=" << block_size;
  const size_t full_blocks = tokens.size() / static_cast<size_t>(block_size);
  std::vector<BlockHash> hashes;
  hashes.reserve(full_blocks);
  std::vector<uint8_t> buffer;
  BlockHash parent = kRootParentHash;
  for (size_t i = 0; i < full_blocks; ++i) {
    parent = HashInto(buffer, parent, tokens.subspan(i * block_size, block_size), fingerprint,
                      block_size, salt);
    hashes.push_back(parent);
  }
  return hashes;
}

}  // namespace tandem::engine
