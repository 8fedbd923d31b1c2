// The engine over the cache tiers: a prefix evicted from the pool is served
// from host RAM, then (pushed out of RAM too) from disk, with the output of
// a cold run; blocks handed to a tier are frozen copies that later writes
// to the pool never change; peers can pull a prefix the tiers hold; and
// --hot-cache-only leaves no directory and no writer thread.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "engine/kv/block_hash.h"
#include "engine/engine.h"
#include "rpc/metrics.h"
#include "tests/common/temp_paths.h"
#include "tests/common/thread_names.h"
#include "tests/engine/fake_device_backend.h"
#include "tests/engine/test_backends.h"
#include "tests/engine/test_models.h"
#include "worker/kv_tiers.h"

namespace tandem::worker {
namespace {

namespace fs = std::filesystem;
using engine::BlockHash;
using engine::Engine;
using engine::KvTier;

constexpr int32_t kBlockSize = 16;
constexpr int32_t kPoolBlocks = 8;

std::string FreshDir(const std::string& name) {
  return tandem::testing::TempPathRemovedAtExit(absl::StrCat("kv_tiers_", name));
}

std::vector<int32_t> Prompt(int n, int salt) {
  std::vector<int32_t> p = {1};
  for (int i = 1; i < n; ++i) p.push_back(3 + (i * 11 + salt * 37) % 290);
  return p;
}

struct Outcome {
  std::vector<engine::SampledToken> tokens;
  int32_t cached = -1;
};

Outcome Generate(Engine& e, const std::vector<int32_t>& prompt, int32_t max_tokens = 4) {
  engine::GenerationRequest r;
  r.prompt = prompt;
  r.max_tokens = max_tokens;
  r.ignore_eos = true;
  r.top_logprobs = 3;
  absl::StatusOr<int64_t> id = e.Add(r);
  EXPECT_TRUE(id.ok()) << id.status();
  Outcome run;
  while (e.HasWork()) {
    absl::StatusOr<engine::StepOutput> out = e.Step();
    EXPECT_TRUE(out.ok()) << out.status();
    if (!out.ok()) break;
    for (const engine::TokenEvent& t : out->tokens) {
      run.tokens.push_back(t.token);
      run.cached = t.cached_tokens;
    }
  }
  return run;
}

void ExpectSame(const Outcome& got, const Outcome& want) {
  ASSERT_EQ(got.tokens.size(), want.tokens.size());
  for (size_t i = 0; i < got.tokens.size(); ++i) {
    EXPECT_EQ(got.tokens[i].id, want.tokens[i].id) << i;
    EXPECT_NEAR(got.tokens[i].logprob, want.tokens[i].logprob, 1e-5) << i;
    ASSERT_EQ(got.tokens[i].top.size(), want.tokens[i].top.size());
    for (size_t k = 0; k < got.tokens[i].top.size(); ++k) {
      EXPECT_EQ(got.tokens[i].top[k].id, want.tokens[i].top[k].id);
    }
  }
}

std::unique_ptr<Engine> MakeEngine(const engine::Model& model, engine::KvTierStore* tiers,
                                   int32_t pool_blocks = kPoolBlocks) {
  engine::EngineOptions o;
  o.kv.block_size = kBlockSize;
  o.kv.budget_bytes = int64_t{pool_blocks} * 2 * model.config().n_layer * kBlockSize *
                      model.config().kv_dim() * 4;
  o.tiers = tiers;
  auto e = Engine::Create(model, engine::testing::MakeTestBackend(1), o);
  EXPECT_TRUE(e.ok()) << e.status();
  return std::move(*e);
}

kvtransfer::BlockExpectation ExpectationOf(const engine::Model& model) {
  return kvtransfer::ExpectationFor(model.config(), model.fingerprint(), kBlockSize,
                                    engine::GgmlType::kF32);
}

int64_t BlockBytes(const engine::Model& model) {
  return ExpectationOf(model).payload_bytes;
}

// Forwards to the real tiers and keeps its own copy of every block handed
// to them, taken at the moment it was handed over.
class RecordingTiers final : public engine::KvTierStore {
 public:
  explicit RecordingTiers(engine::KvTierStore& inner) : inner_(inner) {}
  void OnStored(const BlockHash& hash, const BlockHash& parent, int32_t index,
                std::span<const uint8_t> block) override {
    stored_[hash].assign(block.begin(), block.end());
    inner_.OnStored(hash, parent, index, block);
  }
  void OnEvicted(const BlockHash& hash, std::span<const uint8_t> block) override {
    evicted_[hash].assign(block.begin(), block.end());
    inner_.OnEvicted(hash, block);
  }
  std::optional<engine::TierBlock> Lookup(const BlockHash& hash) override {
    return inner_.Lookup(hash);
  }
  void Promoted(const BlockHash& hash, KvTier from) override { inner_.Promoted(hash, from); }

  const absl::flat_hash_map<BlockHash, std::vector<uint8_t>>& stored() const { return stored_; }
  const absl::flat_hash_map<BlockHash, std::vector<uint8_t>>& evicted() const { return evicted_; }

