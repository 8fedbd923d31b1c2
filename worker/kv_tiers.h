// The cache tiers below a worker's KV pool, shared by prefill and decode
// workers: host RAM (worker/host_tier.h) and disk (worker/disk_tier.h),
// offered to the engine as its engine::KvTierStore.
//
//   pool hashes a block   -> queued for the disk writer (a frozen copy), so
//                            the disk holds what was computed, and survives
//                            a restart;
//   pool evicts a block   -> a frozen copy kept in host RAM;
//   host evicts a block   -> queued for disk if the disk lacks it;
//   a prompt's block the pool lacks -> host, else disk (verified), copied
//                            into a pool block (it leaves host RAM).
//
// Every change is a block event with its tier, for the block index.
// `--hot-cache-only` turns the disk tier off entirely: no directory, no
// writer thread, no file I/O. Engine-thread only, except AttachSink.
#ifndef TANDEM_WORKER_KV_TIERS_H_
#define TANDEM_WORKER_KV_TIERS_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/flags.h"
#include "engine/kv/kv_tier.h"
#include "engine/sched/request.h"
#include "kvtransfer/block_codec.h"
#include "prometheus/counter.h"
#include "prometheus/gauge.h"
#include "prometheus/registry.h"
#include "worker/disk_tier.h"
#include "worker/host_tier.h"

namespace tandem::worker {

struct KvTierOptions {
  int64_t host_budget_bytes = 0;    // 0: no host tier
  std::string disk_dir;             // empty: no disk tier
  int64_t disk_budget_bytes = 0;
  int64_t disk_queue_bytes = 64ll << 20;
  bool hot_cache_only = false;      // no disk tier, whatever disk_dir says
};

// --host-cache-mb, --disk-cache-dir, --disk-cache-mb, --disk-write-queue-mb,
// --hot-cache-only.
std::vector<common::FlagSpec> KvTierFlagSpecs();
// InvalidArgument naming the flag for out-of-range values.
absl::StatusOr<KvTierOptions> KvTierOptionsFromArgs(const common::Args& args);

class TieredKvStore final : public engine::KvTierStore {
 public:
  using EventSink = std::function<void(std::span<const engine::BlockEvent>)>;

  // The tiers `options` asks for, for blocks `expect` describes (the
  // engine's model and KV shape). Errors as DiskTier::Open.
  static absl::StatusOr<std::unique_ptr<TieredKvStore>> Create(
      const KvTierOptions& options, const kvtransfer::BlockExpectation& expect,
      prometheus::Registry& registry);

  // Where events go (the worker's BlockEventPublisher); the disk tier's
  // current holdings are sent at once. Call once, before the engine runs.
  void AttachSink(EventSink sink);
  // Sends the host tier's events since the last call (engine thread, after
  // each step, so that one step's changes make one batch).
  void PublishPending();

  // engine::KvTierStore.
  void OnStored(const engine::BlockHash& hash, const engine::BlockHash& parent,
                int32_t block_index, std::span<const uint8_t> block) override;
  void OnEvicted(const engine::BlockHash& hash, std::span<const uint8_t> block) override;
  std::optional<engine::TierBlock> Lookup(const engine::BlockHash& hash) override;
  void Promoted(const engine::BlockHash& hash, engine::KvTier from) override;

  const HostTier* host() const { return host_.get(); }
  DiskTier* disk() { return disk_.get(); }

 private:
  TieredKvStore(const KvTierOptions& options, prometheus::Registry& registry);

  void Event(engine::BlockEvent::Kind kind, const engine::BlockHash& hash);
  void UpdateHostGauges();

  std::unique_ptr<HostTier> host_;
  std::unique_ptr<DiskTier> disk_;
  EventSink sink_;
  std::vector<engine::BlockEvent> pending_;  // the host tier's, unsent

  prometheus::Gauge& host_bytes_;
  prometheus::Gauge& host_blocks_;
  prometheus::Counter& host_demotions_;
  prometheus::Counter& host_promotions_;
  prometheus::Counter& host_evictions_;
};

}  // namespace tandem::worker

#endif  // TANDEM_WORKER_KV_TIERS_H_
