// The fetching side of KV transfers over the gRPC stream transport: streams a
// lease's blocks from the worker that holds them (striped over several
// streams), checks their order, decodes and verifies each one as it arrives
// (checksum, model, shape, hash chain over the prompt's tokens), and ends the
// lease with the outcome through the ReleaseClient without waiting for the
// answer. Used by the decode worker and by prefix pulls.
// Thread-safe; each fetch's callback runs once, on a gRPC thread.
#ifndef TANDEM_KVTRANSFER_RPC_KV_FETCHER_H_
#define TANDEM_KVTRANSFER_RPC_KV_FETCHER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "engine/kv/kv_snapshot.h"
#include "kvtransfer/block_codec.h"
#include "kvtransfer/rpc/release_client.h"
#include "prometheus/counter.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"
#include "rpc/channel_cache.h"

namespace tandem::kvtransfer {

struct FetchRequest {
  std::string address;   // the worker holding the lease
  std::string lease_id;
  int32_t num_blocks = 0;  // as the holder announced
  // Delta transfer: this side holds blocks [0, first_block) already (the
  // leading full blocks of token_ids); only the others are fetched.
  int32_t first_block = 0;
  std::vector<int32_t> token_ids;  // the positions the blocks hold
  uint64_t cache_salt = 0;         // the blocks' hash salt (the request's)
  absl::Time deadline = absl::InfiniteFuture();
  // The longest the fetch may go without a block arriving (the first one
  // included) before it fails Unavailable: a holder cut off by the network
  // sends nothing and resets nothing, and only this tells it from a slow
  // transfer. The holder streams from memory, so a healthy one is never
  // silent this long.
  absl::Duration stall_timeout = absl::InfiniteDuration();
  // How far a draft model's KV reaches in them, as the holder said
  // (engine::KvSnapshot::draft_tokens; unset: all of it).
  std::optional<int32_t> draft_tokens = std::nullopt;
};

struct FetchResult {
  // DataLoss for corrupt, missing or reordered blocks; FailedPrecondition for
  // blocks of another model or prompt; Unavailable when nothing arrived for
  // the stall timeout; the transport's error otherwise (Cancelled after
  // Cancel()).
  absl::StatusOr<std::shared_ptr<const engine::KvSnapshot>> kv;
  absl::Duration took;
};

class KvFetcher {
 public:
  // A fetch in progress. Cancel() may be called from any thread, any time.
  class Fetch {
   public:
    virtual ~Fetch() = default;
    virtual void Cancel() = 0;
  };
  using Done = std::function<void(FetchResult)>;

  // `expect` is what this worker accepts (its model, KV shape and dtype).
  // Each fetch is striped over `streams` streams (1..16), each on its own
  // connection to the holder, so the kernel's work on them runs in
  // parallel; blocks are verified on the stream that brought them and
  // chained in order. `channels`, `releases` and `registry` must outlive the
  // fetcher and every fetch it started.
  // `side` labels its metrics (`decode`; `pull` on a prefill worker).
  KvFetcher(rpc::ChannelCache& channels, ReleaseClient& releases, const BlockExpectation& expect,
            prometheus::Registry& registry, int32_t streams = 2,
            const std::string& side = "decode");
  // Waits for fetches still running (cancel them first to hurry them).
  ~KvFetcher();

  // Starts fetching; `done` runs exactly once when the fetch ends, after the
  // lease's release has been sent.
  std::shared_ptr<Fetch> Start(FetchRequest request, Done done);

 private:
  class Transfer;
  class StripeCall;
  void TransferEnded();

  rpc::ChannelCache& channels_;
  ReleaseClient& releases_;
  const BlockExpectation expect_;
  const int32_t streams_;
  prometheus::Counter& blocks_received_;
  prometheus::Counter& blocks_skipped_;
  prometheus::Counter& bytes_received_;
  prometheus::Counter& transfer_failures_;
  prometheus::Histogram& transfer_seconds_;
  mutable absl::Mutex mu_;
  int in_flight_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace tandem::kvtransfer

#endif  // TANDEM_KVTRANSFER_RPC_KV_FETCHER_H_