 private:
  engine::KvTierStore& inner_;
  absl::flat_hash_map<BlockHash, std::vector<uint8_t>> stored_;
  absl::flat_hash_map<BlockHash, std::vector<uint8_t>> evicted_;
};

std::vector<uint8_t> Flat(const engine::KvBlockBytes& b) {
  std::vector<uint8_t> out(b.size());
  b.CopyTo(out.data());
  return out;
}

KvTierOptions Options(int64_t host_bytes, const std::string& disk_dir = "",
                      bool hot_cache_only = false) {
  KvTierOptions o;
  o.host_budget_bytes = host_bytes;
  o.disk_dir = disk_dir;
  o.disk_budget_bytes = 64 << 20;
  o.hot_cache_only = hot_cache_only;
  return o;
}

class KvTiersTest : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = engine::testing::LoadSynthetic(engine::testing::TinyOptions());
    ASSERT_NE(model_, nullptr);
  }
  std::unique_ptr<TieredKvStore> Tiers(const KvTierOptions& options) {
    absl::StatusOr<std::unique_ptr<TieredKvStore>> t =
        TieredKvStore::Create(options, ExpectationOf(*model_), registry_);
    EXPECT_TRUE(t.ok()) << t.status();
    return t.ok() ? std::move(*t) : nullptr;
  }
  // A prompt that needs the whole pool: every cached block is evicted.
  void Fill(Engine& e, int salt) { Generate(e, Prompt(kPoolBlocks * kBlockSize - 4, salt)); }

  std::unique_ptr<engine::Model> model_;
  prometheus::Registry registry_;
};

TEST_F(KvTiersTest, AnEvictedPrefixIsServedFromHostThenFromDiskAsAColdRunServesIt) {
  const std::vector<int32_t> prompt = Prompt(40, 1);  // 2 full blocks before its last token
  auto cold_engine = MakeEngine(*model_, nullptr);
  const Outcome cold = Generate(*cold_engine, prompt);

  const std::string dir = FreshDir("host_then_disk");
  // Host RAM holds 3 blocks: one fill pushes the prompt's blocks out of it.
  auto tiers = Tiers(Options(3 * BlockBytes(*model_), dir));
  ASSERT_NE(tiers, nullptr);
  std::vector<engine::BlockEvent> tier_events;
  tiers->AttachSink([&](std::span<const engine::BlockEvent> e) {
    tier_events.insert(tier_events.end(), e.begin(), e.end());
  });
  auto e = MakeEngine(*model_, tiers.get());
  ExpectSame(Generate(*e, prompt), cold);
  Fill(*e, 2);  // the prompt's blocks leave the pool for host RAM
  tiers->PublishPending();
  ASSERT_EQ(e->stats().prefix_hit_tokens, 0);

  const Outcome from_host = Generate(*e, prompt);
  ExpectSame(from_host, cold);
  EXPECT_EQ(from_host.cached, 32);
  EXPECT_EQ(e->stats().prefix_hit_tokens_by_tier[static_cast<size_t>(KvTier::kHost)], 32);

  Fill(*e, 3);
  Fill(*e, 4);  // and now out of host RAM too: only the disk holds them
  tiers->disk()->Flush();
  const Outcome from_disk = Generate(*e, prompt);
  ExpectSame(from_disk, cold);
  EXPECT_EQ(from_disk.cached, 32);
  const auto& by_tier = e->stats().prefix_hit_tokens_by_tier;
  EXPECT_EQ(by_tier[static_cast<size_t>(KvTier::kDevice)], 0);
  EXPECT_EQ(by_tier[static_cast<size_t>(KvTier::kHost)], 32);
  EXPECT_EQ(by_tier[static_cast<size_t>(KvTier::kDisk)], 32);

  // Both tiers announced what they took and let go.
  tiers->PublishPending();
  auto count = [&](KvTier tier, engine::BlockEvent::Kind kind) {
    return std::count_if(tier_events.begin(), tier_events.end(), [&](const auto& ev) {
      return ev.tier == tier && ev.kind == kind;
    });
  };
  EXPECT_GT(count(KvTier::kHost, engine::BlockEvent::Kind::kStored), 0);
  EXPECT_GT(count(KvTier::kHost, engine::BlockEvent::Kind::kRemoved), 0);
  EXPECT_GT(count(KvTier::kDisk, engine::BlockEvent::Kind::kStored), 0);
}

