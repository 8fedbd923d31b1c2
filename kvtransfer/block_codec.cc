#include "kvtransfer/block_codec.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "common/check.h"
#include "common/little_endian.h"
#include "common/status_macros.h"
#include "common/strings.h"
#include "kvtransfer/checksum.h"

namespace tandem::kvtransfer {
namespace {

using common::AppendLe16;
using common::AppendLe32;
using common::AppendLe64;
using common::LoadLe16;
using common::LoadLe32;
using common::LoadLe64;

// Byte offsets of the header fields; the table in block_codec.h is the spec.
constexpr size_t kVersionOffset = 4;
constexpr size_t kLayoutOffset = 6;
constexpr size_t kFingerprintOffset = 8;
constexpr size_t kBlockHashOffset = 16;
constexpr size_t kParentHashOffset = 32;
constexpr size_t kBlockIndexOffset = 48;
constexpr size_t kTokenCountOffset = 52;
constexpr size_t kBlockSizeOffset = 56;
constexpr size_t kLayerCountOffset = 60;
constexpr size_t kKvDimOffset = 64;
constexpr size_t kDtypeOffset = 68;
constexpr size_t kPayloadBytesOffset = 72;
static_assert(kPayloadBytesOffset + 8 == kBlockHeaderBytes, "header table and size disagree");

bool IsKvDtype(engine::GgmlType dtype) {
  return dtype == engine::GgmlType::kF32 || dtype == engine::GgmlType::kF16;
}

// Bytes of one block: keys and values of every slot of every layer.
uint64_t BlockPayloadBytes(uint64_t layer_count, uint64_t block_size, uint64_t kv_dim,
                           engine::GgmlType dtype) {
  return 2 * layer_count * block_size * kv_dim *
         static_cast<uint64_t>(engine::GgmlBlockBytes(dtype));
}

std::string Hex64(uint64_t v) { return absl::StrCat("0x", absl::Hex(v, absl::kZeroPad16)); }

std::string DtypeLabel(uint32_t id) {
  absl::StatusOr<engine::GgmlType> type = engine::GgmlTypeFromId(id);
  const std::string_view name = type.ok() ? engine::GgmlTypeName(*type) : "unknown";
  return absl::StrCat(id, " (", ToAbsl(name), ")");
}

absl::Status Mismatch(std::string_view field, std::string_view got, std::string_view expected) {
  return absl::FailedPreconditionError(absl::StrCat("KV block ", ToAbsl(field), ": got ",
                                                    ToAbsl(got), ", expected ",
                                                    ToAbsl(expected)));
}

absl::Status CheckU32(std::string_view field, uint32_t got, uint32_t expected) {
  if (got == expected) return absl::OkStatus();
  return Mismatch(field, absl::StrCat(got), absl::StrCat(expected));
}

// Refuses an intact block that this receiver cannot use.
absl::Status CheckCompatible(std::string_view bytes, const BlockExpectation& expect) {
  const char* p = bytes.data();
  if (uint16_t version = LoadLe16(p + kVersionOffset); version != kBlockFormatVersion) {
    return Mismatch("format version", absl::StrCat(version), absl::StrCat(kBlockFormatVersion));
  }
  if (uint16_t layout = LoadLe16(p + kLayoutOffset); layout != kBlockLayoutLayerKvSlotDim) {
    return Mismatch("layout", absl::StrCat(layout), absl::StrCat(kBlockLayoutLayerKvSlotDim));
  }
  if (uint64_t fp = LoadLe64(p + kFingerprintOffset); fp != expect.model_fingerprint) {
    return Mismatch("model_fingerprint", Hex64(fp), Hex64(expect.model_fingerprint));
  }
  const uint32_t expected_dtype = static_cast<uint32_t>(expect.dtype);
  if (uint32_t dtype = LoadLe32(p + kDtypeOffset); dtype != expected_dtype) {
    return Mismatch("dtype", DtypeLabel(dtype), DtypeLabel(expected_dtype));
  }
  RETURN_IF_ERROR(CheckU32("block_size", LoadLe32(p + kBlockSizeOffset), expect.block_size));
  RETURN_IF_ERROR(CheckU32("layer_count", LoadLe32(p + kLayerCountOffset), expect.layer_count));
  RETURN_IF_ERROR(CheckU32("kv_dim", LoadLe32(p + kKvDimOffset), expect.kv_dim));
  const uint64_t payload_bytes = LoadLe64(p + kPayloadBytesOffset);
  if (expect.payload_bytes < 0 || payload_bytes != static_cast<uint64_t>(expect.payload_bytes)) {
    return Mismatch("payload_bytes", absl::StrCat(payload_bytes),
                    absl::StrCat(expect.payload_bytes));
  }
  return absl::OkStatus();
}

}  // namespace

std::string EncodeBlock(const BlockHeader& header, std::span<const uint8_t> payload) {
  std::string out;
  EncodeBlockTo(header, PayloadPieces(&payload, 1), &out);
  return out;
}

namespace {

size_t TotalBytes(PayloadPieces payload) {
  size_t n = 0;
  for (const std::span<const uint8_t> piece : payload) n += piece.size();
  return n;
}

void CheckEncodable(const BlockHeader& header, size_t payload_bytes) {
  TANDEM_CHECK(IsKvDtype(header.dtype), "KV blocks are f32 or f16")
      << "dtype=" << static_cast<uint32_t>(header.dtype);
  TANDEM_CHECK(header.token_count >= 1 && header.token_count <= header.block_size,
               "a block holds 1..block_size tokens")
      << "token_count=" << header.token_count << " block_size=" << header.block_size;
  TANDEM_CHECK(payload_bytes == BlockPayloadBytes(header.layer_count, header.block_size,
                                                   header.kv_dim, header.dtype),
               "payload is not one block of the header's shape")
      << "payload bytes=" << payload_bytes;
}

void AppendHeader(const BlockHeader& header, uint64_t payload_bytes, std::string& out) {
  out.append(kBlockMagic.data(), kBlockMagic.size());
  AppendLe16(out, kBlockFormatVersion);
  AppendLe16(out, kBlockLayoutLayerKvSlotDim);
  AppendLe64(out, header.model_fingerprint);
  AppendLe64(out, header.block_hash.low);
  AppendLe64(out, header.block_hash.high);
  AppendLe64(out, header.parent_hash.low);
  AppendLe64(out, header.parent_hash.high);
  AppendLe32(out, header.block_index);
  AppendLe32(out, header.token_count);
  AppendLe32(out, header.block_size);
  AppendLe32(out, header.layer_count);
  AppendLe32(out, header.kv_dim);
  AppendLe32(out, static_cast<uint32_t>(header.dtype));
  AppendLe64(out, payload_bytes);
}

}  // namespace

BlockFrame EncodeBlockFrame(const BlockHeader& header, PayloadPieces payload) {
  const size_t payload_bytes = TotalBytes(payload);
  CheckEncodable(header, payload_bytes);
  TANDEM_CHECK(header.token_count == header.block_size,
               "only full blocks are sent from where they lie (a partial one has slots to zero)");
  BlockFrame frame;
  frame.header.reserve(kBlockHeaderBytes);
  AppendHeader(header, payload_bytes, frame.header);
  Checksum checksum;
  checksum.Update(frame.header.data(), frame.header.size());
  for (const std::span<const uint8_t> piece : payload) checksum.Update(piece.data(), piece.size());
  AppendLe64(frame.checksum, checksum.Digest());
  return frame;
}

void EncodeBlockTo(const BlockHeader& header, PayloadPieces payload, std::string* out_ptr) {
  const size_t payload_bytes = TotalBytes(payload);
  CheckEncodable(header, payload_bytes);
  std::string& out = *out_ptr;
  out.clear();
  out.reserve(kBlockHeaderBytes + payload_bytes + kBlockChecksumBytes);
  AppendHeader(header, payload_bytes, out);
  TANDEM_DCHECK(out.size() == kBlockHeaderBytes, "header table and encoder disagree");
  for (const std::span<const uint8_t> piece : payload) {
    out.append(reinterpret_cast<const char*>(piece.data()), piece.size());
  }
  if (header.token_count < header.block_size) {
    // Slots past token_count go out as zeros: the bytes are deterministic
    // and carry no stale KV. Layout [layer][k|v][slot][kv_dim].
    const size_t row = static_cast<size_t>(header.kv_dim) * engine::GgmlBlockBytes(header.dtype);
    const size_t unused = (header.block_size - header.token_count) * row;
    for (uint32_t half = 0; half < 2 * header.layer_count; ++half) {
      const size_t at = kBlockHeaderBytes +
                        (static_cast<size_t>(half) * header.block_size + header.token_count) * row;
      std::memset(out.data() + at, 0, unused);
    }
  }
  AppendLe64(out, ChecksumOf(out.data(), out.size()));
}

BlockExpectation ExpectationFor(const engine::ModelConfig& config, uint64_t fingerprint,
                                int32_t block_size, engine::GgmlType dtype) {
  return ExpectationFor(engine::KvLayout{.fingerprint = fingerprint,
                                         .block_size = block_size,
                                         .n_layer = config.n_layer,
                                         .kv_dim = config.kv_dim(),
                                         .dtype = dtype});
}

BlockExpectation ExpectationFor(const engine::KvLayout& layout) {
  TANDEM_CHECK(IsKvDtype(layout.dtype),
               "KV blocks are f32 or f16 (KvCache::Create refuses others)");
  TANDEM_CHECK(layout.block_size > 0 && layout.n_layer > 0 && layout.kv_dim > 0,
               "KV shape must be positive")
      << "block_size=" << layout.block_size << " n_layer=" << layout.n_layer
      << " kv_dim=" << layout.kv_dim;
  return BlockExpectation{
      .model_fingerprint = layout.fingerprint,
      .block_size = static_cast<uint32_t>(layout.block_size),
      .layer_count = static_cast<uint32_t>(layout.n_layer),
      .kv_dim = static_cast<uint32_t>(layout.kv_dim),
      .dtype = layout.dtype,
      .payload_bytes = static_cast<int64_t>(
          BlockPayloadBytes(layout.n_layer, layout.block_size, layout.kv_dim, layout.dtype)),
  };
}

namespace {

// The header's fields (after CheckCompatible passed on them).
absl::StatusOr<BlockHeader> ParseHeader(const char* p, const BlockExpectation& expect) {
  BlockHeader h;
  h.model_fingerprint = LoadLe64(p + kFingerprintOffset);
  h.block_hash = {.low = LoadLe64(p + kBlockHashOffset),
                  .high = LoadLe64(p + kBlockHashOffset + 8)};
  h.parent_hash = {.low = LoadLe64(p + kParentHashOffset),
                   .high = LoadLe64(p + kParentHashOffset + 8)};
  h.block_index = LoadLe32(p + kBlockIndexOffset);
  h.token_count = LoadLe32(p + kTokenCountOffset);
  h.block_size = LoadLe32(p + kBlockSizeOffset);
  h.layer_count = LoadLe32(p + kLayerCountOffset);
  h.kv_dim = LoadLe32(p + kKvDimOffset);
  h.dtype = expect.dtype;  // equal to the wire id, checked by CheckCompatible
  if (h.token_count < 1 || h.token_count > h.block_size) {
    // Intact but impossible: the sender is broken, so treat it as corrupt.
    return absl::DataLossError(absl::StrCat("KV block token_count: got ", h.token_count,
                                            ", expected 1..", h.block_size, " (block_size)"));
  }
  return h;
}

}  // namespace

absl::StatusOr<BlockHeader> DecodeBlockHeader(std::string_view header, uint64_t total_bytes,
                                              const BlockExpectation& expect) {
  if (header.size() < kBlockHeaderBytes) {
    return absl::DataLossError(absl::StrCat("KV block truncated: ", header.size(),
                                            " header bytes, expected ", kBlockHeaderBytes));
  }
  const char* p = header.data();
  if (const std::string_view magic(p, kBlockMagic.size()); magic != kBlockMagic) {
    return absl::DataLossError(absl::StrCat("KV block magic: got \"",
                                            absl::CHexEscape(ToAbsl(magic)), "\", expected \"",
                                            ToAbsl(kBlockMagic), "\""));
  }
  const uint64_t payload_bytes = LoadLe64(p + kPayloadBytesOffset);
  if (total_bytes != kBlockHeaderBytes + payload_bytes + kBlockChecksumBytes) {
    return absl::DataLossError(absl::StrCat("KV block payload_bytes: header says ",
                                            payload_bytes, ", the ", total_bytes,
                                            "-byte block holds another size"));
  }
  RETURN_IF_ERROR(CheckCompatible(header.substr(0, kBlockHeaderBytes), expect));
  return ParseHeader(p, expect);
}

absl::StatusOr<DecodedBlockPieces> DecodeBlockPieces(std::span<const std::string_view> pieces,
                                                     const BlockExpectation& expect) {
  constexpr size_t kFramingBytes = kBlockHeaderBytes + kBlockChecksumBytes;
  size_t total = 0;
  for (const std::string_view piece : pieces) total += piece.size();
  if (total < kFramingBytes) {
    return absl::DataLossError(absl::StrCat("KV block truncated: ", total,
                                            " bytes, header and checksum alone need ",
                                            kFramingBytes));
  }
  // Visits the bytes [begin, end) of the concatenated pieces, piece by piece.
  auto for_range = [&](size_t begin, size_t end, auto&& visit) {
    size_t at = 0;
    for (const std::string_view piece : pieces) {
      const size_t lo = std::max(begin, at);
      const size_t hi = std::min(end, at + piece.size());
      if (lo < hi) visit(piece.substr(lo - at, hi - lo));
      at += piece.size();
      if (at >= end) break;
    }
  };
  char header[kBlockHeaderBytes];
  size_t filled = 0;
  for_range(0, kBlockHeaderBytes, [&](std::string_view part) {
    std::memcpy(header + filled, part.data(), part.size());
    filled += part.size();
  });
  const char* p = header;
  if (const std::string_view magic(p, kBlockMagic.size()); magic != kBlockMagic) {
    return absl::DataLossError(absl::StrCat("KV block magic: got \"",
                                            absl::CHexEscape(ToAbsl(magic)), "\", expected \"",
                                            ToAbsl(kBlockMagic), "\""));
  }
  // Framing before checksum: the payload size says where the checksum is.
  const uint64_t payload_bytes = LoadLe64(p + kPayloadBytesOffset);
  const uint64_t held = total - kFramingBytes;
  if (payload_bytes != held) {
    return absl::DataLossError(absl::StrCat(
        "KV block payload_bytes: header says ", payload_bytes, ", the ", total,
        "-byte block holds ", held, " (truncated, trailing bytes or corrupt header)"));
  }
  const size_t checked = kBlockHeaderBytes + payload_bytes;
  char stored_bytes[kBlockChecksumBytes];
  filled = 0;
  for_range(checked, total, [&](std::string_view part) {
    std::memcpy(stored_bytes + filled, part.data(), part.size());
    filled += part.size();
  });
  const uint64_t stored = LoadLe64(stored_bytes);
  uint64_t computed = 0;
  if (pieces.size() == 1) {
    computed = ChecksumOf(pieces[0].data(), checked);
  } else {
    Checksum checksum;
    for_range(0, checked, [&](std::string_view part) { checksum.Update(part.data(), part.size()); });
    computed = checksum.Digest();
  }
  if (computed != stored) {
    return absl::DataLossError(absl::StrCat("KV block checksum: stored ", Hex64(stored),
                                            ", computed ", Hex64(computed)));
  }
  RETURN_IF_ERROR(CheckCompatible(std::string_view(header, kBlockHeaderBytes), expect));
  DecodedBlockPieces block;
  ASSIGN_OR_RETURN(block.header, ParseHeader(p, expect));
  for_range(kBlockHeaderBytes, checked, [&](std::string_view part) {
    block.payload.emplace_back(reinterpret_cast<const uint8_t*>(part.data()), part.size());
  });
  return block;
}

absl::StatusOr<DecodedBlock> DecodeBlock(std::string_view bytes, const BlockExpectation& expect) {
  ASSIGN_OR_RETURN(DecodedBlockPieces decoded,
                   DecodeBlockPieces(std::span<const std::string_view>(&bytes, 1), expect));
  return DecodedBlock{.header = decoded.header,
                      .payload = bytes.substr(kBlockHeaderBytes, bytes.size() - kBlockHeaderBytes -
                                                                      kBlockChecksumBytes)};
}

}  // namespace tandem::kvtransfer
