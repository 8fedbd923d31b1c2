// Pulls a prompt's leading KV blocks from the prefill worker that holds them
// instead of computing them: asks it to export them (Prefill/ExportPrefix:
// a copy of its cached blocks under a lease, no compute), then fetches them
// with the KvFetcher (checksums, model and hash chain over the prompt's
// tokens, as any transfer). Counts pulls by outcome. Thread-safe; each
// pull's callback runs once, on a gRPC thread.
#ifndef TANDEM_PREFILL_WORKER_PREFIX_PULLER_H_
#define TANDEM_PREFILL_WORKER_PREFIX_PULLER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "engine/kv/kv_snapshot.h"
#include "kvtransfer/rpc/kv_fetcher.h"
#include "kvtransfer/rpc/release_client.h"
#include "prometheus/counter.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"
#include "rpc/channel_cache.h"

namespace tandem::prefill {

class PrefixPuller {
 public:
  // A pull in progress. Cancel() may be called from any thread, any time.
  class Pull {
   public:
    virtual ~Pull() = default;
    virtual void Cancel() = 0;
  };
  // The leading blocks (possibly fewer than asked: what the holder had), or
  // why not (Cancelled after Cancel()).
  using Done = std::function<void(absl::StatusOr<std::shared_ptr<const engine::KvSnapshot>>)>;

  // `channels`, `fetcher`, `releases` and `registry` must outlive the
  // puller and its pulls.
  PrefixPuller(rpc::ChannelCache& channels, kvtransfer::KvFetcher& fetcher,
               kvtransfer::ReleaseClient& releases, int32_t block_size,
               prometheus::Registry& registry);

  // Pulls the full blocks of `prefix` (whole blocks of the prompt, hashed
  // with `cache_salt`) from `holder`; `done` runs exactly once.
  std::shared_ptr<Pull> Start(const std::string& holder, std::vector<int32_t> prefix,
                              uint64_t cache_salt, absl::Time deadline, Done done);

 private:
  class Call;
  void Count(const absl::Status& status, absl::Duration took);

  rpc::ChannelCache& channels_;
  kvtransfer::KvFetcher& fetcher_;
  kvtransfer::ReleaseClient& releases_;
  const int32_t block_size_;
  prometheus::Family<prometheus::Counter>& pulls_;
  prometheus::Histogram& pull_seconds_;
};

}  // namespace tandem::prefill

#endif  // TANDEM_PREFILL_WORKER_PREFIX_PULLER_H_
