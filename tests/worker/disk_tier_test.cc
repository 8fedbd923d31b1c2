// The host RAM and disk tiers on their own: LRU within a byte budget, disk
// files written by the writer thread and read back verified, the index
// rebuilt from the directory, damaged and foreign files deleted and counted,
// and a directory that cannot be used (held by another process, not a
// directory) refused at start, a write that fails (a full disk) counted.
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "engine/kv/kv_snapshot.h"
#include "rpc/metrics.h"
#include "tests/common/temp_paths.h"
#include "worker/disk_tier.h"
#include "worker/host_tier.h"

namespace tandem::worker {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

engine::BlockHash H(uint64_t x) { return {.low = x, .high = x * 31 + 7}; }

// Tiny blocks: 1 layer, 4 slots, kv_dim 2, f32: 64 payload bytes.
kvtransfer::BlockExpectation Expect(uint64_t fingerprint = 7) {
  return {.model_fingerprint = fingerprint, .block_size = 4, .layer_count = 1, .kv_dim = 2,
          .dtype = engine::GgmlType::kF32, .payload_bytes = 64};
}
constexpr int64_t kFileBytes = 80 + 64 + 8;

engine::KvBlockBytes Bytes(uint8_t seed, size_t n = 64) {
  std::vector<uint8_t> b(n);
  for (size_t i = 0; i < n; ++i) b[i] = static_cast<uint8_t>(seed * 17 + i);
  return engine::KvBlockBytes(b);
}

std::vector<uint8_t> Flat(const engine::KvBlockBytes& b) {
  std::vector<uint8_t> out(b.size());
  b.CopyTo(out.data());
  return out;
}

// A fresh directory under the test temp dir.
std::string FreshDir(const std::string& name) {
  return tandem::testing::TempPathRemovedAtExit(absl::StrCat("disk_tier_", name));
}

double Metric(prometheus::Registry& registry, const std::string& series) {
  const std::string text = rpc::ScrapeText(registry);
  size_t at = 0;
  while ((at = text.find(series + " ", at)) != std::string::npos) {
    if (at == 0 || text[at - 1] == '\n') return std::stod(text.substr(at + series.size() + 1));
    at += series.size();
  }
  return -1;
}

// Every event the tier sends, in order.
struct EventLog {
  explicit EventLog(DiskTier& tier) {
    tier.AttachSink([this](const std::vector<engine::BlockEvent>& e) {
      events.insert(events.end(), e.begin(), e.end());
    });
  }
  std::vector<engine::BlockEvent> events;
};

std::unique_ptr<DiskTier> OpenTier(const std::string& dir, prometheus::Registry& registry,
                                   int64_t budget = 1 << 20, uint64_t fingerprint = 7) {
  absl::StatusOr<std::unique_ptr<DiskTier>> tier = DiskTier::Open(
      {.dir = dir, .budget_bytes = budget, .max_queue_bytes = 1 << 20,
       .expect = Expect(fingerprint)},
      registry);
  EXPECT_TRUE(tier.ok()) << tier.status();
  return tier.ok() ? std::move(*tier) : nullptr;
}

TEST(HostTierTest, KeepsTheMostRecentlyUsedBlocksWithinItsBudget) {
  HostTier host(3 * 64);
  std::vector<HostTier::Evicted> evicted;
  for (uint64_t i = 1; i <= 3; ++i) EXPECT_TRUE(host.Put(H(i), Bytes(i), evicted));
  EXPECT_TRUE(evicted.empty());
  EXPECT_FALSE(host.Put(H(1), Bytes(1), evicted));  // held: now the most recent
  EXPECT_TRUE(host.Put(H(4), Bytes(4), evicted));
  ASSERT_EQ(evicted.size(), 1u);
  EXPECT_EQ(evicted[0].hash, H(2));
  EXPECT_EQ(Flat(evicted[0].bytes), Flat(Bytes(2)));
  EXPECT_EQ(host.blocks(), 3);
  EXPECT_EQ(host.bytes(), 3 * 64);
  ASSERT_TRUE(host.Get(H(1)).has_value());
  EXPECT_EQ(Flat(*host.Get(H(1))), Flat(Bytes(1)));
  EXPECT_TRUE(host.Erase(H(1)));
  EXPECT_FALSE(host.Get(H(1)).has_value());
  EXPECT_FALSE(host.Put(H(9), Bytes(9, 4 * 64), evicted));  // larger than the budget
}

TEST(DiskTierTest, WritesBlocksAndReadsThemBackAfterARestart) {
  const std::string dir = FreshDir("restart");
  {
    prometheus::Registry registry;
    auto tier = OpenTier(dir, registry);
    ASSERT_NE(tier, nullptr);
    EventLog log(*tier);
    std::vector<engine::BlockEvent>& events = log.events;
    for (uint64_t i = 1; i <= 3; ++i) EXPECT_TRUE(tier->Enqueue(H(i), H(i - 1), i, Bytes(i)));
    EXPECT_FALSE(tier->Enqueue(H(1), H(0), 1, Bytes(1)));  // queued or held already
    tier->Flush();
    EXPECT_EQ(tier->blocks(), 3);
    EXPECT_EQ(tier->bytes(), 3 * kFileBytes);
    ASSERT_EQ(events.size(), 3u);
    for (const engine::BlockEvent& e : events) {
      EXPECT_EQ(e.kind, engine::BlockEvent::Kind::kStored);
      EXPECT_EQ(e.tier, engine::KvTier::kDisk);
    }
    EXPECT_EQ(Metric(registry, "tandem_kv_disk_written_bytes_total"), 3 * kFileBytes);
    EXPECT_FALSE(fs::exists(absl::StrCat(dir, "/", H(1).ToHex(), ".kvb.tmp")));
  }
  // A crash's leftover temp file is deleted on open.
  std::ofstream(absl::StrCat(dir, "/", H(8).ToHex(), ".kvb.tmp")) << "partial";
  prometheus::Registry registry;
  auto tier = OpenTier(dir, registry);
  ASSERT_NE(tier, nullptr);
  EventLog log(*tier);
  EXPECT_EQ(log.events.size(), 3u);  // what it holds, announced at once
  EXPECT_EQ(tier->blocks(), 3);
  EXPECT_FALSE(fs::exists(absl::StrCat(dir, "/", H(8).ToHex(), ".kvb.tmp")));
  for (uint64_t i = 1; i <= 3; ++i) {
    const std::optional<engine::KvBlockBytes> got = tier->Read(H(i));
    ASSERT_TRUE(got.has_value()) << i;
    EXPECT_EQ(Flat(*got), Flat(Bytes(i)));
  }
  EXPECT_FALSE(tier->Read(H(4)).has_value());
}

TEST(DiskTierTest, DeletesTheLeastRecentlyUsedFilesPastItsBudget) {
  const std::string dir = FreshDir("budget");
  prometheus::Registry registry;
  auto tier = OpenTier(dir, registry, 2 * kFileBytes);
  ASSERT_NE(tier, nullptr);
  tier->Enqueue(H(1), H(0), 0, Bytes(1));
  tier->Enqueue(H(2), H(1), 1, Bytes(2));
  tier->Flush();
  ASSERT_TRUE(tier->Read(H(1)).has_value());  // 1 is now more recent than 2
  tier->Enqueue(H(3), H(2), 2, Bytes(3));
  tier->Flush();
  EXPECT_TRUE(tier->Contains(H(1)));
  EXPECT_FALSE(tier->Contains(H(2)));
  EXPECT_TRUE(tier->Contains(H(3)));
  EXPECT_FALSE(fs::exists(absl::StrCat(dir, "/", H(2).ToHex(), ".kvb")));
  EXPECT_EQ(Metric(registry, "tandem_kv_tier_evictions_total{cause=\"capacity\",tier=\"disk\"}"),
            1);
}

TEST(DiskTierTest, ACorruptedOrTruncatedFileIsDeletedAndCountedNeverReturned) {
  const std::string dir = FreshDir("corrupt");
  prometheus::Registry registry;
  auto tier = OpenTier(dir, registry);
  ASSERT_NE(tier, nullptr);
  EventLog log(*tier);
  std::vector<engine::BlockEvent>& events = log.events;
  tier->Enqueue(H(1), H(0), 0, Bytes(1));
  tier->Enqueue(H(2), H(1), 1, Bytes(2));
  tier->Flush();
  events.clear();
  const std::string flipped = absl::StrCat(dir, "/", H(1).ToHex(), ".kvb");
  {
    std::fstream f(flipped, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(100);  // inside the payload
    f.put('\x5a');
  }
  const std::string truncated = absl::StrCat(dir, "/", H(2).ToHex(), ".kvb");
  fs::resize_file(truncated, 120);

  EXPECT_FALSE(tier->Read(H(1)).has_value());
  EXPECT_FALSE(tier->Read(H(2)).has_value());
  EXPECT_FALSE(fs::exists(flipped));
  EXPECT_FALSE(fs::exists(truncated));
  EXPECT_FALSE(tier->Contains(H(1)));
  EXPECT_EQ(Metric(registry, "tandem_kv_tier_checksum_failures_total{tier=\"disk\"}"), 2);
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].kind, engine::BlockEvent::Kind::kRemoved);
  // Written again when the block comes back.
  EXPECT_TRUE(tier->Enqueue(H(1), H(0), 0, Bytes(1)));
  tier->Flush();
  ASSERT_TRUE(tier->Read(H(1)).has_value());
}

