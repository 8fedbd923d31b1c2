// The KV block wire format: one block of one sequence (keys and values of
// block_size positions for every layer) with a self-describing header and a
// checksum, as shipped between workers and written to the cold tier. Called
// by kv_snapshot_codec, transports and cache tiers. Pure; thread-safe.
#ifndef TANDEM_KVTRANSFER_BLOCK_CODEC_H_
#define TANDEM_KVTRANSFER_BLOCK_CODEC_H_

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/gguf/model_config.h"
#include "engine/gguf/tensor_type.h"
#include "engine/kv/block_hash.h"
#include "engine/kv/kv_layout.h"

namespace tandem::kvtransfer {

// Wire layout, all integers little-endian, written byte by byte:
//   offset  size  field
//        0     4  magic "TKVB"
//        4     2  format version (kBlockFormatVersion)
//        6     2  payload layout (kBlockLayoutLayerKvSlotDim)
//        8     8  model fingerprint
//       16    16  block hash (engine::BlockHash: low u64, high u64)
//       32    16  parent hash (likewise)
//       48     4  block index (position of the block in its sequence)
//       52     4  token count (valid slots, 1..block size)
//       56     4  block size
//       60     4  layer count
//       64     4  kv_dim
//       68     4  dtype (engine::GgmlType id: 0 f32, 1 f16)
//       72     8  payload bytes
//       80     n  payload
//   80 + n     8  checksum: XXH3_64bits over bytes [0, 80 + n) (checksum.h)
inline constexpr std::string_view kBlockMagic = "TKVB";
// Version 2: 128-bit block hashes (version 1 had 64-bit ones).
inline constexpr uint16_t kBlockFormatVersion = 2;
// Payload is [layer][k|v][slot][kv_dim] of dtype: the engine's block layout.
inline constexpr uint16_t kBlockLayoutLayerKvSlotDim = 1;
inline constexpr size_t kBlockHeaderBytes = 80;
inline constexpr size_t kBlockChecksumBytes = 8;

struct BlockHeader {
  uint64_t model_fingerprint = 0;
  engine::BlockHash block_hash;
  engine::BlockHash parent_hash;
  uint32_t block_index = 0;
  uint32_t token_count = 0;  // 1..block_size; < block_size only for a last, partial block
  uint32_t block_size = 0;
  uint32_t layer_count = 0;
  uint32_t kv_dim = 0;
  engine::GgmlType dtype = engine::GgmlType::kF32;
};

// A payload as it lies: in one piece or several (engine::KvBlockBytes).
using PayloadPieces = std::span<const std::span<const uint8_t>>;

// Encodes one block. `payload` must be exactly one block of the header's
// shape (2 * layer_count * block_size * kv_dim elements of dtype) and
// token_count in [1, block_size]; both are checked (a violation is a bug in
// the caller, not bad input).
// A full block's encoding without its payload: the 80-byte header and the
// 8-byte checksum (over header and payload), for a transport that sends the
// payload from where it lies. header + payload + checksum is byte for byte
// EncodeBlock's output. token_count must equal block_size (checked).
struct BlockFrame {
  std::string header;
  std::string checksum;
};
BlockFrame EncodeBlockFrame(const BlockHeader& header, PayloadPieces payload);
inline BlockFrame EncodeBlockFrame(const BlockHeader& header, std::span<const uint8_t> payload) {
  return EncodeBlockFrame(header, PayloadPieces(&payload, 1));
}

// Slots past token_count are encoded as zeros whatever the payload holds.
std::string EncodeBlock(const BlockHeader& header, std::span<const uint8_t> payload);
// The same into `out` (cleared first; its capacity is reused), so a
// transport can encode straight into its message buffer.
void EncodeBlockTo(const BlockHeader& header, PayloadPieces payload, std::string* out);

struct DecodedBlock {
  BlockHeader header;
  std::string_view payload;  // views into DecodeBlock's input
};

// What the receiver accepts: its own model and KV shape.
struct BlockExpectation {
  uint64_t model_fingerprint = 0;
  uint32_t block_size = 0;
  uint32_t layer_count = 0;
  uint32_t kv_dim = 0;
  engine::GgmlType dtype = engine::GgmlType::kF32;
  int64_t payload_bytes = 0;
};

// The expectation of a receiver running `config` with the given KV block
// size and dtype: payload_bytes = 2 * n_layer * block_size * kv_dim * element
// bytes.
BlockExpectation ExpectationFor(const engine::ModelConfig& config, uint64_t fingerprint,
                                int32_t block_size, engine::GgmlType dtype);
// The same for an engine's blocks as they are (StepEngine::kv_layout: a
// draft model's layers after the model's, keyed by the pair).
BlockExpectation ExpectationFor(const engine::KvLayout& layout);

// Decodes and verifies one encoded block, which is untrusted input.
// DataLoss: bad magic, truncated or trailing bytes, checksum mismatch, or a
// checksummed header that is internally inconsistent (token count outside
// [1, block size]): the block is corrupt; drop it and recompute.
// FailedPrecondition: an intact block this receiver cannot use (another
// format version, layout, model fingerprint, dtype, block size, layer count,
// kv_dim or payload size). Every message names the field and both values.
absl::StatusOr<DecodedBlock> DecodeBlock(std::string_view bytes, const BlockExpectation& expect);

// The header alone (its first kBlockHeaderBytes bytes) of a block whose
// encoding is `total_bytes` long, checked as DecodeBlock does except for the
// checksum, which needs the whole block: for indexing stored blocks without
// reading them. The same errors as DecodeBlock.
absl::StatusOr<BlockHeader> DecodeBlockHeader(std::string_view header, uint64_t total_bytes,
                                              const BlockExpectation& expect);

// The same for a block that arrived in pieces (a transport's receive
// buffers, in order, their boundaries anywhere), decoded where it lies: the
// checksum is computed over the pieces and the payload returned as views
// into them, with no copy.
struct DecodedBlockPieces {
  BlockHeader header;
  std::vector<std::span<const uint8_t>> payload;
};
absl::StatusOr<DecodedBlockPieces> DecodeBlockPieces(std::span<const std::string_view> pieces,
                                                     const BlockExpectation& expect);

}  // namespace tandem::kvtransfer

#endif  // TANDEM_KVTRANSFER_BLOCK_CODEC_H_
