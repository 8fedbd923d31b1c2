// Converts between an engine::KvSnapshot (a sequence's KV, copied out of the
// engine) and its wire blocks, one EncodeBlock()ed string per block, chained
// by block hashes over the sequence's token ids. A transport encodes and
// decodes one block at a time (SnapshotEncoder / SnapshotDecoder), straight
// into and out of its message buffers; EncodeSnapshot / DecodeSnapshot do a
// whole sequence at once. Encoder: thread-safe once built (read-only).
// Decoder: thread-compatible.
#ifndef TANDEM_KVTRANSFER_KV_SNAPSHOT_CODEC_H_
#define TANDEM_KVTRANSFER_KV_SNAPSHOT_CODEC_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/kv/kv_snapshot.h"
#include "kvtransfer/block_codec.h"

namespace tandem::kvtransfer {

// The wire blocks of one snapshot: block i holds positions
// [i * block_size, min((i + 1) * block_size, n_tokens)), its block_index is i,
// its hash is HashBlock(hash of block i - 1 (root for i = 0), its tokens,
// fingerprint, tenant_salt). A last, partial block has token_count <
// block_size; its hash covers its tokens but must never be shared (published
// or cached) since the block will still grow. Its unused slots are sent as
// zeros, so the bytes are deterministic and carry no stale KV.
// `token_ids` must hold exactly snapshot.n_tokens ids and every block must
// be one engine block of the snapshot's shape (checked: caller bugs).
class SnapshotEncoder {
 public:
  SnapshotEncoder(std::shared_ptr<const engine::KvSnapshot> snapshot,
                  std::vector<int32_t> token_ids, uint64_t tenant_salt = 0);

  int32_t num_blocks() const { return static_cast<int32_t>(hashes_.size()); }
  // Block i's hash (the chain over the token ids); the last one is not
  // shareable when that block is partial.
  const std::vector<engine::BlockHash>& hashes() const { return hashes_; }
  // Bytes of all wire blocks together.
  int64_t wire_bytes() const;
  // Wire block `index` (in [0, num_blocks())) into `out`, reusing its capacity.
  void EncodeTo(int32_t index, std::string* out) const;
  // For a full block: its wire encoding as header and checksum around the
  // snapshot's own payload bytes (Payload), which stay valid while the
  // snapshot lives. nullopt for the last, partial block (use EncodeTo).
  std::optional<BlockFrame> Frame(int32_t index) const;
  PayloadPieces Payload(int32_t index) const { return snapshot_->blocks[index].pieces(); }

 private:
  BlockHeader HeaderOf(int32_t index) const;

  std::shared_ptr<const engine::KvSnapshot> snapshot_;
  std::vector<int32_t> token_ids_;
  uint64_t tenant_salt_;
  std::vector<engine::BlockHash> hashes_;  // block i's; its parent is i - 1's
};

// Decodes and verifies the blocks of one sequence whose tokens are
// `token_ids`, in order: each block as DecodeBlock() does (DataLoss /
// FailedPrecondition), then block_index runs 0..n-1, token counts cover
// exactly token_ids (every block full but the last), and parent and block
// hashes chain over these token ids with expect.model_fingerprint and
// `tenant_salt`. Any mismatch is FailedPrecondition naming the block index.
// A payload is copied once, into the snapshot, or not at all when its
// pieces are adopted.
class SnapshotDecoder {
 public:
  // InvalidArgument (from Add / Finish) when the expectation has no block
  // size, token_ids hold more than 2^31 - 1 ids, or `first_block` leaves no
  // block. With `first_block` > 0 (delta transfer) the blocks start there:
  // the receiver holds the ones before, and the chain starts from their
  // hashes, computed here from token_ids.
  SnapshotDecoder(const BlockExpectation& expect, std::vector<int32_t> token_ids,
                  uint64_t tenant_salt = 0, int32_t first_block = 0);

  // The next block; after an error the decoder is spent. The first form
  // copies the payload; the second takes a block that arrived in `pieces`
  // (DecodeBlockPieces), which `owner` keeps valid, and keeps them as the
  // block's bytes (no copy).
  absl::Status Add(std::string_view bytes);
  absl::Status Add(std::span<const std::string_view> pieces, std::shared_ptr<const void> owner);
  // The same with DecodeBlockPieces already run (by the caller, on its own
  // thread: the checksum is the costly part), leaving the checks that need
  // the blocks in order.
  absl::Status Add(absl::StatusOr<DecodedBlockPieces> decoded, std::shared_ptr<const void> owner);
  int32_t blocks_added() const { return static_cast<int32_t>(snapshot_.blocks.size()); }
  // The index of the block due next.
  int32_t next_index() const { return snapshot_.first_block + blocks_added(); }
  // The snapshot, once the blocks cover every token id.
  absl::StatusOr<engine::KvSnapshot> Finish() &&;

 private:
  BlockExpectation expect_;
  // Checks `decoded` (DecodeBlockPieces' answer) as the next block.
  absl::Status Check(const absl::StatusOr<DecodedBlockPieces>& decoded);

  std::vector<int32_t> token_ids_;
  uint64_t tenant_salt_;
  absl::Status status_;
  engine::BlockHash parent_;
  size_t covered_ = 0;  // token ids accounted for by the blocks added
  engine::KvSnapshot snapshot_;
};

// Every wire block of `snapshot` (see SnapshotEncoder).
std::vector<std::string> EncodeSnapshot(const engine::KvSnapshot& snapshot,
                                        std::span<const int32_t> token_ids,
                                        uint64_t tenant_salt = 0);

// Decodes a whole sequence's blocks (see SnapshotDecoder).
absl::StatusOr<engine::KvSnapshot> DecodeSnapshot(const std::vector<std::string>& blocks,
                                                  const BlockExpectation& expect,
                                                  std::span<const int32_t> token_ids,
                                                  uint64_t tenant_salt = 0);

}  // namespace tandem::kvtransfer

#endif  // TANDEM_KVTRANSFER_KV_SNAPSHOT_CODEC_H_