TEST(DiskTierTest, OpenDropsFilesItCannotUse) {
  const std::string dir = FreshDir("foreign");
  {
    prometheus::Registry registry;
    auto other_model = OpenTier(dir, registry, 1 << 20, /*fingerprint=*/99);
    ASSERT_NE(other_model, nullptr);
    other_model->Enqueue(H(1), H(0), 0, Bytes(1));
    other_model->Enqueue(H(2), H(1), 1, Bytes(2));
    other_model->Flush();
  }
  fs::resize_file(absl::StrCat(dir, "/", H(2).ToHex(), ".kvb"), 50);  // damaged as well
  prometheus::Registry registry;
  auto tier = OpenTier(dir, registry);
  ASSERT_NE(tier, nullptr);
  EXPECT_EQ(tier->blocks(), 0);
  EXPECT_FALSE(fs::exists(absl::StrCat(dir, "/", H(1).ToHex(), ".kvb")));
  EXPECT_FALSE(fs::exists(absl::StrCat(dir, "/", H(2).ToHex(), ".kvb")));
  EXPECT_EQ(Metric(registry, "tandem_kv_tier_evictions_total{cause=\"stale\",tier=\"disk\"}"), 1);
  EXPECT_EQ(Metric(registry, "tandem_kv_tier_evictions_total{cause=\"corrupt\",tier=\"disk\"}"),
            1);
}

