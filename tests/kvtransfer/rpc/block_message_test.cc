// The hand-written KvBlockMessage wire format agrees with protobuf's both
// ways, whatever the receive buffers' boundaries, and refuses malformed
// messages without reading past their end.
#include "kvtransfer/rpc/block_message.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "tandem/v1/worker.pb.h"

namespace tandem::kvtransfer {
namespace {

using ::testing::HasSubstr;

std::vector<std::string_view> CutAtRandom(std::string_view bytes, std::mt19937& rng,
                                          size_t max_piece) {
  std::vector<std::string_view> pieces;
  size_t at = 0;
  while (at < bytes.size()) {
    const size_t n = std::min<size_t>(bytes.size() - at, rng() % (max_piece + 1));
    pieces.push_back(bytes.substr(at, n));  // empty pieces included
    at += n;
  }
  return pieces;
}

std::string Joined(const BlockMessageView& view) {
  std::string out;
  for (std::string_view piece : view.block) out.append(piece);
  return out;
}

std::string Block(size_t n, uint32_t seed) {
  std::string block(n, '\0');
  std::mt19937 rng(seed);
  for (char& c : block) c = static_cast<char>(rng());
  return block;
}

TEST(BlockMessageTest, PrefixAndBlockAreWhatProtobufReadsAndWrites) {
  for (const int32_t index : {0, 1, 127, 128, 300000, 2147483647}) {
    for (const size_t n : {size_t{0}, size_t{1}, size_t{127}, size_t{128}, size_t{70000}}) {
      const std::string block = Block(n, static_cast<uint32_t>(index));
      const std::string wire = BlockMessagePrefix(index, n) + block;
      tandem::v1::KvBlockMessage parsed;
      ASSERT_TRUE(parsed.ParseFromString(wire)) << "index " << index << " block bytes " << n;
      EXPECT_EQ(parsed.index(), index);
      EXPECT_EQ(parsed.block(), block);
      // Byte for byte where proto3 writes both fields (it omits defaults).
      if (index != 0 && n != 0) {
        EXPECT_EQ(wire, parsed.SerializeAsString());
      }
    }
  }
}

TEST(BlockMessageTest, ParsesProtobufsEncodingAcrossAnyBufferBoundaries) {
  std::mt19937 rng(3);
  for (int trial = 0; trial < 200; ++trial) {
    tandem::v1::KvBlockMessage msg;
    msg.set_index(static_cast<int32_t>(rng() % 5000));
    msg.set_block(Block(rng() % 3000, static_cast<uint32_t>(trial)));
    const std::string wire = msg.SerializeAsString();
    const std::vector<std::string_view> pieces = CutAtRandom(wire, rng, 1 + trial % 64);
    absl::StatusOr<BlockMessageView> view = ParseBlockMessage(pieces);
    ASSERT_TRUE(view.ok()) << view.status();
    EXPECT_EQ(view->index, msg.index());
    EXPECT_EQ(view->block_bytes, msg.block().size());
    EXPECT_EQ(Joined(*view), msg.block());
  }
}

TEST(BlockMessageTest, FollowsProtobufRulesForOrderRepeatsAndUnknownFields) {
  // Block before index, an unknown field of every wire type, a repeated
  // block (the last wins), a negative index.
  tandem::v1::KvBlockMessage first;
  first.set_block("stale");
  tandem::v1::KvBlockMessage second;
  second.set_index(-2);
  second.set_block("fresh bytes");
  std::string wire = first.SerializeAsString();
  wire += std::string("\x18\x96\x01", 3);                       // field 3, varint
  wire += std::string("\x21\x01\x02\x03\x04\x05\x06\x07\x08", 9);  // field 4, fixed64
  wire += std::string("\x2a\x02hi", 4);                           // field 5, bytes
  wire += std::string("\x35\x01\x02\x03\x04", 5);                  // field 6, fixed32
  wire += second.SerializeAsString();
  tandem::v1::KvBlockMessage reference;
  ASSERT_TRUE(reference.ParseFromString(wire));

  const std::vector<std::string_view> pieces = {wire};
  absl::StatusOr<BlockMessageView> view = ParseBlockMessage(pieces);
  ASSERT_TRUE(view.ok()) << view.status();
  EXPECT_EQ(view->index, reference.index());
  EXPECT_EQ(Joined(*view), reference.block());
  EXPECT_EQ(view->block_bytes, reference.block().size());
}

TEST(BlockMessageTest, TruncatedOrMalformedMessagesAreDataLoss) {
  const std::string wire = BlockMessagePrefix(9, 100) + Block(100, 1);
  for (size_t cut = 1; cut < wire.size(); ++cut) {
    const std::vector<std::string_view> pieces = {std::string_view(wire).substr(0, cut)};
    const absl::StatusOr<BlockMessageView> view = ParseBlockMessage(pieces);
    if (cut == 2) {
      // The index alone is a whole message (with no block), as protobuf
      // reads it; the decoder refuses the empty block.
      ASSERT_TRUE(view.ok()) << view.status();
      EXPECT_EQ(view->block_bytes, 0u);
      continue;
    }
    EXPECT_EQ(view.status().code(), absl::StatusCode::kDataLoss) << "cut at " << cut;
  }
  const std::string overlong(11, '\xff');
  EXPECT_THAT(ParseBlockMessage(std::vector<std::string_view>{overlong}).status().message(),
              HasSubstr("field tag"));
  const std::string group("\x0b", 1);  // field 1, start group
  EXPECT_THAT(ParseBlockMessage(std::vector<std::string_view>{group}).status().message(),
              HasSubstr("wire type 3"));
  const std::string field_zero("\x00\x01", 2);
  EXPECT_THAT(ParseBlockMessage(std::vector<std::string_view>{field_zero}).status().message(),
              HasSubstr("field number 0"));
}

}  // namespace
}  // namespace tandem::kvtransfer
