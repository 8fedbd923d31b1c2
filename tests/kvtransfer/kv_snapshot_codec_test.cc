#include "kvtransfer/kv_snapshot_codec.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "engine/kv/kv_snapshot.h"
#include "engine/gguf/tensor_type.h"
#include "kvtransfer/block_codec.h"
#include "engine/kv/block_hash.h"

namespace tandem::kvtransfer {
namespace {

using engine::GgmlType;
using engine::KvBlockBytes;
using engine::KvSnapshot;
using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr uint64_t kFingerprint = 0x00c0ffee12345678ull;
constexpr int32_t kBlockSize = 4;
constexpr int32_t kLayers = 2;
constexpr int32_t kKvDim = 8;

int64_t ElemBytes(GgmlType dtype) { return dtype == GgmlType::kF16 ? 2 : 4; }

BlockExpectation Expect(GgmlType dtype) {
  return BlockExpectation{
      .model_fingerprint = kFingerprint,
      .block_size = kBlockSize,
      .layer_count = kLayers,
      .kv_dim = kKvDim,
      .dtype = dtype,
      .payload_bytes = 2 * kLayers * kBlockSize * kKvDim * ElemBytes(dtype),
  };
}

// A snapshot of `n_tokens` positions whose bytes (unused slots included) are
// random, as an engine block with stale contents would be.
KvSnapshot MakeSnapshot(int32_t n_tokens, GgmlType dtype, uint32_t seed) {
  std::mt19937 rng(seed);
  KvSnapshot s;
  s.model_fingerprint = kFingerprint;
  s.n_tokens = n_tokens;
  s.block_size = kBlockSize;
  s.n_layer = kLayers;
  s.kv_dim = kKvDim;
  s.dtype = dtype;
  const int32_t n_blocks = (n_tokens + kBlockSize - 1) / kBlockSize;
  for (int32_t b = 0; b < n_blocks; ++b) {
    std::vector<uint8_t> block(Expect(dtype).payload_bytes);
    for (uint8_t& x : block) x = static_cast<uint8_t>(rng());
    s.blocks.push_back(std::move(block));
  }
  return s;
}

std::vector<int32_t> Tokens(int32_t n, int32_t first = 100) {
  std::vector<int32_t> t(n);
  for (int32_t i = 0; i < n; ++i) t[i] = first + 3 * i;
  return t;
}

// True when `slot` of block `block` is among the snapshot's positions.
bool SlotUsed(int32_t n_tokens, size_t block, int32_t slot) {
  return static_cast<int64_t>(block) * kBlockSize + slot < n_tokens;
}

TEST(KvSnapshotCodecTest, RoundTripsEveryLength) {
  for (const GgmlType dtype : {GgmlType::kF32, GgmlType::kF16}) {
    for (int32_t n = 0; n <= 3 * kBlockSize + 1; ++n) {
      const KvSnapshot in = MakeSnapshot(n, dtype, static_cast<uint32_t>(n));
      const std::vector<int32_t> tokens = Tokens(n);
      const std::vector<std::string> wire = EncodeSnapshot(in, tokens);
      ASSERT_EQ(wire.size(), in.blocks.size());

      absl::StatusOr<KvSnapshot> out = DecodeSnapshot(wire, Expect(dtype), tokens);
      ASSERT_TRUE(out.ok()) << "n=" << n << ": " << out.status();
      EXPECT_EQ(out->model_fingerprint, kFingerprint);
      EXPECT_EQ(out->n_tokens, n);
      EXPECT_EQ(out->block_size, kBlockSize);
      EXPECT_EQ(out->n_layer, kLayers);
      EXPECT_EQ(out->kv_dim, kKvDim);
      EXPECT_EQ(out->dtype, dtype);
      ASSERT_EQ(out->blocks.size(), in.blocks.size());
      // Used slots arrive intact; unused slots of a partial block as zeros.
      const size_t row = kKvDim * ElemBytes(dtype);
      for (size_t b = 0; b < in.blocks.size(); ++b) {
        ASSERT_EQ(out->blocks[b].size(), in.blocks[b].size());
        for (size_t i = 0; i < in.blocks[b].size(); ++i) {
          const int32_t slot = static_cast<int32_t>((i / row) % kBlockSize);
          const uint8_t want = SlotUsed(n, b, slot) ? in.blocks[b][i] : 0;
          ASSERT_EQ(out->blocks[b][i], want) << "n=" << n << " block " << b << " byte " << i;
        }
      }
    }
  }
}

// A block as a transport receives it: copied into buffers cut at seeded
// random points (empty ones included), owned by the returned pointer.
struct Received {
  std::shared_ptr<std::vector<std::string>> buffers;
  std::vector<std::string_view> pieces;
};
Received CutInPieces(std::string_view block, std::mt19937& rng) {
  Received r;
  r.buffers = std::make_shared<std::vector<std::string>>();
  size_t at = 0;
  while (at < block.size()) {
    const size_t n = std::min<size_t>(block.size() - at, rng() % 4096);
    r.buffers->emplace_back(block.substr(at, n));
    at += n;
  }
  for (const std::string& b : *r.buffers) r.pieces.emplace_back(b);
  return r;
}

std::vector<uint8_t> BytesOf(const KvBlockBytes& block) {
  std::vector<uint8_t> out(block.size());
  block.CopyTo(out.data());
  return out;
}

TEST(KvSnapshotCodecTest, BlocksInPiecesDecodeTheSameBytesWithoutACopy) {
  const KvSnapshot in = MakeSnapshot(37, GgmlType::kF32, 5);
  const std::vector<int32_t> tokens = Tokens(37);
  const std::vector<std::string> wire = EncodeSnapshot(in, tokens);
  std::mt19937 rng(7);
  SnapshotDecoder copying(Expect(GgmlType::kF32), tokens);
  SnapshotDecoder adopting(Expect(GgmlType::kF32), tokens);
  std::vector<const char*> buffer_starts;
  for (const std::string& b : wire) {
    ASSERT_TRUE(copying.Add(std::string_view(b)).ok());
    Received r = CutInPieces(b, rng);
    for (const std::string_view piece : r.pieces) buffer_starts.push_back(piece.data());
    ASSERT_TRUE(adopting.Add(r.pieces, r.buffers).ok());
  }
  auto a = std::move(copying).Finish();
  auto b = std::move(adopting).Finish();
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_EQ(a->blocks.size(), b->blocks.size());
  for (size_t i = 0; i < a->blocks.size(); ++i) {
    EXPECT_EQ(BytesOf(a->blocks[i]), BytesOf(b->blocks[i])) << "block " << i;
    // The adopted block's bytes lie in the received buffers.
    for (const std::span<const uint8_t> piece : b->blocks[i].pieces()) {
      const auto* p = reinterpret_cast<const char*>(piece.data());
      EXPECT_TRUE(std::any_of(buffer_starts.begin(), buffer_starts.end(), [&](const char* s) {
        return p >= s && p < s + 4096;
      })) << "block " << i << " holds a piece outside the received buffers";
    }
  }
}

TEST(KvSnapshotCodecTest, BlocksInPiecesAreVerifiedLikeWholeOnes) {
  const KvSnapshot in = MakeSnapshot(37, GgmlType::kF32, 5);
  const std::vector<int32_t> tokens = Tokens(37);
  const std::vector<std::string> wire = EncodeSnapshot(in, tokens);
  std::mt19937 rng(11);
  // A flipped bit in the magic, the header, the payload, the checksum.
  for (const size_t at : {size_t{3}, size_t{70}, wire[0].size() / 2, wire[0].size() - 9,
                          wire[0].size() - 1}) {
    SnapshotDecoder refusing(Expect(GgmlType::kF32), tokens);
    std::string bad = wire[0];
    bad[at] ^= 1;
    Received r = CutInPieces(bad, rng);
    EXPECT_EQ(refusing.Add(r.pieces, r.buffers).code(), absl::StatusCode::kDataLoss)
        << "byte " << at;
  }
  // A byte short.
  SnapshotDecoder short_read(Expect(GgmlType::kF32), tokens);
  Received r = CutInPieces(std::string_view(wire[0]).substr(0, wire[0].size() - 1), rng);
  const absl::Status s = short_read.Add(r.pieces, r.buffers);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(s.message(), HasSubstr("payload_bytes"));
  // An intact block out of order is refused by the chain checks.
  SnapshotDecoder reordered(Expect(GgmlType::kF32), tokens);
  r = CutInPieces(wire[1], rng);
  EXPECT_EQ(reordered.Add(r.pieces, r.buffers).code(), absl::StatusCode::kFailedPrecondition);
}

TEST(KvSnapshotCodecTest, HeadersCarryIndexCountsAndTheHashChain) {
  const int32_t n = 2 * kBlockSize + 3;
  const std::vector<int32_t> tokens = Tokens(n);
  const std::vector<std::string> wire =
      EncodeSnapshot(MakeSnapshot(n, GgmlType::kF32, 1), tokens, /*tenant_salt=*/9);
  const std::vector<engine::BlockHash> full =
      engine::PrefixBlockHashes(tokens, kBlockSize, kFingerprint, 9);
  ASSERT_EQ(full.size(), 2u);
  ASSERT_EQ(wire.size(), 3u);
  engine::BlockHash parent = engine::kRootParentHash;
  for (size_t i = 0; i < wire.size(); ++i) {
    absl::StatusOr<DecodedBlock> d = DecodeBlock(wire[i], Expect(GgmlType::kF32));
    ASSERT_TRUE(d.ok()) << d.status();
    EXPECT_EQ(d->header.block_index, i);
    EXPECT_EQ(d->header.parent_hash, parent);
    if (i < full.size()) {
      EXPECT_EQ(d->header.token_count, static_cast<uint32_t>(kBlockSize));
      EXPECT_EQ(d->header.block_hash, full[i]);  // what the gateway computes
    } else {
      EXPECT_EQ(d->header.token_count, 3u);
      EXPECT_EQ(d->header.block_hash, engine::HashBlock(parent, std::span(tokens).subspan(8, 3),
                                                        kFingerprint, kBlockSize, 9));
    }
    parent = d->header.block_hash;
  }
}

class ChainMismatchTest : public ::testing::Test {
 protected:
  static constexpr int32_t kTokens = 3 * kBlockSize + 2;  // blocks 0..3, last partial

