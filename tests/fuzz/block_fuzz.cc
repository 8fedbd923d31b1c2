// libFuzzer target: a KV block as it arrives from the network. The bytes are
// read as a whole wire block (DecodeBlock), as a KvBlockMessage cut in two
// slices (ParseBlockMessage, then DecodeBlockPieces on what it found), and as
// a sequence's blocks (SnapshotDecoder). Nothing may crash, hang or read out
// of bounds; every refusal is a status.
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "kvtransfer/block_codec.h"
#include "kvtransfer/kv_snapshot_codec.h"
#include "kvtransfer/rpc/block_message.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tandem::kvtransfer;  // NOLINT: a fuzz entry point
  // A small receiver: 4-token blocks, 1 layer, KV width 2, f32.
  static const BlockExpectation expect{.model_fingerprint = 7,
                                       .block_size = 4,
                                       .layer_count = 1,
                                       .kv_dim = 2,
                                       .dtype = tandem::engine::GgmlType::kF32,
                                       .payload_bytes = 2 * 1 * 4 * 2 * 4};
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  (void)DecodeBlock(bytes, expect);

  const size_t cut = size == 0 ? 0 : data[0] % (size + 1);
  const std::string_view pieces[2] = {bytes.substr(0, cut), bytes.substr(cut)};
  absl::StatusOr<BlockMessageView> msg = ParseBlockMessage(pieces);
  if (msg.ok()) (void)DecodeBlockPieces(msg->block, expect);

  SnapshotDecoder decoder(expect, std::vector<int32_t>{1, 2, 3, 4, 5, 6}, 0,
                          size > 1 ? data[1] % 2 : 0);
  (void)decoder.Add(bytes);
  (void)std::move(decoder).Finish();
  return 0;
}
