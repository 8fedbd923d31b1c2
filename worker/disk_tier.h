// The disk tier: full KV blocks as files in a directory this worker owns,
// under a byte budget, least recently used deleted first, so that prefix
// reuse survives memory pressure and restarts.
//
// Writes happen on the tier's own writer thread, never on the caller's: the
// caller hands over a frozen copy (Enqueue), the writer encodes it in the
// block wire format (header + payload + checksum, kvtransfer/block_codec.h),
// writes a temp file, fsyncs it and renames it into place, so a file under
// its final name is always complete. Reads (Read) verify the checksum and
// header every time; a file that fails is deleted, counted and reported as a
// miss, so its block is recomputed. Open() takes the directory's lock (a
// directory serves one process), deletes temp files a crash left, and
// rebuilds the index from the files (least recently written first).
// Thread-safe.
#ifndef TANDEM_WORKER_DISK_TIER_H_
#define TANDEM_WORKER_DISK_TIER_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <list>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "engine/kv/block_hash.h"
#include "engine/kv/kv_snapshot.h"
#include "engine/sched/request.h"
#include "kvtransfer/block_codec.h"
#include "prometheus/counter.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"

namespace tandem::worker {

struct DiskTierOptions {
  std::string dir;               // created when missing
  int64_t budget_bytes = 0;      // all block files together
  int64_t max_queue_bytes = 64ll << 20;  // blocks waiting for the writer
  // The blocks this worker reads back: files of another model or KV shape
  // are deleted at Open().
  kvtransfer::BlockExpectation expect;
};

class DiskTier {
 public:
  // Receives the tier's stored / removed events (tier kDisk), from the
  // writer thread or the caller of Read(); must not call back into the tier.
  using EventSink = std::function<void(const std::vector<engine::BlockEvent>&)>;

  // FailedPrecondition naming --disk-cache-dir when the directory cannot be
  // created, is not a directory, is not writable, is held by another process
  // (its pid in the message) or sits on a full filesystem; InvalidArgument
  // for a budget that holds no block.
  static absl::StatusOr<std::unique_ptr<DiskTier>> Open(const DiskTierOptions& options,
                                                        prometheus::Registry& registry);
  // Writes what is queued, then stops the writer and releases the lock.
  ~DiskTier();

  DiskTier(const DiskTier&) = delete;
  DiskTier& operator=(const DiskTier&) = delete;

  // Sends a stored event for every block held now, then forwards every later
  // event to `sink`. Call once, before the tier is used.
  void AttachSink(EventSink sink);

  // Queues a frozen copy of a full block for writing. False when the block is
  // held or queued already, or the queue is full (dropped and counted).
  bool Enqueue(const engine::BlockHash& hash, const engine::BlockHash& parent,
               int32_t block_index, engine::KvBlockBytes bytes);
  bool Contains(const engine::BlockHash& hash) const;
  // Reads and verifies the block's file: its payload, or nullopt when the
  // tier does not hold it or the file fails verification (then deleted,
  // counted, and reported removed).
  std::optional<engine::KvBlockBytes> Read(const engine::BlockHash& hash);
  // Counts a read whose block was copied into the pool.
  void CountPromotion() { promotions_.Increment(); }
  // Blocks until every block queued so far is written (or failed).
  void Flush();

  const std::string& dir() const { return options_.dir; }
  int64_t bytes() const;
  int64_t blocks() const;
  int64_t queued_blocks() const;

 private:
  struct Job {
    engine::BlockHash hash;
    engine::BlockHash parent;
    int32_t block_index = 0;
    engine::KvBlockBytes bytes;
  };
  struct File {
    engine::BlockHash hash;
    int64_t bytes = 0;
  };

  DiskTier(const DiskTierOptions& options, int lock_fd, prometheus::Registry& registry);

  // Indexes the directory's block files; deletes temp files and files this
  // worker cannot use.
  void Scan();
  void WriterLoop();
  // Writes one block (writer thread, mu_ not held); the file's size, or
  // nullopt after a failure (counted, temp file removed).
  std::optional<int64_t> Write(const Job& job);
  // Deletes least recently used files until `incoming` more bytes fit.
  void MakeRoomLocked(int64_t incoming, std::vector<engine::BlockEvent>& events)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Forgets `hash` and deletes its file; false when not held. By value: the
  // caller's may be the entry this erases.
  bool DropLocked(engine::BlockHash hash, std::vector<engine::BlockEvent>& events)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void EmitLocked(const std::vector<engine::BlockEvent>& events)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void UpdateGaugesLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::string PathOf(const engine::BlockHash& hash) const;

  const DiskTierOptions options_;
  const int lock_fd_;

  prometheus::Gauge& bytes_gauge_;
  prometheus::Gauge& blocks_gauge_;
  prometheus::Gauge& queue_gauge_;
  prometheus::Counter& stored_;         // demotions into the tier
  prometheus::Counter& promotions_;
  prometheus::Counter& evicted_capacity_;
  prometheus::Counter& evicted_corrupt_;
  prometheus::Counter& evicted_stale_;
  prometheus::Counter& checksum_failures_;
  prometheus::Counter& failed_io_;
  prometheus::Counter& failed_queue_full_;
  prometheus::Counter& written_bytes_;
  prometheus::Counter& read_bytes_;
  prometheus::Histogram& write_seconds_;
  prometheus::Histogram& read_seconds_;

  mutable absl::Mutex mu_;
  absl::CondVar changed_;
  // Files held, least recently used first, and where each sits.
  std::list<File> lru_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<engine::BlockHash, std::list<File>::iterator> index_ ABSL_GUARDED_BY(mu_);
  int64_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
  std::deque<Job> queue_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<engine::BlockHash> queued_ ABSL_GUARDED_BY(mu_);
  int64_t queue_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;  // the writer holds a job
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  int64_t io_failures_logged_ ABSL_GUARDED_BY(mu_) = 0;
  EventSink sink_ ABSL_GUARDED_BY(mu_);
  std::thread writer_;
};

}  // namespace tandem::worker

#endif  // TANDEM_WORKER_DISK_TIER_H_
