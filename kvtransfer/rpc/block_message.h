// The protobuf wire format of tandem.v1.KvBlockMessage, written and read
// without protobuf so a block's bytes move between the lease's snapshot, the
// transport's buffers and the decoder with no copy of protobuf's own: the
// lease server frames each payload where it lies, and the fetcher gathers
// the `block` field straight out of the receive buffers. Parsing follows
// protobuf's rules (fields in any order, the last occurrence wins, unknown
// fields skipped), so any conforming sender is understood. Pure; thread-safe.
#ifndef TANDEM_KVTRANSFER_RPC_BLOCK_MESSAGE_H_
#define TANDEM_KVTRANSFER_RPC_BLOCK_MESSAGE_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace tandem::kvtransfer {

// The bytes of a KvBlockMessage that come before its `block` bytes: field 1
// (index) and the tag and length of field 2 (block, `block_bytes` long).
std::string BlockMessagePrefix(int32_t index, size_t block_bytes);

// A parsed KvBlockMessage whose `block` still lies in the buffers it came in.
struct BlockMessageView {
  int32_t index = 0;
  std::vector<std::string_view> block;  // the block's bytes, in order
  size_t block_bytes = 0;               // their total
};

// Parses one message held in `pieces` (in order; their boundaries fall
// anywhere). DataLoss naming the field for a truncated or malformed message.
absl::StatusOr<BlockMessageView> ParseBlockMessage(std::span<const std::string_view> pieces);

}  // namespace tandem::kvtransfer

#endif  // TANDEM_KVTRANSFER_RPC_BLOCK_MESSAGE_H_
