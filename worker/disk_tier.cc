#include "worker/disk_tier.h"

#include <fcntl.h>
#include <pthread.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string_view>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/log.h"
#include "common/status_macros.h"
#include "rpc/metrics.h"

namespace tandem::worker {
namespace {

constexpr char kLockName[] = "LOCK";
constexpr char kBlockSuffix[] = ".kvb";
constexpr char kTempSuffix[] = ".tmp";

int64_t FileBytes(const kvtransfer::BlockExpectation& expect) {
  return static_cast<int64_t>(kvtransfer::kBlockHeaderBytes + kvtransfer::kBlockChecksumBytes) +
         expect.payload_bytes;
}

std::string Errno() { return std::strerror(errno); }

// Writes all of [data, data + n) at the file's current offset.
bool WriteAll(int fd, const char* data, size_t n) {
  while (n > 0) {
    const ssize_t w = ::write(fd, data, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    data += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

// The whole file, or nullopt with errno set.
std::optional<std::string> ReadFile(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  absl::Cleanup close_fd = [fd] { ::close(fd); };
  struct stat st;
  if (::fstat(fd, &st) != 0) return std::nullopt;
  std::string bytes(static_cast<size_t>(st.st_size), '\0');
  size_t got = 0;
  while (got < bytes.size()) {
    const ssize_t r = ::read(fd, bytes.data() + got, bytes.size() - got);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return std::nullopt;
    if (r == 0) break;  // shrank since fstat
    got += static_cast<size_t>(r);
  }
  bytes.resize(got);
  return bytes;
}

}  // namespace

absl::StatusOr<std::unique_ptr<DiskTier>> DiskTier::Open(const DiskTierOptions& options,
                                                         prometheus::Registry& registry) {
  const std::string& dir = options.dir;
  auto refuse = [&dir](const std::string& why) {
    return absl::FailedPreconditionError(absl::StrCat("--disk-cache-dir ", dir, ": ", why));
  };
  if (dir.empty()) return absl::InvalidArgumentError("--disk-cache-dir: empty path");
  const int64_t file_bytes = FileBytes(options.expect);
  if (options.budget_bytes < file_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--disk-cache-mb: ", options.budget_bytes, " bytes hold no KV block (one file is ",
        file_bytes, " bytes)"));
  }
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return refuse(absl::StrCat("cannot create it (", ec.message(), ")"));
  if (!std::filesystem::is_directory(dir, ec)) return refuse("not a directory");
  const std::string lock_path = absl::StrCat(dir, "/", kLockName);
  const int fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return refuse(absl::StrCat("not writable (", Errno(), ")"));
  absl::Cleanup close_fd = [fd] { ::close(fd); };
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    char pid[32] = {};
    const ssize_t n = ::pread(fd, pid, sizeof(pid) - 1, 0);
    const std::string holder = n > 0 ? std::string(pid, static_cast<size_t>(n)) : "unknown";
    return refuse(absl::StrCat("held by another process (pid ", holder,
                               "); every worker needs a directory of its own"));
  }
  const std::string pid = absl::StrCat(::getpid());
  if (::ftruncate(fd, 0) != 0 ||
      ::pwrite(fd, pid.data(), pid.size(), 0) != static_cast<ssize_t>(pid.size())) {
    return refuse(absl::StrCat("not writable (", Errno(), ")"));
  }
  struct statvfs fs;
  if (::statvfs(dir.c_str(), &fs) == 0 &&
      static_cast<int64_t>(fs.f_bavail) * static_cast<int64_t>(fs.f_frsize) < file_bytes) {
    return refuse(absl::StrCat("its filesystem is full (",
                               static_cast<int64_t>(fs.f_bavail) * fs.f_frsize,
                               " bytes free, one KV block file needs ", file_bytes, ")"));
  }
  std::move(close_fd).Cancel();
  std::unique_ptr<DiskTier> tier(new DiskTier(options, fd, registry));
  tier->Scan();
  tier->writer_ = std::thread([t = tier.get()] { t->WriterLoop(); });
  // Named from here, so that it has its name once Open returns.
  pthread_setname_np(tier->writer_.native_handle(), "tandem-kvdisk");
  return tier;
}

DiskTier::DiskTier(const DiskTierOptions& options, int lock_fd, prometheus::Registry& registry)
    : options_(options),
      lock_fd_(lock_fd),
      bytes_gauge_(rpc::GaugeMetric(registry, "tandem_kv_tier_bytes",
                                    "Bytes of KV blocks each cache tier holds",
                                    {{"tier", "disk"}})),
      blocks_gauge_(rpc::GaugeMetric(registry, "tandem_kv_tier_blocks",
                                     "KV blocks each cache tier holds", {{"tier", "disk"}})),
      queue_gauge_(rpc::GaugeMetric(registry, "tandem_kv_disk_write_queue_blocks",
                                    "KV blocks waiting for the disk tier's writer thread")),
      stored_(rpc::CounterMetric(registry, "tandem_kv_tier_demotions_total",
                                 "KV blocks copied into a lower cache tier",
                                 {{"tier", "disk"}})),
      promotions_(rpc::CounterMetric(registry, "tandem_kv_tier_promotions_total",
                                     "KV blocks copied from a lower cache tier back into the "
                                     "engine's pool for a prompt",
                                     {{"tier", "disk"}})),
      evicted_capacity_(rpc::CounterMetric(registry, "tandem_kv_tier_evictions_total",
                                           "KV blocks a cache tier let go, by cause",
                                           {{"tier", "disk"}, {"cause", "capacity"}})),
      evicted_corrupt_(rpc::CounterMetric(registry, "tandem_kv_tier_evictions_total",
                                          "KV blocks a cache tier let go, by cause",
                                          {{"tier", "disk"}, {"cause", "corrupt"}})),
      evicted_stale_(rpc::CounterMetric(registry, "tandem_kv_tier_evictions_total",
                                        "KV blocks a cache tier let go, by cause",
                                        {{"tier", "disk"}, {"cause", "stale"}})),
      checksum_failures_(rpc::CounterMetric(
          registry, "tandem_kv_tier_checksum_failures_total",
          "Stored KV blocks that failed verification when read (deleted, recomputed)",
          {{"tier", "disk"}})),
      failed_io_(rpc::CounterMetric(registry, "tandem_kv_disk_write_failures_total",
                                    "KV blocks the disk tier did not write, by reason",
                                    {{"reason", "io"}})),
      failed_queue_full_(rpc::CounterMetric(registry, "tandem_kv_disk_write_failures_total",
                                            "KV blocks the disk tier did not write, by reason",
                                            {{"reason", "queue_full"}})),
      written_bytes_(rpc::CounterMetric(registry, "tandem_kv_disk_written_bytes_total",
                                        "Bytes of KV block files the disk tier wrote")),
      read_bytes_(rpc::CounterMetric(registry, "tandem_kv_disk_read_bytes_total",
                                     "Bytes of KV block files the disk tier read")),
      write_seconds_(rpc::LatencyHistogram(
          registry, "tandem_kv_disk_write_seconds",
          "Time to write one KV block file (encode, write, fsync, rename)")),
      read_seconds_(rpc::LatencyHistogram(registry, "tandem_kv_disk_read_seconds",
                                          "Time to read and verify one KV block file")) {}

DiskTier::~DiskTier() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
    changed_.SignalAll();
  }
  if (writer_.joinable()) writer_.join();
  ::close(lock_fd_);  // releases the lock
}

