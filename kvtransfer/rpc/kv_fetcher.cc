#include "kvtransfer/rpc/kv_fetcher.h"

#include <atomic>
#include <string_view>
#include <vector>

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/impl/codegen/proto_utils.h>
#include <grpcpp/support/byte_buffer.h>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/status_macros.h"
#include "kvtransfer/kv_snapshot_codec.h"
#include "kvtransfer/rpc/block_message.h"
#include "rpc/metrics.h"
#include "rpc/status.h"
#include "tandem/v1/worker.grpc.pb.h"

namespace tandem::kvtransfer {
namespace {

constexpr char kFetchKvMethod[] = "/tandem.v1.Prefill/FetchKv";

}  // namespace

// One FetchKv call, made as a generic call so each message arrives as the
// transport's buffers (a ByteBuffer of slices) rather than a parsed
// protobuf: the `block` field is verified where it lies and the snapshot
// keeps the slices as the block's bytes, so no copy is made between the
// socket and the engine's import into its pool. Reactions run on gRPC
// threads one at a time (one read outstanding); Cancel() only touches the
// context, which is thread-safe. Keeps itself alive until OnDone.
class KvFetcher::Call final : public grpc::ClientBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>,
                              public KvFetcher::Fetch,
                              public std::enable_shared_from_this<Call> {
 public:
  Call(KvFetcher* fetcher, FetchRequest request, Done done)
      : fetcher_(fetcher),
        request_(std::move(request)),
        done_(std::move(done)),
        decoder_(fetcher->expect_, request_.token_ids) {}

  void Begin() {
    self_ = shared_from_this();
    stub_ = std::make_unique<grpc::GenericStub>(fetcher_->channels_.Get(request_.address));
    ctx_.set_deadline(absl::ToChronoTime(request_.deadline));
    tandem::v1::FetchKvRequest req;
    req.set_lease_id(request_.lease_id);
    bool own_buffer = false;
    if (const grpc::Status s = grpc::SerializationTraits<tandem::v1::FetchKvRequest>::Serialize(
            req, &request_bytes_, &own_buffer);
        !s.ok()) {
      error_ = rpc::FromGrpcStatus(s, "serializing FetchKvRequest");
    }
    // A server-streaming method called as a stream whose one request is
    // also its last.
    stub_->PrepareBidiStreamingCall(&ctx_, kFetchKvMethod, grpc::StubOptions(), this);
    StartWriteLast(&request_bytes_, grpc::WriteOptions());
    StartRead(&message_);
    StartCall();
  }

  void Cancel() override {
    cancelled_.store(true);
    ctx_.TryCancel();
  }

  void OnReadDone(bool ok) override {
    if (!ok) return;  // the stream ended; OnDone follows
    absl::Status s = AddBlock();
    message_.Clear();
    if (!s.ok()) {
      error_ = std::move(s);
      ctx_.TryCancel();
      return;
    }
    StartRead(&message_);
  }

  // Checks the message just read as the next block and adds it. The
  // snapshot keeps the message's slices as the block's bytes.
  absl::Status AddBlock() {
    auto slices = std::make_shared<std::vector<grpc::Slice>>();
    if (const grpc::Status s = message_.Dump(slices.get()); !s.ok()) {
      return rpc::FromGrpcStatus(s, "reading a KV block message");
    }
    std::vector<std::string_view> pieces;
    pieces.reserve(slices->size());
    for (const grpc::Slice& slice : *slices) {
      pieces.emplace_back(reinterpret_cast<const char*>(slice.begin()), slice.size());
    }
    ASSIGN_OR_RETURN(BlockMessageView msg, ParseBlockMessage(pieces));
    const int32_t index = decoder_.blocks_added();
    if (index >= request_.num_blocks) {
      return absl::DataLossError(absl::StrCat("kv block ", msg.index, " arrives after the ",
                                              request_.num_blocks, " blocks announced"));
    }
    if (msg.index != index) {
      return absl::DataLossError(
          absl::StrCat("kv block index ", msg.index, " arrived at position ", index));
    }
    bytes_ += static_cast<int64_t>(msg.block_bytes);
    return decoder_.Add(msg.block, std::move(slices));
  }

  void OnDone(const grpc::Status& status) override {
    std::shared_ptr<Call> keep = std::move(self_);  // this dies with `keep`
    FetchResult result{.kv = absl::UnknownError("unset"), .took = absl::Now() - start_};
    if (!error_.ok()) {
      result.kv = error_;
    } else if (!status.ok()) {
      result.kv = cancelled_.load()
                      ? absl::CancelledError("KV fetch cancelled")
                      : rpc::FromGrpcStatus(status,
                                            absl::StrCat("fetching KV from ", request_.address));
    } else if (decoder_.blocks_added() != request_.num_blocks) {
      result.kv = absl::DataLossError(absl::StrCat("received ", decoder_.blocks_added(),
                                                   " KV blocks, expected ",
                                                   request_.num_blocks));
    } else {
      absl::StatusOr<engine::KvSnapshot> kv = std::move(decoder_).Finish();
      if (kv.ok()) {
        result.kv = std::make_shared<const engine::KvSnapshot>(std::move(*kv));
      } else {
        result.kv = kv.status();
      }
    }
    // Tell the holder at once, either way: it frees the blocks now instead
    // of waiting for the lease to lapse.
    fetcher_->releases_.Release(request_.address, request_.lease_id, result.kv.status());
    if (result.kv.ok()) {
      fetcher_->blocks_received_.Increment(request_.num_blocks);
      fetcher_->bytes_received_.Increment(static_cast<double>(bytes_));
      fetcher_->transfer_seconds_.Observe(absl::ToDoubleSeconds(result.took));
    } else if (!absl::IsCancelled(result.kv.status())) {
      fetcher_->transfer_failures_.Increment();
    }
    done_(std::move(result));
    fetcher_->CallEnded();  // last: the fetcher may go once every call ended
  }

 private:
  KvFetcher* const fetcher_;
  const FetchRequest request_;
  const Done done_;
  const absl::Time start_ = absl::Now();
  std::shared_ptr<Call> self_;
  std::unique_ptr<grpc::GenericStub> stub_;
  grpc::ClientContext ctx_;
  grpc::ByteBuffer request_bytes_;
  grpc::ByteBuffer message_;  // the read outstanding
  SnapshotDecoder decoder_;
  int64_t bytes_ = 0;
  absl::Status error_;
  std::atomic<bool> cancelled_{false};
};

KvFetcher::KvFetcher(rpc::ChannelCache& channels, ReleaseClient& releases,
                     const BlockExpectation& expect, prometheus::Registry& registry)
    : channels_(channels),
      releases_(releases),
      expect_(expect),
      blocks_received_(rpc::CounterMetric(registry, "tandem_kv_transfer_blocks_total",
                                          "KV blocks moved between workers",
                                          {{"direction", "received"}})),
      bytes_received_(rpc::CounterMetric(registry, "tandem_kv_transfer_bytes_total",
                                         "KV bytes moved between workers (wire format)",
                                         {{"direction", "received"}})),
      transfer_failures_(rpc::CounterMetric(registry, "tandem_kv_transfer_failures_total",
                                            "KV transfers that failed on this side",
                                            {{"side", "decode"}})),
      transfer_seconds_(rpc::LatencyHistogram(registry, "tandem_kv_transfer_seconds",
                                              "Time fetching and verifying KV blocks",
                                              {{"side", "decode"}})) {}

KvFetcher::~KvFetcher() {
  absl::MutexLock lock(&mu_);
  auto idle = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return in_flight_ == 0; };
  mu_.Await(absl::Condition(&idle));
}

void KvFetcher::CallEnded() {
  absl::MutexLock lock(&mu_);
  --in_flight_;
}

std::shared_ptr<KvFetcher::Fetch> KvFetcher::Start(FetchRequest request, Done done) {
  {
    absl::MutexLock lock(&mu_);
    ++in_flight_;
  }
  auto call = std::make_shared<Call>(this, std::move(request), std::move(done));
  call->Begin();
  return call;
}

}  // namespace tandem::kvtransfer
