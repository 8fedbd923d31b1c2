#include "worker/kv_tiers.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "common/status_macros.h"
#include "rpc/metrics.h"

namespace tandem::worker {

std::vector<common::FlagSpec> KvTierFlagSpecs() {
  return {
      {.name = "host-cache-mb", .default_value = "1024",
       .help = "host RAM tier for KV blocks evicted from the pool, MiB (twice the default "
               "pool, as SGLang's HiCache ratio); 0 = off"},
      {.name = "disk-cache-dir", .default_value = "",
       .help = "directory of the disk KV tier (one per worker; created when missing); "
               "empty = off"},
      {.name = "disk-cache-mb", .default_value = "10240",
       .help = "disk KV tier budget, MiB (least recently used files deleted past it)"},
      {.name = "disk-write-queue-mb", .default_value = "64",
       .help = "KV blocks waiting for the disk writer, MiB; past it blocks are not written "
               "(counted)"},
      {.name = "hot-cache-only", .default_value = "false",
       .help = "keep KV only in memory: the disk tier is off (no directory, no writer "
               "thread, no file I/O) whatever --disk-cache-dir says",
       .is_bool = true},
  };
}

absl::StatusOr<KvTierOptions> KvTierOptionsFromArgs(const common::Args& args) {
  KvTierOptions o;
  ASSIGN_OR_RETURN(const int64_t host_mb, args.Int("host-cache-mb"));
  ASSIGN_OR_RETURN(const int64_t disk_mb, args.Int("disk-cache-mb"));
  ASSIGN_OR_RETURN(const int64_t queue_mb, args.Int("disk-write-queue-mb"));
  constexpr int64_t kMaxMb = int64_t{1} << 30;  // 1 PiB: anything above is a typo
  if (host_mb < 0 || host_mb > kMaxMb) {
    return absl::InvalidArgumentError(
        absl::StrCat("--host-cache-mb: ", host_mb, " is outside [0, ", kMaxMb, "]"));
  }
  if (disk_mb < 1 || disk_mb > kMaxMb) {
    return absl::InvalidArgumentError(
        absl::StrCat("--disk-cache-mb: ", disk_mb, " is outside [1, ", kMaxMb, "]"));
  }
  if (queue_mb < 1 || queue_mb > 65536) {
    return absl::InvalidArgumentError(
        absl::StrCat("--disk-write-queue-mb: ", queue_mb, " is outside [1, 65536]"));
  }
  o.host_budget_bytes = host_mb << 20;
  o.disk_dir = args.String("disk-cache-dir");
  o.disk_budget_bytes = disk_mb << 20;
  o.disk_queue_bytes = queue_mb << 20;
  o.hot_cache_only = args.Bool("hot-cache-only");
  return o;
}

TieredKvStore::TieredKvStore(const KvTierOptions& options, prometheus::Registry& registry)
    : host_bytes_(rpc::GaugeMetric(registry, "tandem_kv_tier_bytes",
                                   "Bytes of KV blocks each cache tier holds",
                                   {{"tier", "host"}})),
      host_blocks_(rpc::GaugeMetric(registry, "tandem_kv_tier_blocks",
                                    "KV blocks each cache tier holds", {{"tier", "host"}})),
      host_demotions_(rpc::CounterMetric(registry, "tandem_kv_tier_demotions_total",
                                         "KV blocks copied into a lower cache tier",
                                         {{"tier", "host"}})),
      host_promotions_(rpc::CounterMetric(registry, "tandem_kv_tier_promotions_total",
                                          "KV blocks copied from a lower cache tier back into "
                                          "the engine's pool for a prompt",
                                          {{"tier", "host"}})),
      host_evictions_(rpc::CounterMetric(registry, "tandem_kv_tier_evictions_total",
                                         "KV blocks a cache tier let go, by cause",
                                         {{"tier", "host"}, {"cause", "capacity"}})) {
  if (options.host_budget_bytes > 0) host_ = std::make_unique<HostTier>(options.host_budget_bytes);
}

absl::StatusOr<std::unique_ptr<TieredKvStore>> TieredKvStore::Create(
    const KvTierOptions& options, const kvtransfer::BlockExpectation& expect,
    prometheus::Registry& registry) {
  std::unique_ptr<TieredKvStore> store(new TieredKvStore(options, registry));
  if (options.hot_cache_only && !options.disk_dir.empty()) {
    common::LogLine("kv-tiers") << "--hot-cache-only: the disk tier is off; --disk-cache-dir "
                                << options.disk_dir << " is not used";
  }
  if (!options.hot_cache_only && !options.disk_dir.empty()) {
    ASSIGN_OR_RETURN(store->disk_, DiskTier::Open({.dir = options.disk_dir,
                                                   .budget_bytes = options.disk_budget_bytes,
                                                   .max_queue_bytes = options.disk_queue_bytes,
                                                   .expect = expect},
                                                  registry));
  }
  store->UpdateHostGauges();
  return store;
}

void TieredKvStore::AttachSink(EventSink sink) {
  sink_ = std::move(sink);
  if (disk_ != nullptr) {
    disk_->AttachSink([this](const std::vector<engine::BlockEvent>& events) { sink_(events); });
  }
}

void TieredKvStore::PublishPending() {
  if (pending_.empty()) return;
  if (sink_) sink_(pending_);
  pending_.clear();
}

void TieredKvStore::Event(engine::BlockEvent::Kind kind, const engine::BlockHash& hash) {
  pending_.push_back({.kind = kind, .hash = hash, .parent_hash = {},
                      .tier = engine::KvTier::kHost});
}

void TieredKvStore::UpdateHostGauges() {
  host_bytes_.Set(host_ == nullptr ? 0.0 : static_cast<double>(host_->bytes()));
  host_blocks_.Set(host_ == nullptr ? 0.0 : static_cast<double>(host_->blocks()));
}

void TieredKvStore::OnStored(const engine::BlockHash& hash, const engine::BlockHash& parent,
                             int32_t block_index, std::span<const uint8_t> block) {
  if (disk_ == nullptr || disk_->Contains(hash)) return;
  // A copy: the writer thread must never read memory the pool reuses.
  disk_->Enqueue(hash, parent, block_index,
                 engine::KvBlockBytes(block.data(), block.data() + block.size()));
}

void TieredKvStore::OnEvicted(const engine::BlockHash& hash, std::span<const uint8_t> block) {
  if (host_ == nullptr) return;
  std::vector<HostTier::Evicted> evicted;
  // A copy: the pool writes this memory again right after the call.
  if (host_->Put(hash, engine::KvBlockBytes(block.data(), block.data() + block.size()),
                 evicted)) {
    host_demotions_.Increment();
    Event(engine::BlockEvent::Kind::kStored, hash);
  }
  for (HostTier::Evicted& e : evicted) {
    host_evictions_.Increment();
    Event(engine::BlockEvent::Kind::kRemoved, e.hash);
    // Its write-through copy may have been dropped (a full queue): the
    // frozen bytes are at hand, so the disk gets them now.
    if (disk_ != nullptr && !disk_->Contains(e.hash)) {
      disk_->Enqueue(e.hash, {}, 0, std::move(e.bytes));
    }
  }
  UpdateHostGauges();
}

std::optional<engine::TierBlock> TieredKvStore::Lookup(const engine::BlockHash& hash) {
  if (host_ != nullptr) {
    if (std::optional<engine::KvBlockBytes> bytes = host_->Get(hash); bytes.has_value()) {
      return engine::TierBlock{.tier = engine::KvTier::kHost, .bytes = std::move(*bytes)};
    }
  }
  if (disk_ != nullptr) {
    if (std::optional<engine::KvBlockBytes> bytes = disk_->Read(hash); bytes.has_value()) {
      return engine::TierBlock{.tier = engine::KvTier::kDisk, .bytes = std::move(*bytes)};
    }
  }
  return std::nullopt;
}

void TieredKvStore::Promoted(const engine::BlockHash& hash, engine::KvTier from) {
  if (from == engine::KvTier::kHost && host_ != nullptr) {
    host_promotions_.Increment();
    // The pool's copy is the one in use; the host tier gets it back if the
    // pool evicts it again.
    if (host_->Erase(hash)) Event(engine::BlockEvent::Kind::kRemoved, hash);
    UpdateHostGauges();
  } else if (from == engine::KvTier::kDisk && disk_ != nullptr) {
    disk_->CountPromotion();
  }
}

}  // namespace tandem::worker
