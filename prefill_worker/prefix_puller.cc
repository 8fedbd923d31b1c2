#include "prefill_worker/prefix_puller.h"

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "rpc/metrics.h"
#include "rpc/status.h"
#include "tandem/v1/worker.grpc.pb.h"

namespace tandem::prefill {

// One pull: the ExportPrefix call, then the fetch. Keeps itself alive
// through the callbacks it hands out; the fetch it holds holds it back until
// Finish lets go of the fetch.
class PrefixPuller::Call final : public PrefixPuller::Pull,
                                 public std::enable_shared_from_this<Call> {
 public:
  Call(PrefixPuller* puller, std::string holder, std::vector<int32_t> prefix, uint64_t cache_salt,
       absl::Time deadline, Done done)
      : puller_(puller),
        holder_(std::move(holder)),
        prefix_(std::move(prefix)),
        cache_salt_(cache_salt),
        deadline_(deadline),
        done_(std::move(done)) {}

  void Begin() {
    stub_ = tandem::v1::Prefill::NewStub(puller_->channels_.Get(holder_));
    ctx_.set_deadline(absl::ToChronoTime(deadline_));
    request_.mutable_prompt_token_ids()->Assign(prefix_.begin(), prefix_.end());
    request_.set_cache_salt(cache_salt_);
    std::shared_ptr<Call> self = shared_from_this();
    stub_->async()->ExportPrefix(&ctx_, &request_, &response_,
                                 [self](grpc::Status s) { self->OnExported(s); });
  }

  void Cancel() override {
    std::shared_ptr<kvtransfer::KvFetcher::Fetch> fetch;
    {
      absl::MutexLock lock(&mu_);
      cancelled_ = true;
      fetch = fetch_;
    }
    ctx_.TryCancel();
    if (fetch != nullptr) fetch->Cancel();
  }

 private:
  void OnExported(const grpc::Status& status) {
    if (!status.ok()) {
      Finish(rpc::FromGrpcStatus(status, "exporting a prefix from " + holder_));
      return;
    }
    const int32_t blocks = response_.num_blocks();
    const size_t tokens = static_cast<size_t>(blocks) * puller_->block_size_;
    if (blocks < 1 || tokens > prefix_.size()) {
      const absl::Status bad = absl::DataLossError(absl::StrCat(
          holder_, " exported ", blocks, " blocks of a ", prefix_.size(), "-token prefix"));
      puller_->releases_.Release(holder_, response_.lease_id(), bad);
      Finish(bad);
      return;
    }
    std::shared_ptr<Call> self = shared_from_this();
    {
      absl::MutexLock lock(&mu_);
      if (!cancelled_) {
        fetch_ = puller_->fetcher_.Start(
            {.address = holder_,
             .lease_id = response_.lease_id(),
             .num_blocks = blocks,
             .first_block = 0,
             .token_ids = std::vector<int32_t>(prefix_.begin(), prefix_.begin() + tokens),
             .cache_salt = cache_salt_,
             .deadline = deadline_},
            [self](kvtransfer::FetchResult r) { self->Finish(std::move(r.kv)); });
        return;
      }
    }
    const absl::Status cancelled = absl::CancelledError("prefix pull cancelled");
    puller_->releases_.Release(holder_, response_.lease_id(), cancelled);
    Finish(cancelled);
  }

  void Finish(absl::StatusOr<std::shared_ptr<const engine::KvSnapshot>> kv) {
    std::shared_ptr<kvtransfer::KvFetcher::Fetch> fetch;
    {
      // The fetch's callback holds this call: letting go of the fetch ends
      // the cycle (the fetch goes once its callback has returned).
      absl::MutexLock lock(&mu_);
      fetch = std::move(fetch_);
    }
    puller_->Count(kv.status(), absl::Now() - start_);
    done_(std::move(kv));
  }

  PrefixPuller* const puller_;
  const std::string holder_;
  const std::vector<int32_t> prefix_;
  const uint64_t cache_salt_;
  const absl::Time deadline_;
  const Done done_;
  const absl::Time start_ = absl::Now();
  std::unique_ptr<tandem::v1::Prefill::Stub> stub_;
  grpc::ClientContext ctx_;
  tandem::v1::ExportPrefixRequest request_;
  tandem::v1::ExportPrefixResponse response_;
  absl::Mutex mu_;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  std::shared_ptr<kvtransfer::KvFetcher::Fetch> fetch_ ABSL_GUARDED_BY(mu_);
};

PrefixPuller::PrefixPuller(rpc::ChannelCache& channels, kvtransfer::KvFetcher& fetcher,
                           kvtransfer::ReleaseClient& releases, int32_t block_size,
                           prometheus::Registry& registry)
    : channels_(channels),
      fetcher_(fetcher),
      releases_(releases),
      block_size_(block_size),
      pulls_(rpc::CounterFamily(registry, "tandem_prefix_pulls_total",
                                "Prompt prefixes pulled from another prefill worker, by outcome "
                                "(failed ones were computed)")),
      pull_seconds_(rpc::LatencyHistogram(registry, "tandem_prefix_pull_seconds",
                                          "Time exporting and fetching a pulled prefix")) {}

void PrefixPuller::Count(const absl::Status& status, absl::Duration took) {
  const char* outcome = status.ok() ? "ok" : absl::IsCancelled(status) ? "cancelled" : "failed";
  pulls_.Add({{"outcome", outcome}}).Increment();
  if (status.ok()) pull_seconds_.Observe(absl::ToDoubleSeconds(took));
}

std::shared_ptr<PrefixPuller::Pull> PrefixPuller::Start(const std::string& holder,
                                                        std::vector<int32_t> prefix,
                                                        uint64_t cache_salt,
                                                        absl::Time deadline, Done done) {
  auto call = std::make_shared<Call>(this, holder, std::move(prefix), cache_salt, deadline,
                                     std::move(done));
  call->Begin();
  return call;
}

}  // namespace tandem::prefill