TEST(DiskTierTest, ADirectoryHeldByAnotherProcessIsRefusedAtStart) {
  const std::string dir = FreshDir("held");
  fs::create_directories(dir);
  // Another open file description holding the lock: as another process would.
  const int fd = ::open((dir + "/LOCK").c_str(), O_RDWR | O_CREAT, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::write(fd, "4242", 4), 4);
  ASSERT_EQ(::flock(fd, LOCK_EX | LOCK_NB), 0);
  prometheus::Registry registry;
  absl::StatusOr<std::unique_ptr<DiskTier>> tier = DiskTier::Open(
      {.dir = dir, .budget_bytes = 1 << 20, .max_queue_bytes = 1 << 20, .expect = Expect()},
      registry);
  ASSERT_FALSE(tier.ok());
  EXPECT_EQ(tier.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(tier.status().message(), HasSubstr("--disk-cache-dir"));
  EXPECT_THAT(tier.status().message(), HasSubstr("held by another process (pid 4242)"));
  ::close(fd);
  EXPECT_NE(OpenTier(dir, registry), nullptr);  // free again
}

TEST(DiskTierTest, ADirectoryThatCannotBeUsedIsRefusedAtStart) {
  const std::string file = FreshDir("file");
  std::ofstream(file) << "not a directory";
  prometheus::Registry registry;
  for (const std::string& dir : {file, file + "/below"}) {
    absl::StatusOr<std::unique_ptr<DiskTier>> tier = DiskTier::Open(
        {.dir = dir, .budget_bytes = 1 << 20, .max_queue_bytes = 1 << 20, .expect = Expect()},
        registry);
    ASSERT_FALSE(tier.ok()) << dir;
    EXPECT_EQ(tier.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(tier.status().message(), HasSubstr("--disk-cache-dir " + dir));
  }
  if (::geteuid() != 0) {  // root writes anywhere: only checked as a user
    const std::string read_only = FreshDir("read_only");
    fs::create_directories(read_only);
    fs::permissions(read_only, fs::perms::owner_read | fs::perms::owner_exec);
    absl::StatusOr<std::unique_ptr<DiskTier>> tier = DiskTier::Open(
        {.dir = read_only, .budget_bytes = 1 << 20, .max_queue_bytes = 1 << 20,
         .expect = Expect()},
        registry);
    ASSERT_FALSE(tier.ok());
    EXPECT_THAT(tier.status().message(), HasSubstr("not writable"));
  }
  absl::StatusOr<std::unique_ptr<DiskTier>> small = DiskTier::Open(
      {.dir = FreshDir("small"), .budget_bytes = 100, .max_queue_bytes = 1 << 20,
       .expect = Expect()},
      registry);
  ASSERT_FALSE(small.ok());
  EXPECT_EQ(small.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(small.status().message(), HasSubstr("--disk-cache-mb"));
}

TEST(DiskTierTest, WritesThatFailAreCountedNotFatal) {
  // A file size limit makes every block write fail as a full disk would.
  const std::string dir = FreshDir("full");
  prometheus::Registry registry;
  auto tier = OpenTier(dir, registry);
  ASSERT_NE(tier, nullptr);
  struct rlimit old_limit;
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old_limit), 0);
  struct sigaction ignore = {}, old_action = {};
  ignore.sa_handler = SIG_IGN;
  ASSERT_EQ(::sigaction(SIGXFSZ, &ignore, &old_action), 0);
  struct rlimit limit = old_limit;
  limit.rlim_cur = 100;  // smaller than one block file
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &limit), 0);
  tier->Enqueue(H(1), H(0), 0, Bytes(1));
  tier->Enqueue(H(2), H(1), 1, Bytes(2));
  tier->Flush();
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &old_limit), 0);
  ASSERT_EQ(::sigaction(SIGXFSZ, &old_action, nullptr), 0);
  EXPECT_EQ(tier->blocks(), 0);
  EXPECT_EQ(Metric(registry, "tandem_kv_disk_write_failures_total{reason=\"io\"}"), 2);
  EXPECT_FALSE(tier->Read(H(1)).has_value());
  EXPECT_TRUE(fs::is_empty(dir) || (fs::exists(dir + "/LOCK") &&
                                    std::distance(fs::directory_iterator(dir),
                                                  fs::directory_iterator()) == 1));
  // Space again: the next writes land.
  tier->Enqueue(H(1), H(0), 0, Bytes(1));
  tier->Flush();
  EXPECT_TRUE(tier->Read(H(1)).has_value());
}

TEST(DiskTierTest, AFullWriteQueueDropsAndCounts) {
  const std::string dir = FreshDir("queue");
  prometheus::Registry registry;
  absl::StatusOr<std::unique_ptr<DiskTier>> tier = DiskTier::Open(
      {.dir = dir, .budget_bytes = 1 << 20, .max_queue_bytes = 64, .expect = Expect()},
      registry);
  ASSERT_TRUE(tier.ok()) << tier.status();
  // Room for one queued block: of many enqueued at once some are dropped
  // (how many depends on how fast the writer takes them).
  int accepted = 0;
  for (uint64_t i = 1; i <= 50; ++i) accepted += (*tier)->Enqueue(H(i), H(i - 1), 0, Bytes(i));
  (*tier)->Flush();
  EXPECT_EQ((*tier)->blocks(), accepted);
  EXPECT_EQ(Metric(registry, "tandem_kv_disk_write_failures_total{reason=\"queue_full\"}"),
            50 - accepted);
}

}  // namespace
}  // namespace tandem::worker