std::string DiskTier::PathOf(const engine::BlockHash& hash) const {
  return absl::StrCat(options_.dir, "/", hash.ToHex(), kBlockSuffix);
}

void DiskTier::Scan() {
  struct Found {
    std::filesystem::file_time_type written;
    File file;
  };
  std::vector<Found> found;
  int64_t stale = 0;
  int64_t corrupt = 0;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(options_.dir, ec)) {
    const std::string name = entry.path().filename().string();
    const std::string path = entry.path().string();
    if (name.ends_with(kTempSuffix)) {
      ::unlink(path.c_str());  // a write a crash interrupted
      continue;
    }
    if (!name.ends_with(kBlockSuffix) || !entry.is_regular_file(ec)) continue;
    const std::optional<std::string> bytes = [&]() -> std::optional<std::string> {
      const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0) return std::nullopt;
      std::string header(kvtransfer::kBlockHeaderBytes, '\0');
      const ssize_t n = ::pread(fd, header.data(), header.size(), 0);
      ::close(fd);
      header.resize(static_cast<size_t>(std::max<ssize_t>(n, 0)));
      return header;
    }();
    if (!bytes.has_value()) continue;
    const int64_t size = static_cast<int64_t>(entry.file_size(ec));
    absl::StatusOr<kvtransfer::BlockHeader> header =
        kvtransfer::DecodeBlockHeader(*bytes, static_cast<uint64_t>(size), options_.expect);
    if (header.ok() && name != absl::StrCat(header->block_hash.ToHex(), kBlockSuffix)) {
      header = absl::DataLossError("the file's name and its block hash differ");
    }
    if (!header.ok()) {
      // Another model or KV shape (stale), or damaged (corrupt): either way
      // this worker can never use it.
      ::unlink(path.c_str());
      ++(header.status().code() == absl::StatusCode::kDataLoss ? corrupt : stale);
      continue;
    }
    found.push_back({.written = entry.last_write_time(ec),
                     .file = {.hash = header->block_hash, .bytes = size}});
  }
  std::sort(found.begin(), found.end(),
            [](const Found& a, const Found& b) { return a.written < b.written; });
  absl::MutexLock lock(&mu_);
  for (Found& f : found) {
    bytes_ += f.file.bytes;
    lru_.push_back(f.file);
    index_.emplace(f.file.hash, std::prev(lru_.end()));
  }
  std::vector<engine::BlockEvent> unused;
  MakeRoomLocked(0, unused);  // a budget lowered since the last run
  evicted_stale_.Increment(static_cast<double>(stale));
  evicted_corrupt_.Increment(static_cast<double>(corrupt));
  UpdateGaugesLocked();
  if (stale + corrupt > 0 || !found.empty()) {
    common::LogLine("disk-tier") << options_.dir << ": " << index_.size()
                                 << " KV blocks indexed, " << stale
                                 << " of another model or shape and " << corrupt
                                 << " damaged deleted";
  }
}