  void ExpectRefused(const std::vector<std::string>& wire, const std::vector<int32_t>& tokens,
                     const std::string& block, const std::string& field,
                     uint64_t salt = 0) {
    const absl::Status s = DecodeSnapshot(wire, Expect(GgmlType::kF16), tokens, salt).status();
    EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
    EXPECT_THAT(s.message(), AllOf(HasSubstr(block), HasSubstr(field)));
  }

  std::vector<int32_t> tokens_ = Tokens(kTokens);
  std::vector<std::string> wire_ =
      EncodeSnapshot(MakeSnapshot(kTokens, GgmlType::kF16, 2), tokens_);
};

TEST_F(ChainMismatchTest, ReorderedBlocksAreRefused) {
  std::vector<std::string> wire = wire_;
  std::swap(wire[1], wire[2]);
  ExpectRefused(wire, tokens_, "snapshot block 1", "block_index");
}

TEST_F(ChainMismatchTest, MissingOrExtraBlocksAreRefused) {
  std::vector<std::string> missing_middle = wire_;
  missing_middle.erase(missing_middle.begin() + 1);
  ExpectRefused(missing_middle, tokens_, "snapshot block 1", "block_index");

  std::vector<std::string> missing_last = wire_;
  missing_last.pop_back();
  ExpectRefused(missing_last, tokens_, "snapshot", "token counts");

  std::vector<std::string> extra = wire_;
  extra.push_back(wire_.back());
  ExpectRefused(extra, tokens_, "snapshot block 4", "block_index");
}

TEST_F(ChainMismatchTest, WrongTokenIdsNameTheFirstMismatchedBlock) {
  for (int32_t pos = 0; pos < kTokens; ++pos) {
    std::vector<int32_t> tokens = tokens_;
    tokens[pos] += 1;
    ExpectRefused(wire_, tokens, "snapshot block " + std::to_string(pos / kBlockSize),
                  "block_hash");
  }
}

TEST_F(ChainMismatchTest, TokenCountMismatchIsRefused) {
  std::vector<int32_t> fewer = tokens_;
  fewer.pop_back();
  ExpectRefused(wire_, fewer, "snapshot block 3", "token_count");

  std::vector<int32_t> more = tokens_;
  more.push_back(7);
  ExpectRefused(wire_, more, "snapshot block 3", "token_count");

  std::vector<int32_t> two_more_blocks = tokens_;
  two_more_blocks.resize(tokens_.size() + 2 * kBlockSize, 7);
  ExpectRefused(wire_, two_more_blocks, "snapshot block 3", "token_count");

  ExpectRefused(wire_, {}, "snapshot block 0", "token_count");
}

TEST_F(ChainMismatchTest, BlockFromAnotherSequenceBreaksTheChain) {
  // Same block 2 tokens, different history: index and count fit, the parent
  // does not.
  std::vector<int32_t> other_tokens = tokens_;
  other_tokens[0] += 1;
  const std::vector<std::string> other =
      EncodeSnapshot(MakeSnapshot(kTokens, GgmlType::kF16, 3), other_tokens);
  std::vector<std::string> spliced = wire_;
  spliced[2] = other[2];
  ExpectRefused(spliced, tokens_, "snapshot block 2", "parent_hash");
}

TEST_F(ChainMismatchTest, SaltIsPartOfTheChain) {
  const std::vector<std::string> salted =
      EncodeSnapshot(MakeSnapshot(kTokens, GgmlType::kF16, 2), tokens_, 5);
  EXPECT_TRUE(DecodeSnapshot(salted, Expect(GgmlType::kF16), tokens_, 5).ok());
  ExpectRefused(salted, tokens_, "snapshot block 0", "block_hash", /*salt=*/0);
}

TEST_F(ChainMismatchTest, CorruptBlockIsDataLossNamingItsIndex) {
  std::vector<std::string> wire = wire_;
  wire[2][kBlockHeaderBytes + 3] ^= 0x01;
  const absl::Status s = DecodeSnapshot(wire, Expect(GgmlType::kF16), tokens_).status();
  EXPECT_TRUE(absl::IsDataLoss(s)) << s;
  EXPECT_THAT(s.message(), AllOf(HasSubstr("snapshot block 2"), HasSubstr("checksum")));
}

TEST_F(ChainMismatchTest, WrongModelOrDtypeIsRefusedNamingTheField) {
  BlockExpectation other_model = Expect(GgmlType::kF16);
  other_model.model_fingerprint ^= 1;
  absl::Status s = DecodeSnapshot(wire_, other_model, tokens_).status();
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
  EXPECT_THAT(s.message(), AllOf(HasSubstr("snapshot block 0"), HasSubstr("model_fingerprint")));

  s = DecodeSnapshot(wire_, Expect(GgmlType::kF32), tokens_).status();
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("dtype"));
}

TEST_F(ChainMismatchTest, ADeltaStartsAtItsFirstBlockAndChainsFromTheHeldOnes) {
  // The receiver holds blocks 0 and 1; blocks 2 and 3 arrive.
  SnapshotDecoder delta(Expect(GgmlType::kF16), tokens_, /*tenant_salt=*/0, /*first_block=*/2);
  EXPECT_EQ(delta.next_index(), 2);
  ASSERT_TRUE(delta.Add(wire_[2]).ok());
  ASSERT_TRUE(delta.Add(wire_[3]).ok());
  absl::StatusOr<KvSnapshot> kv = std::move(delta).Finish();
  ASSERT_TRUE(kv.ok()) << kv.status();
  EXPECT_EQ(kv->first_block, 2);
  EXPECT_EQ(kv->n_tokens, kTokens);
  ASSERT_EQ(kv->blocks.size(), 2u);
  const absl::StatusOr<KvSnapshot> full = DecodeSnapshot(wire_, Expect(GgmlType::kF16), tokens_);
  ASSERT_TRUE(full.ok());
  EXPECT_EQ(BytesOf(kv->blocks[0]), BytesOf(full->blocks[2]));

  // A block from before first_block is out of order.
  SnapshotDecoder early(Expect(GgmlType::kF16), tokens_, 0, 2);
  const absl::Status s = early.Add(wire_[1]);
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
  EXPECT_THAT(s.message(), AllOf(HasSubstr("snapshot block 2"), HasSubstr("block_index")));

  // The held blocks' tokens are part of the chain: other leading tokens
  // break it at the first block that arrives.
  std::vector<int32_t> other = tokens_;
  other[3] += 1;
  SnapshotDecoder wrong_prefix(Expect(GgmlType::kF16), other, 0, 2);
  const absl::Status c = wrong_prefix.Add(wire_[2]);
  EXPECT_TRUE(absl::IsFailedPrecondition(c)) << c;
  EXPECT_THAT(c.message(), HasSubstr("parent_hash"));

  // At least one block must come.
  SnapshotDecoder nothing(Expect(GgmlType::kF16), tokens_, 0, 4);
  EXPECT_TRUE(absl::IsInvalidArgument(nothing.Add(wire_[3])));
}

}  // namespace
}  // namespace tandem::kvtransfer
