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
#include "engine/kv/block_hash.h"

namespace tandem::kvtransfer {
namespace {


absl::Status InBlock(size_t index, const absl::Status& status) {
  return absl::Status(status.code(),
                      absl::StrCat("snapshot block ", index, ": ", status.message()));
}

absl::Status BlockError(size_t index, const std::string& message) {
  return absl::FailedPreconditionError(absl::StrCat("snapshot block ", index, ": ", message));
}

}  // namespace

SnapshotEncoder::SnapshotEncoder(std::shared_ptr<const engine::KvSnapshot> snapshot,
                                 std::vector<int32_t> token_ids, uint64_t tenant_salt)
    : snapshot_(std::move(snapshot)), token_ids_(std::move(token_ids)), tenant_salt_(tenant_salt) {
  const engine::KvSnapshot& s = *snapshot_;
  const int64_t n = s.n_tokens;
  const int64_t bs = s.block_size;
  TANDEM_CHECK(bs > 0 && n >= 0, "snapshot shape") << "block_size=" << bs << " n_tokens=" << n;
  TANDEM_CHECK(static_cast<int64_t>(token_ids_.size()) == n, "one token id per snapshot position")
      << "token_ids=" << token_ids_.size() << " n_tokens=" << n;
  TANDEM_CHECK(static_cast<int64_t>(s.blocks.size()) == (n + bs - 1) / bs,
               "snapshot holds ceil(n_tokens / block_size) blocks")
      << "blocks=" << s.blocks.size();
  hashes_.reserve(s.blocks.size());
  engine::BlockHash parent = engine::kRootParentHash;
  for (size_t i = 0; i < s.blocks.size(); ++i) {
    const int64_t start = static_cast<int64_t>(i) * bs;
    const std::span<const int32_t> tokens =
        std::span<const int32_t>(token_ids_).subspan(start, std::min(bs, n - start));
    parent = engine::HashBlock(parent, tokens, s.model_fingerprint, s.block_size, tenant_salt_);
    hashes_.push_back(parent);
  }
}

int64_t SnapshotEncoder::wire_bytes() const {
  int64_t total = 0;
  for (const engine::KvBlockBytes& b : snapshot_->blocks) {
    total += static_cast<int64_t>(kBlockHeaderBytes + b.size() + kBlockChecksumBytes);
  }
  return total;
}

BlockHeader SnapshotEncoder::HeaderOf(int32_t index) const {
  TANDEM_CHECK(index >= 0 && index < num_blocks(), "block index in range") << "index=" << index;
  const engine::KvSnapshot& s = *snapshot_;
  const int64_t start = int64_t{index} * s.block_size;
  return BlockHeader{
      .model_fingerprint = s.model_fingerprint,
      .block_hash = hashes_[index],
      .parent_hash = index == 0 ? engine::kRootParentHash : hashes_[index - 1],
      .block_index = static_cast<uint32_t>(index),
      .token_count = static_cast<uint32_t>(std::min<int64_t>(s.block_size, s.n_tokens - start)),
      .block_size = static_cast<uint32_t>(s.block_size),
      .layer_count = static_cast<uint32_t>(s.n_layer),
      .kv_dim = static_cast<uint32_t>(s.kv_dim),
      .dtype = s.dtype,
  };
}

void SnapshotEncoder::EncodeTo(int32_t index, std::string* out) const {
  // Checks the size, zeroes unused slots.
  EncodeBlockTo(HeaderOf(index), snapshot_->blocks[index].pieces(), out);
}

std::optional<BlockFrame> SnapshotEncoder::Frame(int32_t index) const {
  const BlockHeader header = HeaderOf(index);
  if (header.token_count < header.block_size) return std::nullopt;
  return EncodeBlockFrame(header, snapshot_->blocks[index].pieces());
}

SnapshotDecoder::SnapshotDecoder(const BlockExpectation& expect, std::vector<int32_t> token_ids,
                                 uint64_t tenant_salt, int32_t first_block)
    : expect_(expect),
      token_ids_(std::move(token_ids)),
      tenant_salt_(tenant_salt),
      parent_(engine::kRootParentHash) {
  if (token_ids_.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
    status_ = absl::InvalidArgumentError(
        absl::StrCat("token_ids: ", token_ids_.size(), " ids, at most 2^31 - 1 positions"));
  } else if (expect.block_size == 0) {
    status_ = absl::InvalidArgumentError("expectation block_size: must be positive");
  }
  snapshot_.model_fingerprint = expect.model_fingerprint;
  snapshot_.n_tokens = static_cast<int32_t>(token_ids_.size());
  snapshot_.block_size = static_cast<int32_t>(expect.block_size);
  snapshot_.n_layer = static_cast<int32_t>(expect.layer_count);
  snapshot_.kv_dim = static_cast<int32_t>(expect.kv_dim);
  snapshot_.dtype = expect.dtype;
  if (!status_.ok()) return;
  const size_t bs = expect.block_size;
  const size_t n_blocks = (token_ids_.size() + bs - 1) / bs;
  if (first_block < 0 || (first_block > 0 && static_cast<size_t>(first_block) >= n_blocks)) {
    status_ = absl::InvalidArgumentError(absl::StrCat(
        "first_block: ", first_block, " leaves no block of ", n_blocks));
    return;
  }
  // The blocks the receiver holds: their chain, from the token ids.
  for (int32_t i = 0; i < first_block; ++i) {
    parent_ = engine::HashBlock(parent_, std::span<const int32_t>(token_ids_).subspan(i * bs, bs),
                                expect.model_fingerprint, static_cast<int32_t>(bs), tenant_salt_);
  }
  covered_ = static_cast<size_t>(first_block) * bs;
  snapshot_.first_block = first_block;
  snapshot_.blocks.reserve(n_blocks - first_block);
}

absl::Status SnapshotDecoder::Add(std::string_view bytes) {
  const absl::StatusOr<DecodedBlockPieces> decoded =
      DecodeBlockPieces(std::span<const std::string_view>(&bytes, 1), expect_);
  RETURN_IF_ERROR(Check(decoded));
  const std::span<const uint8_t> payload = decoded->payload.front();
  snapshot_.blocks.emplace_back(payload.data(), payload.data() + payload.size());
  return absl::OkStatus();
}

absl::Status SnapshotDecoder::Add(std::span<const std::string_view> pieces,
                                  std::shared_ptr<const void> owner) {
  return Add(DecodeBlockPieces(pieces, expect_), std::move(owner));
}

absl::Status SnapshotDecoder::Add(absl::StatusOr<DecodedBlockPieces> decoded,
                                  std::shared_ptr<const void> owner) {
  RETURN_IF_ERROR(Check(decoded));
  snapshot_.blocks.emplace_back(std::move(owner), std::move(decoded->payload));
  return absl::OkStatus();
}

absl::Status SnapshotDecoder::Check(const absl::StatusOr<DecodedBlockPieces>& decoded) {
  RETURN_IF_ERROR(status_);
  const size_t i = static_cast<size_t>(next_index());
  const size_t n = token_ids_.size();
  const size_t bs = expect_.block_size;
  auto fail = [&](absl::Status s) {
    status_ = s;
    return s;
  };
  if (!decoded.ok()) return fail(InBlock(i, decoded.status()));
  const BlockHeader& h = decoded->header;
  if (h.block_index != i) {
    return fail(BlockError(i, absl::StrCat("block_index: got ", h.block_index, ", expected ", i,
                                           " (blocks missing or out of order)")));
  }
  if (covered_ >= n) {
    return fail(BlockError(i, absl::StrCat("token_count: got ", h.token_count,
                                           ", expected no block: token_ids hold ", n,
                                           " tokens, all covered by earlier blocks")));
  }
  const size_t expected_count = std::min(bs, n - covered_);
  if (h.token_count != expected_count) {
    return fail(BlockError(i, absl::StrCat("token_count: got ", h.token_count, ", expected ",
                                           expected_count, " (token_ids hold ", n,
                                           " tokens; only the last block may be partial)")));
  }
  if (h.parent_hash != parent_) {
    return fail(BlockError(i, absl::StrCat("parent_hash: got ", h.parent_hash.ToHex(),
                                           ", expected ", parent_.ToHex(),
                                           " (hash of the previous block)")));
  }
  const engine::BlockHash want = engine::HashBlock(
      parent_, std::span<const int32_t>(token_ids_).subspan(covered_, expected_count),
      expect_.model_fingerprint, static_cast<int32_t>(expect_.block_size), tenant_salt_);
  if (h.block_hash != want) {
    return fail(BlockError(i, absl::StrCat("block_hash: got ", h.block_hash.ToHex(),
                                           ", expected ", want.ToHex(), " for token_ids [",
                                           covered_, ", ", covered_ + expected_count, ")")));
  }
  parent_ = h.block_hash;
  covered_ += expected_count;
  return absl::OkStatus();
}

absl::StatusOr<engine::KvSnapshot> SnapshotDecoder::Finish() && {
  RETURN_IF_ERROR(status_);
  if (covered_ != token_ids_.size()) {
    return absl::FailedPreconditionError(
        absl::StrCat("snapshot token counts: ", snapshot_.blocks.size(), " blocks add up to ",
                     covered_, " tokens, token_ids hold ", token_ids_.size()));
  }
  return std::move(snapshot_);
}

std::vector<std::string> EncodeSnapshot(const engine::KvSnapshot& snapshot,
                                        std::span<const int32_t> token_ids,
                                        uint64_t tenant_salt) {
  // A non-owning shared_ptr: the encoder lives only inside this call.
  const SnapshotEncoder encoder(
      std::shared_ptr<const engine::KvSnapshot>(&snapshot, [](const engine::KvSnapshot*) {}),
      std::vector<int32_t>(token_ids.begin(), token_ids.end()), tenant_salt);
  std::vector<std::string> out(encoder.num_blocks());
  for (int32_t i = 0; i < encoder.num_blocks(); ++i) encoder.EncodeTo(i, &out[i]);
  return out;
}

absl::StatusOr<engine::KvSnapshot> DecodeSnapshot(const std::vector<std::string>& blocks,
                                                  const BlockExpectation& expect,
                                                  std::span<const int32_t> token_ids,
                                                  uint64_t tenant_salt) {
  SnapshotDecoder decoder(expect, std::vector<int32_t>(token_ids.begin(), token_ids.end()),
                          tenant_salt);
  for (const std::string& b : blocks) RETURN_IF_ERROR(decoder.Add(b));
  return std::move(decoder).Finish();
}

}  // namespace tandem::kvtransfer