void DiskTier::AttachSink(EventSink sink) {
  absl::MutexLock lock(&mu_);
  sink_ = std::move(sink);
  std::vector<engine::BlockEvent> held;
  held.reserve(lru_.size());
  for (const File& f : lru_) {
    held.push_back({.kind = engine::BlockEvent::Kind::kStored, .hash = f.hash,
                    .parent_hash = {}, .tier = engine::KvTier::kDisk});
  }
  EmitLocked(held);
}

void DiskTier::EmitLocked(const std::vector<engine::BlockEvent>& events) {
  if (!events.empty() && sink_) sink_(events);
}

void DiskTier::UpdateGaugesLocked() {
  bytes_gauge_.Set(static_cast<double>(bytes_));
  blocks_gauge_.Set(static_cast<double>(lru_.size()));
  queue_gauge_.Set(static_cast<double>(queue_.size()));
}

bool DiskTier::Enqueue(const engine::BlockHash& hash, const engine::BlockHash& parent,
                       int32_t block_index, engine::KvBlockBytes bytes) {
  absl::MutexLock lock(&mu_);
  if (stop_ || index_.contains(hash) || queued_.contains(hash)) return false;
  const int64_t size = static_cast<int64_t>(bytes.size());
  if (queue_bytes_ + size > options_.max_queue_bytes) {
    failed_queue_full_.Increment();
    return false;
  }
  queued_.insert(hash);
  queue_bytes_ += size;
  queue_.push_back(
      {.hash = hash, .parent = parent, .block_index = block_index, .bytes = std::move(bytes)});
  UpdateGaugesLocked();
  changed_.SignalAll();
  return true;
}