// A prefix coming back from host RAM is written into the pool in one
// batch: one WriteBlocks for all its blocks, however many there are.
TEST_F(KvTiersTest, APromotedPrefixIsWrittenInOneBatch) {
  const std::vector<int32_t> prompt = Prompt(5 * kBlockSize + 3, 5);  // 5 full blocks
  auto cold_engine = MakeEngine(*model_, nullptr);
  const Outcome cold = Generate(*cold_engine, prompt);

  auto tiers = Tiers(Options(64 * BlockBytes(*model_)));
  ASSERT_NE(tiers, nullptr);
  engine::EngineOptions o;
  o.kv.block_size = kBlockSize;
  o.kv.budget_bytes = int64_t{kPoolBlocks} * 2 * model_->config().n_layer * kBlockSize *
                      model_->config().kv_dim() * 4;
  o.tiers = tiers.get();
  auto device = std::make_unique<engine::testing::FakeDeviceBackend>(
      int64_t{1} << 28, engine::CpuBackendOptions{.threads = 1});
  engine::testing::FakeDeviceBackend* fake = device.get();
  auto e = Engine::Create(*model_, std::move(device), o);
  ASSERT_TRUE(e.ok()) << e.status();
  ExpectSame(Generate(**e, prompt), cold);
  Fill(**e, 6);  // the prompt's blocks leave the pool for host RAM

  fake->ResetTraffic();
  const Outcome from_host = Generate(**e, prompt);
  ExpectSame(from_host, cold);
  EXPECT_EQ(from_host.cached, 5 * kBlockSize);
  EXPECT_EQ(fake->traffic().block_writes, 1);
}

TEST_F(KvTiersTest, BlocksHandedToATierAreFrozenCopies) {
  const std::string dir = FreshDir("frozen");
  auto tiers = Tiers(Options(64 << 20, dir));
  ASSERT_NE(tiers, nullptr);
  RecordingTiers recording(*tiers);
  auto e = MakeEngine(*model_, &recording);
  // A sequence keeps decoding for many steps after its first blocks were
  // handed to the disk writer (write-through), then the pool reuses all of
  // its blocks for other prompts after they were demoted to host RAM.
  Generate(*e, Prompt(20, 5), 60);
  ASSERT_GE(recording.stored().size(), 4u);
  Fill(*e, 6);
  Fill(*e, 7);
  ASSERT_GE(recording.evicted().size(), 4u);
  tiers->disk()->Flush();
  int checked_host = 0;
  int checked_disk = 0;
  for (const auto& [hash, bytes] : recording.stored()) {
    const std::optional<engine::KvBlockBytes> on_disk = tiers->disk()->Read(hash);
    ASSERT_TRUE(on_disk.has_value()) << hash;
    EXPECT_EQ(Flat(*on_disk), bytes) << hash;
    ++checked_disk;
  }
  for (const auto& [hash, bytes] : recording.evicted()) {
    // What the pool held when it let the block go is what it had stored.
    if (recording.stored().contains(hash)) {
      EXPECT_EQ(recording.stored().at(hash), bytes);
    }
    std::optional<engine::TierBlock> held = tiers->Lookup(hash);
    ASSERT_TRUE(held.has_value()) << hash;
    if (held->tier != KvTier::kHost) continue;
    EXPECT_EQ(Flat(held->bytes), bytes) << hash;
    ++checked_host;
  }
  EXPECT_GE(checked_disk, 4);
  EXPECT_GE(checked_host, 4);
}

TEST_F(KvTiersTest, APeerCanPullAPrefixTheTiersHold) {
  auto tiers = Tiers(Options(64 << 20));
  ASSERT_NE(tiers, nullptr);
  auto e = MakeEngine(*model_, tiers.get());
  const std::vector<int32_t> prompt = Prompt(40, 8);
  Generate(*e, prompt);
  const std::shared_ptr<const engine::KvSnapshot> in_pool = e->ExportCachedPrefix(prompt, 0);
  ASSERT_NE(in_pool, nullptr);
  Fill(*e, 9);
  const std::shared_ptr<const engine::KvSnapshot> in_host = e->ExportCachedPrefix(prompt, 0);
  ASSERT_NE(in_host, nullptr);
  ASSERT_EQ(in_host->blocks.size(), in_pool->blocks.size());
  for (size_t b = 0; b < in_pool->blocks.size(); ++b) {
    EXPECT_EQ(Flat(in_host->blocks[b]), Flat(in_pool->blocks[b])) << b;
  }
  EXPECT_EQ(e->stats().blocks_cached, kPoolBlocks - 1);  // the export promoted nothing
}

TEST_F(KvTiersTest, HotCacheOnlyCreatesNoDirectoryAndStartsNoWriter) {
  const std::string dir = FreshDir("hot_only");
  {
    auto hot = Tiers(Options(1 << 20, dir, /*hot_cache_only=*/true));
    ASSERT_NE(hot, nullptr);
    EXPECT_EQ(hot->disk(), nullptr);
    EXPECT_FALSE(fs::exists(dir));
    EXPECT_THAT(tandem::testing::ThreadNames(),
                ::testing::Not(::testing::Contains("tandem-kvdisk")));
    auto e = MakeEngine(*model_, hot.get());
    Generate(*e, Prompt(40, 10));
    Fill(*e, 11);
    EXPECT_FALSE(fs::exists(dir));
  }
  // The same options without the switch: both exist.
  auto cold = Tiers(Options(1 << 20, dir));
  ASSERT_NE(cold, nullptr);
  EXPECT_TRUE(fs::is_directory(dir));
  EXPECT_THAT(tandem::testing::ThreadNames(), ::testing::Contains("tandem-kvdisk"));
}

}  // namespace
}  // namespace tandem::worker
