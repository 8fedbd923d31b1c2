#include "kvtransfer/kv_snapshot_codec.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/check.h"
#include "common/status_macros.h"
#include "kvtransfer/block_hash.h"

namespace tandem::kvtransfer {
namespace {

std::string Hex64(uint64_t v) { return absl::StrCat("0x", absl::Hex(v, absl::kZeroPad16)); }

// Zeroes slots [token_count, block_size) of every layer's keys and values in
// a block laid out [layer][k|v][slot][kv_dim].
void ZeroUnusedSlots(const engine::KvSnapshot& s, int32_t token_count,
                     std::vector<uint8_t>& block) {
  const size_t row_bytes = static_cast<size_t>(s.kv_dim) * engine::GgmlBlockBytes(s.dtype);
  const size_t unused = static_cast<size_t>(s.block_size - token_count) * row_bytes;
  for (int32_t half = 0; half < 2 * s.n_layer; ++half) {
    const size_t offset = (static_cast<size_t>(half) * s.block_size + token_count) * row_bytes;
    std::memset(block.data() + offset, 0, unused);
  }
}

absl::Status InBlock(size_t index, const absl::Status& status) {
  return absl::Status(status.code(),
                      absl::StrCat("snapshot block ", index, ": ", status.message()));
}

absl::Status BlockError(size_t index, const std::string& message) {
  return absl::FailedPreconditionError(absl::StrCat("snapshot block ", index, ": ", message));
}

}  // namespace

std::vector<std::string> EncodeSnapshot(const engine::KvSnapshot& snapshot,
                                        std::span<const int32_t> token_ids,
                                        uint64_t tenant_salt) {
  const int64_t n = snapshot.n_tokens;
  const int64_t bs = snapshot.block_size;
  TANDEM_CHECK(bs > 0 && n >= 0, "snapshot shape") << "block_size=" << bs << " n_tokens=" << n;
  TANDEM_CHECK(static_cast<int64_t>(token_ids.size()) == n, "one token id per snapshot position")
      << "token_ids=" << token_ids.size() << " n_tokens=" << n;
  TANDEM_CHECK(static_cast<int64_t>(snapshot.blocks.size()) == (n + bs - 1) / bs,
               "snapshot holds ceil(n_tokens / block_size) blocks")
      << "blocks=" << snapshot.blocks.size();

  std::vector<std::string> out;
  out.reserve(snapshot.blocks.size());
  uint64_t parent = kRootParentHash;
  for (size_t i = 0; i < snapshot.blocks.size(); ++i) {
    const int64_t start = static_cast<int64_t>(i) * bs;
    const int32_t count = static_cast<int32_t>(std::min(bs, n - start));
    const std::span<const int32_t> tokens = token_ids.subspan(start, count);
    const BlockHeader header{
        .model_fingerprint = snapshot.model_fingerprint,
        .block_hash = BlockHash(parent, tokens, snapshot.model_fingerprint, tenant_salt),
        .parent_hash = parent,
        .block_index = static_cast<uint32_t>(i),
        .token_count = static_cast<uint32_t>(count),
        .block_size = static_cast<uint32_t>(bs),
        .layer_count = static_cast<uint32_t>(snapshot.n_layer),
        .kv_dim = static_cast<uint32_t>(snapshot.kv_dim),
        .dtype = snapshot.dtype,
    };
    if (count < bs) {
      std::vector<uint8_t> partial = snapshot.blocks[i];
      TANDEM_CHECK(static_cast<int64_t>(partial.size()) ==
                       2 * snapshot.n_layer * bs * snapshot.kv_dim *
                           engine::GgmlBlockBytes(snapshot.dtype),
                   "snapshot block is not one engine block");
      ZeroUnusedSlots(snapshot, count, partial);
      out.push_back(EncodeBlock(header, partial));
    } else {
      out.push_back(EncodeBlock(header, snapshot.blocks[i]));  // checks the size
    }
    parent = header.block_hash;
  }
  return out;
}

absl::StatusOr<engine::KvSnapshot> DecodeSnapshot(const std::vector<std::string>& blocks,
                                                  const BlockExpectation& expect,
                                                  std::span<const int32_t> token_ids,
                                                  uint64_t tenant_salt) {
  if (token_ids.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
    return absl::InvalidArgumentError(
        absl::StrCat("token_ids: ", token_ids.size(), " ids, at most 2^31 - 1 positions"));
  }
  if (expect.block_size == 0) {
    return absl::InvalidArgumentError("expectation block_size: must be positive");
  }
  const size_t n = token_ids.size();
  const size_t bs = expect.block_size;

  engine::KvSnapshot snapshot;
  snapshot.model_fingerprint = expect.model_fingerprint;
  snapshot.n_tokens = static_cast<int32_t>(n);
  snapshot.block_size = static_cast<int32_t>(expect.block_size);
  snapshot.n_layer = static_cast<int32_t>(expect.layer_count);
  snapshot.kv_dim = static_cast<int32_t>(expect.kv_dim);
  snapshot.dtype = expect.dtype;
  snapshot.blocks.reserve(blocks.size());

  uint64_t parent = kRootParentHash;
  size_t covered = 0;  // token ids accounted for by blocks [0, i)
  for (size_t i = 0; i < blocks.size(); ++i) {
    absl::StatusOr<DecodedBlock> decoded = DecodeBlock(blocks[i], expect);
    if (!decoded.ok()) return InBlock(i, decoded.status());
    const BlockHeader& h = decoded->header;
    if (h.block_index != i) {
      return BlockError(i, absl::StrCat("block_index: got ", h.block_index, ", expected ", i,
                                        " (blocks missing or out of order)"));
    }
    if (covered >= n) {
      return BlockError(i, absl::StrCat("token_count: got ", h.token_count,
                                        ", expected no block: token_ids hold ", n,
                                        " tokens, all covered by earlier blocks"));
    }
    const size_t expected_count = std::min(bs, n - covered);
    if (h.token_count != expected_count) {
      return BlockError(i, absl::StrCat("token_count: got ", h.token_count, ", expected ",
                                        expected_count, " (token_ids hold ", n,
                                        " tokens; only the last block may be partial)"));
    }
    if (h.parent_hash != parent) {
      return BlockError(i, absl::StrCat("parent_hash: got ", Hex64(h.parent_hash), ", expected ",
                                        Hex64(parent), " (hash of the previous block)"));
    }
    const uint64_t want =
        BlockHash(parent, token_ids.subspan(covered, expected_count), expect.model_fingerprint,
                  tenant_salt);
    if (h.block_hash != want) {
      return BlockError(i, absl::StrCat("block_hash: got ", Hex64(h.block_hash), ", expected ",
                                        Hex64(want), " for token_ids [", covered, ", ",
                                        covered + expected_count, ")"));
    }
    const auto* data = reinterpret_cast<const uint8_t*>(decoded->payload.data());
    snapshot.blocks.emplace_back(data, data + decoded->payload.size());
    parent = h.block_hash;
    covered += expected_count;
  }
  if (covered != n) {
    return absl::FailedPreconditionError(
        absl::StrCat("snapshot token counts: ", blocks.size(), " blocks add up to ", covered,
                     " tokens, token_ids hold ", n));
  }
  return snapshot;
}

}  // namespace tandem::kvtransfer