bool DiskTier::Contains(const engine::BlockHash& hash) const {
  absl::MutexLock lock(&mu_);
  return index_.contains(hash);
}

std::optional<engine::KvBlockBytes> DiskTier::Read(const engine::BlockHash& hash) {
  {
    absl::MutexLock lock(&mu_);
    const auto it = index_.find(hash);
    if (it == index_.end()) return std::nullopt;
    lru_.splice(lru_.end(), lru_, it->second);  // most recently used
  }
  const absl::Time start = absl::Now();
  const std::string path = PathOf(hash);
  std::optional<std::string> file = ReadFile(path);
  absl::Status bad;
  if (!file.has_value()) {
    bad = absl::NotFoundError(absl::StrCat("cannot read ", path, " (", Errno(), ")"));
  } else {
    absl::StatusOr<kvtransfer::DecodedBlock> block =
        kvtransfer::DecodeBlock(*file, options_.expect);
    if (block.ok() && block->header.block_hash != hash) {
      block = absl::DataLossError(absl::StrCat("holds block ", block->header.block_hash.ToHex()));
    }
    if (block.ok()) {
      read_seconds_.Observe(absl::ToDoubleSeconds(absl::Now() - start));
      read_bytes_.Increment(static_cast<double>(file->size()));
      auto owner = std::make_shared<const std::string>(std::move(*file));
      const auto* payload = reinterpret_cast<const uint8_t*>(owner->data()) +
                            kvtransfer::kBlockHeaderBytes;
      const size_t n = owner->size() - kvtransfer::kBlockHeaderBytes -
                       kvtransfer::kBlockChecksumBytes;
      return engine::KvBlockBytes(owner, {std::span<const uint8_t>(payload, n)});
    }
    bad = block.status();
  }
  // Never used: forgotten and deleted, and the caller recomputes the block.
  common::LogLine("disk-tier") << "dropping KV block " << hash.ToHex() << ": " << bad.message();
  absl::MutexLock lock(&mu_);
  std::vector<engine::BlockEvent> events;
  if (DropLocked(hash, events)) {
    if (bad.code() == absl::StatusCode::kNotFound) {
      evicted_stale_.Increment();
    } else {
      checksum_failures_.Increment();
      evicted_corrupt_.Increment();
    }
  }
  UpdateGaugesLocked();
  EmitLocked(events);
  return std::nullopt;
}

bool DiskTier::DropLocked(engine::BlockHash hash, std::vector<engine::BlockEvent>& events) {
  const auto it = index_.find(hash);
  if (it == index_.end()) return false;
  bytes_ -= it->second->bytes;
  lru_.erase(it->second);
  index_.erase(it);
  ::unlink(PathOf(hash).c_str());
  events.push_back({.kind = engine::BlockEvent::Kind::kRemoved, .hash = hash,
                    .parent_hash = {}, .tier = engine::KvTier::kDisk});
  return true;
}

void DiskTier::MakeRoomLocked(int64_t incoming, std::vector<engine::BlockEvent>& events) {
  while (!lru_.empty() && bytes_ + incoming > options_.budget_bytes) {
    DropLocked(lru_.front().hash, events);
    evicted_capacity_.Increment();
  }
}

void DiskTier::Flush() {
  absl::MutexLock lock(&mu_);
  auto drained = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return queue_.empty() && !writing_;
  };
  while (!drained()) changed_.Wait(&mu_);
}

int64_t DiskTier::bytes() const {
  absl::MutexLock lock(&mu_);
  return bytes_;
}

int64_t DiskTier::blocks() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int64_t>(lru_.size());
}

int64_t DiskTier::queued_blocks() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int64_t>(queue_.size());
}

