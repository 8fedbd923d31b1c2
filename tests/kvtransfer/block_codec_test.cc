#include "kvtransfer/block_codec.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <xxhash.h>

#include <cstdint>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "engine/gguf/model_config.h"
#include "engine/gguf/tensor_type.h"

namespace tandem::kvtransfer {
namespace {

using engine::GgmlType;
using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr uint64_t kFingerprint = 0x0123456789abcdefull;

BlockHeader SmallHeader(GgmlType dtype) {
  return BlockHeader{
      .model_fingerprint = kFingerprint,
      .block_hash = {.low = 0x1111222233334444ull, .high = 0x99990000aaaabbbbull},
      .parent_hash = {.low = 0x5555666677778888ull, .high = 0xccccddddeeeeffffull},
      .block_index = 3,
      .token_count = 4,
      .block_size = 4,
      .layer_count = 2,
      .kv_dim = 8,
      .dtype = dtype,
  };
}

size_t PayloadBytes(const BlockHeader& h) {
  return size_t{2} * h.layer_count * h.block_size * h.kv_dim *
         (h.dtype == GgmlType::kF16 ? 2 : 4);
}

BlockExpectation ExpectationOf(const BlockHeader& h) {
  return BlockExpectation{
      .model_fingerprint = h.model_fingerprint,
      .block_size = h.block_size,
      .layer_count = h.layer_count,
      .kv_dim = h.kv_dim,
      .dtype = h.dtype,
      .payload_bytes = static_cast<int64_t>(PayloadBytes(h)),
  };
}

std::vector<uint8_t> RandomPayload(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> payload(n);
  for (uint8_t& b : payload) b = static_cast<uint8_t>(rng());
  return payload;
}

std::string EncodeRandom(const BlockHeader& h, uint32_t seed = 1) {
  return EncodeBlock(h, RandomPayload(PayloadBytes(h), seed));
}

uint64_t ReadLe(std::string_view bytes, size_t offset, int width) {
  uint64_t v = 0;
  for (int i = width - 1; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(bytes[offset + i]);
  return v;
}

// Overwrites a header field and recomputes the checksum: an intact block as a
// sender with different settings would produce it.
std::string Reseal(std::string block, size_t offset, uint64_t value, int width) {
  for (int i = 0; i < width; ++i) block[offset + i] = static_cast<char>((value >> (8 * i)) & 0xff);
  const size_t body = block.size() - kBlockChecksumBytes;
  const uint64_t checksum = XXH3_64bits(block.data(), body);
  for (int i = 0; i < 8; ++i) block[body + i] = static_cast<char>((checksum >> (8 * i)) & 0xff);
  return block;
}

TEST(BlockCodecTest, RoundTripsHeaderAndPayload) {
  for (const GgmlType dtype : {GgmlType::kF32, GgmlType::kF16}) {
    const BlockHeader h = SmallHeader(dtype);
    const std::vector<uint8_t> payload = RandomPayload(PayloadBytes(h), 7);
    const std::string bytes = EncodeBlock(h, payload);
    EXPECT_EQ(bytes.size(), kBlockHeaderBytes + payload.size() + kBlockChecksumBytes);

    absl::StatusOr<DecodedBlock> decoded = DecodeBlock(bytes, ExpectationOf(h));
    ASSERT_TRUE(decoded.ok()) << decoded.status();
    const BlockHeader& d = decoded->header;
    EXPECT_EQ(d.model_fingerprint, h.model_fingerprint);
    EXPECT_EQ(d.block_hash, h.block_hash);
    EXPECT_EQ(d.parent_hash, h.parent_hash);
    EXPECT_EQ(d.block_index, h.block_index);
    EXPECT_EQ(d.token_count, h.token_count);
    EXPECT_EQ(d.block_size, h.block_size);
    EXPECT_EQ(d.layer_count, h.layer_count);
    EXPECT_EQ(d.kv_dim, h.kv_dim);
    EXPECT_EQ(d.dtype, h.dtype);
    EXPECT_EQ(decoded->payload,
              std::string_view(reinterpret_cast<const char*>(payload.data()), payload.size()));
    // A view into the input, not a copy.
    EXPECT_EQ(decoded->payload.data(), bytes.data() + kBlockHeaderBytes);
  }
}

TEST(BlockCodecTest, AFrameAroundThePayloadIsTheEncodedBlock) {
  for (GgmlType dtype : {GgmlType::kF32, GgmlType::kF16}) {
    const BlockHeader h = SmallHeader(dtype);  // a full block
    const std::vector<uint8_t> payload = RandomPayload(PayloadBytes(h), 11);
    const BlockFrame frame = EncodeBlockFrame(h, payload);
    const std::string joined =
        frame.header + std::string(payload.begin(), payload.end()) + frame.checksum;
    EXPECT_EQ(joined, EncodeBlock(h, payload));
    EXPECT_TRUE(DecodeBlock(joined, ExpectationOf(h)).ok());
  }
}

TEST(BlockCodecTest, PartialBlockRoundTrips) {
  BlockHeader h = SmallHeader(GgmlType::kF32);
  h.token_count = 1;
  absl::StatusOr<DecodedBlock> decoded = DecodeBlock(EncodeRandom(h), ExpectationOf(h));
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->header.token_count, 1u);
}

TEST(BlockCodecTest, HeaderBytesFollowTheSpec) {
  const BlockHeader h = SmallHeader(GgmlType::kF16);
  const std::string b = EncodeRandom(h);
  EXPECT_EQ(b.substr(0, 4), "TKVB");
  EXPECT_EQ(ReadLe(b, 4, 2), 2u);   // format version
  EXPECT_EQ(ReadLe(b, 6, 2), 1u);   // layout [layer][k|v][slot][kv_dim]
  EXPECT_EQ(ReadLe(b, 8, 8), h.model_fingerprint);
  EXPECT_EQ(ReadLe(b, 16, 8), h.block_hash.low);
  EXPECT_EQ(ReadLe(b, 24, 8), h.block_hash.high);
  EXPECT_EQ(ReadLe(b, 32, 8), h.parent_hash.low);
  EXPECT_EQ(ReadLe(b, 40, 8), h.parent_hash.high);
  EXPECT_EQ(ReadLe(b, 48, 4), h.block_index);
  EXPECT_EQ(ReadLe(b, 52, 4), h.token_count);
  EXPECT_EQ(ReadLe(b, 56, 4), h.block_size);
  EXPECT_EQ(ReadLe(b, 60, 4), h.layer_count);
  EXPECT_EQ(ReadLe(b, 64, 4), h.kv_dim);
  EXPECT_EQ(ReadLe(b, 68, 4), 1u);  // f16
  EXPECT_EQ(ReadLe(b, 72, 8), PayloadBytes(h));
  EXPECT_EQ(static_cast<uint8_t>(b[8]), 0xef);  // little-endian: low byte first
  const size_t body = b.size() - 8;
  EXPECT_EQ(ReadLe(b, body, 8), XXH3_64bits(b.data(), body));
}

TEST(BlockCodecTest, ExpectationForComputesPayloadBytes) {
  engine::ModelConfig config;
  config.n_layer = 3;
  config.n_head = 4;
  config.n_head_kv = 2;
  config.head_dim = 8;  // kv_dim 16
  const BlockExpectation f16 = ExpectationFor(config, kFingerprint, 16, GgmlType::kF16);
  EXPECT_EQ(f16.model_fingerprint, kFingerprint);
  EXPECT_EQ(f16.block_size, 16u);
  EXPECT_EQ(f16.layer_count, 3u);
  EXPECT_EQ(f16.kv_dim, 16u);
  EXPECT_EQ(f16.dtype, GgmlType::kF16);
  EXPECT_EQ(f16.payload_bytes, 2 * 3 * 16 * 16 * 2);
  EXPECT_EQ(ExpectationFor(config, kFingerprint, 16, GgmlType::kF32).payload_bytes,
            2 * 3 * 16 * 16 * 4);
}

TEST(BlockCodecTest, EverySingleBitFlipIsDetected) {
  for (const GgmlType dtype : {GgmlType::kF32, GgmlType::kF16}) {
    const BlockHeader h = SmallHeader(dtype);
    const BlockExpectation expect = ExpectationOf(h);
    const std::string good = EncodeRandom(h, 3);
    for (size_t byte = 0; byte < good.size(); ++byte) {
      for (int bit = 0; bit < 8; ++bit) {
        std::string bad = good;
        bad[byte] = static_cast<char>(bad[byte] ^ (1 << bit));
        const absl::Status s = DecodeBlock(bad, expect).status();
        ASSERT_FALSE(s.ok()) << "flip of byte " << byte << " bit " << bit << " undetected";
        ASSERT_TRUE(absl::IsDataLoss(s) || absl::IsFailedPrecondition(s))
            << "byte " << byte << " bit " << bit << ": " << s;
      }
    }
  }
}

TEST(BlockCodecTest, EveryTruncationIsDataLoss) {
  const BlockHeader h = SmallHeader(GgmlType::kF16);
  const std::string good = EncodeRandom(h);
  for (size_t len = 0; len < good.size(); ++len) {
    const absl::Status s = DecodeBlock(std::string_view(good).substr(0, len), ExpectationOf(h))
                               .status();
    ASSERT_TRUE(absl::IsDataLoss(s)) << "length " << len << ": " << s;
  }
}

TEST(BlockCodecTest, TrailingBytesAreDataLoss) {
  const BlockHeader h = SmallHeader(GgmlType::kF32);
  const absl::Status s = DecodeBlock(EncodeRandom(h) + "x", ExpectationOf(h)).status();
  EXPECT_TRUE(absl::IsDataLoss(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("payload_bytes"));
}

TEST(BlockCodecTest, BadMagicAndChecksumAreNamed) {
  const BlockHeader h = SmallHeader(GgmlType::kF32);
  std::string bad_magic = EncodeRandom(h);
  bad_magic[0] = 'X';
  absl::Status s = DecodeBlock(bad_magic, ExpectationOf(h)).status();
  EXPECT_TRUE(absl::IsDataLoss(s)) << s;
  EXPECT_THAT(s.message(), AllOf(HasSubstr("magic"), HasSubstr("XKVB"), HasSubstr("TKVB")));

  std::string bad_payload = EncodeRandom(h);
  bad_payload[kBlockHeaderBytes + 5] ^= 0x10;
  s = DecodeBlock(bad_payload, ExpectationOf(h)).status();
  EXPECT_TRUE(absl::IsDataLoss(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("checksum"));
}

// An intact block the receiver cannot use is FailedPrecondition naming the
// field and both values.
void ExpectRefused(const std::string& bytes, const BlockExpectation& expect,
                   const std::string& field, const std::string& got,
                   const std::string& expected) {
  const absl::Status s = DecodeBlock(bytes, expect).status();
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << field << ": " << s;
  EXPECT_THAT(s.message(),
              AllOf(HasSubstr(field), HasSubstr("got " + got), HasSubstr("expected " + expected)));
}

TEST(BlockCodecTest, BlockFromAnotherModelIsRefused) {
  const BlockHeader h = SmallHeader(GgmlType::kF32);
  BlockExpectation expect = ExpectationOf(h);
  expect.model_fingerprint = 0xfedcba9876543210ull;
  ExpectRefused(EncodeRandom(h), expect, "model_fingerprint", "0x0123456789abcdef",
                "0xfedcba9876543210");
}

TEST(BlockCodecTest, BlockOfAnotherDtypeIsRefused) {
  const BlockHeader h16 = SmallHeader(GgmlType::kF16);
  const BlockExpectation f32 = ExpectationOf(SmallHeader(GgmlType::kF32));
  ExpectRefused(EncodeRandom(h16), f32, "dtype", "1 (F16)", "0 (F32)");
  // An id the engine does not know at all.
  ExpectRefused(Reseal(EncodeRandom(h16), 68, 99, 4), f32, "dtype", "99 (unknown)", "0 (F32)");
}

TEST(BlockCodecTest, BlockOfAnotherShapeIsRefused) {
  const BlockHeader base = SmallHeader(GgmlType::kF32);
  const BlockExpectation expect = ExpectationOf(base);

  BlockHeader h = base;
  h.block_size = 8;
  ExpectRefused(EncodeRandom(h), expect, "block_size", "8", "4");
  h = base;
  h.layer_count = 3;
  ExpectRefused(EncodeRandom(h), expect, "layer_count", "3", "2");
  h = base;
  h.kv_dim = 16;
  ExpectRefused(EncodeRandom(h), expect, "kv_dim", "16", "8");

  BlockExpectation bigger = expect;
  bigger.payload_bytes += 4;
  ExpectRefused(EncodeRandom(base), bigger, "payload_bytes", std::to_string(PayloadBytes(base)),
                std::to_string(bigger.payload_bytes));
}

TEST(BlockCodecTest, AnotherFormatVersionOrLayoutIsRefused) {
  const BlockHeader h = SmallHeader(GgmlType::kF32);
  const std::string good = EncodeRandom(h);
  ExpectRefused(Reseal(good, 4, 1, 2), ExpectationOf(h), "format version", "1", "2");
  ExpectRefused(Reseal(good, 6, 7, 2), ExpectationOf(h), "layout", "7", "1");
}

TEST(BlockCodecTest, ImpossibleTokenCountIsDataLoss) {
  const BlockHeader h = SmallHeader(GgmlType::kF32);
  for (const uint32_t count : {0u, 5u, 0xffffffffu}) {
    const absl::Status s =
        DecodeBlock(Reseal(EncodeRandom(h), 52, count, 4), ExpectationOf(h)).status();
    EXPECT_TRUE(absl::IsDataLoss(s)) << count << ": " << s;
    EXPECT_THAT(s.message(), AllOf(HasSubstr("token_count"), HasSubstr(std::to_string(count))));
  }
}

}  // namespace
}  // namespace tandem::kvtransfer
