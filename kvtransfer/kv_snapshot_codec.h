// Converts between an engine::KvSnapshot (a sequence's KV, copied out of the
// engine) and its wire blocks, one EncodeBlock()ed string per block, chained
// by block hashes over the sequence's token ids. Called by the prefill worker
// (encode, then ship) and the decode worker (receive, decode, import).
// Pure; thread-safe.
#ifndef TANDEM_KVTRANSFER_KV_SNAPSHOT_CODEC_H_
#define TANDEM_KVTRANSFER_KV_SNAPSHOT_CODEC_H_

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/kv_snapshot.h"
#include "kvtransfer/block_codec.h"

namespace tandem::kvtransfer {

// One wire block per snapshot block, in order: block i holds positions
// [i * block_size, min((i + 1) * block_size, n_tokens)), its block_index is i,
// its hash is BlockHash(hash of block i - 1 (0 for i = 0), its tokens,
// fingerprint, tenant_salt). A last, partial block has token_count <
// block_size; its hash covers its tokens but must never be shared (published
// or cached) since the block will still grow. Its unused slots are sent as
// zeros, so the bytes are deterministic and carry no stale KV.
// `token_ids` must hold exactly snapshot.n_tokens ids and every block must
// be one engine block of the snapshot's shape (checked: caller bugs).
std::vector<std::string> EncodeSnapshot(const engine::KvSnapshot& snapshot,
                                        std::span<const int32_t> token_ids,
                                        uint64_t tenant_salt = 0);

// Decodes and verifies the blocks of one sequence whose tokens are
// `token_ids`: each block as DecodeBlock() does (DataLoss / FailedPrecondition),
// then block_index runs 0..n-1, token counts cover exactly token_ids (every
// block full but the last), and parent and block hashes chain over these
// token ids with expect.model_fingerprint and `tenant_salt`. Any mismatch is
// FailedPrecondition naming the block index. The result copies the payloads.
absl::StatusOr<engine::KvSnapshot> DecodeSnapshot(const std::vector<std::string>& blocks,
                                                  const BlockExpectation& expect,
                                                  std::span<const int32_t> token_ids,
                                                  uint64_t tenant_salt = 0);

}  // namespace tandem::kvtransfer

#endif  // TANDEM_KVTRANSFER_KV_SNAPSHOT_CODEC_H_