void DiskTier::WriterLoop() {
  absl::MutexLock lock(&mu_);
  bool dir_dirty = false;  // renames since the directory was last synced
  // Events go out in batches: when the queue drains, or every 64 blocks.
  std::vector<engine::BlockEvent> events;
  while (true) {
    while (queue_.empty() && !stop_) changed_.Wait(&mu_);
    if (queue_.empty()) break;  // stopping, and everything queued is written
    Job job = std::move(queue_.front());
    queue_.pop_front();
    writing_ = true;
    const int64_t size = static_cast<int64_t>(job.bytes.size());
    std::optional<int64_t> written;
    {
      mu_.Unlock();
      written = Write(job);
      mu_.Lock();
    }
    writing_ = false;
    queue_bytes_ -= size;
    queued_.erase(job.hash);
    if (written.has_value()) {
      MakeRoomLocked(*written, events);
      bytes_ += *written;
      lru_.push_back({.hash = job.hash, .bytes = *written});
      index_.emplace(job.hash, std::prev(lru_.end()));
      stored_.Increment();
      events.push_back({.kind = engine::BlockEvent::Kind::kStored, .hash = job.hash,
                        .parent_hash = job.parent, .tier = engine::KvTier::kDisk});
      dir_dirty = true;
    }
    UpdateGaugesLocked();
    if (queue_.empty() || events.size() >= 64) {
      EmitLocked(events);
      events.clear();
    }
    if (queue_.empty() && dir_dirty) {
      // The renames are durable once the directory is synced; batched per
      // drained queue rather than per file.
      mu_.Unlock();
      const int dfd = ::open(options_.dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
      if (dfd >= 0) {
        ::fsync(dfd);
        ::close(dfd);
      }
      mu_.Lock();
      dir_dirty = false;
    }
    changed_.SignalAll();
  }
}

std::optional<int64_t> DiskTier::Write(const Job& job) {
  const absl::Time start = absl::Now();
  const kvtransfer::BlockExpectation& e = options_.expect;
  const kvtransfer::BlockHeader header = {
      .model_fingerprint = e.model_fingerprint,
      .block_hash = job.hash,
      .parent_hash = job.parent,
      .block_index = static_cast<uint32_t>(job.block_index),
      .token_count = e.block_size,
      .block_size = e.block_size,
      .layer_count = e.layer_count,
      .kv_dim = e.kv_dim,
      .dtype = e.dtype,
  };
  const kvtransfer::BlockFrame frame = kvtransfer::EncodeBlockFrame(header, job.bytes.pieces());
  const std::string path = PathOf(job.hash);
  const std::string temp = absl::StrCat(path, kTempSuffix);
  std::string failure;
  const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    failure = absl::StrCat("open: ", Errno());
  } else {
    bool ok = WriteAll(fd, frame.header.data(), frame.header.size());
    for (const auto& piece : job.bytes.pieces()) {
      ok = ok && WriteAll(fd, reinterpret_cast<const char*>(piece.data()), piece.size());
    }
    ok = ok && WriteAll(fd, frame.checksum.data(), frame.checksum.size());
    if (!ok) failure = absl::StrCat("write: ", Errno());
    if (ok && ::fsync(fd) != 0) failure = absl::StrCat("fsync: ", Errno());
    if (::close(fd) != 0 && failure.empty()) failure = absl::StrCat("close: ", Errno());
    if (failure.empty() && ::rename(temp.c_str(), path.c_str()) != 0) {
      failure = absl::StrCat("rename: ", Errno());
    }
  }
  if (!failure.empty()) {
    ::unlink(temp.c_str());
    failed_io_.Increment();
    absl::MutexLock lock(&mu_);
    // The first failures say why; later ones are counted only.
    if (++io_failures_logged_ <= 3) {
      common::LogLine("disk-tier") << "cannot write " << temp << " (" << failure
                                   << "); the block stays uncached on disk";
    }
    return std::nullopt;
  }
  const int64_t size = static_cast<int64_t>(frame.header.size() + job.bytes.size() +
                                            frame.checksum.size());
  written_bytes_.Increment(static_cast<double>(size));
  write_seconds_.Observe(absl::ToDoubleSeconds(absl::Now() - start));
  return size;
}

}  // namespace tandem::worker
