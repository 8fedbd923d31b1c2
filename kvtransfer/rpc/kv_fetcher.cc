#include "kvtransfer/rpc/kv_fetcher.h"

#include <algorithm>
#include <atomic>
#include <map>
#include <random>
#include <string_view>
#include <utility>
#include <vector>

#include <grpcpp/alarm.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/impl/codegen/proto_utils.h>
#include <grpcpp/support/byte_buffer.h>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/check.h"
#include "common/status_macros.h"
#include "kvtransfer/kv_snapshot_codec.h"
#include "kvtransfer/rpc/block_message.h"
#include "rpc/metrics.h"
#include "rpc/status.h"
#include "tandem/v1/worker.grpc.pb.h"

namespace tandem::kvtransfer {
namespace {

constexpr char kFetchKvMethod[] = "/tandem.v1.Prefill/FetchKv";
constexpr int32_t kMaxStreams = 16;  // LeaseTable::kMaxStripes on the holder

// An id for a new fetch, unique among the fetches of one lease: a random
// per-process prefix (fetchers in other processes may fetch the same lease
// after this one) and a count.
uint64_t NextFetchId() {
  static const uint64_t kEpoch = uint64_t{std::random_device{}()} << 32;
  static std::atomic<uint32_t> next{1};
  return kEpoch | next.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace

// One fetch: a StripeCall per stream, the decoder they feed, and the
// outcome. Blocks are verified (checksum, header) on the gRPC thread of the
// stream that brought them; the in-order checks (index, hash chain) run
// under mu_ as soon as a block's predecessors are in. Keeps itself alive
// until its last stream has ended.
class KvFetcher::Transfer final : public KvFetcher::Fetch,
                                  public std::enable_shared_from_this<Transfer> {
 public:
  Transfer(KvFetcher* fetcher, FetchRequest request, Done done)
      : fetcher_(fetcher),
        request_(std::move(request)),
        done_(std::move(done)),
        stripes_(std::clamp(std::min(fetcher->streams_,
                                     request_.num_blocks - request_.first_block),
                            1, kMaxStreams)),
        decoder_(fetcher->expect_, request_.token_ids, request_.cache_salt, request_.first_block) {}

  void Begin();
  void Cancel() override {
    cancelled_.store(true);
    CancelStreams();
  }

  const FetchRequest& request() const { return request_; }
  int32_t stripes() const { return stripes_; }
  uint64_t fetch_id() const { return fetch_id_; }
  KvFetcher& fetcher() const { return *fetcher_; }

  // A block arrived on `stripe`'s stream, in `slices`; `expected` is the
  // index that stream owes next.
  absl::Status AddBlock(int32_t expected, std::shared_ptr<std::vector<grpc::Slice>> slices);
  // The first failure: recorded, every stream cancelled.
  void Fail(absl::Status status);
  // `stripe`'s stream ended with `status`; the last one finishes the fetch.
  void StreamDone(const grpc::Status& status);

 private:
  struct Arrived {
    absl::StatusOr<DecodedBlockPieces> block;
    std::shared_ptr<const void> owner;
  };

  void CancelStreams();
  void Finish();
  // The stall watchdog: fails the fetch when no block arrived for
  // request_.stall_timeout.
  void ArmStallAlarm(absl::Time at) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void CheckStall();

  KvFetcher* const fetcher_;
  const FetchRequest request_;
  const Done done_;
  const int32_t stripes_;
  const uint64_t fetch_id_ = NextFetchId();
  const absl::Time start_ = absl::Now();
  std::shared_ptr<Transfer> self_;
  std::vector<std::unique_ptr<StripeCall>> calls_;  // set in Begin, then read-only
  std::atomic<bool> cancelled_{false};

  absl::Mutex mu_;
  SnapshotDecoder decoder_ ABSL_GUARDED_BY(mu_);
  // Verified blocks that came before their predecessors, by index.
  std::map<int32_t, Arrived> waiting_ ABSL_GUARDED_BY(mu_);
  absl::Status error_ ABSL_GUARDED_BY(mu_);
  absl::Status transport_error_ ABSL_GUARDED_BY(mu_);  // first non-OK stream end
  int32_t running_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time last_block_ ABSL_GUARDED_BY(mu_) = start_;  // the fetch's start before one
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  std::unique_ptr<grpc::Alarm> stall_alarm_ ABSL_GUARDED_BY(mu_);
};

// One stream of a fetch, made as a generic call so each message arrives as
// the transport's buffers (a ByteBuffer of slices) rather than a parsed
// protobuf: the `block` field is verified where it lies and the snapshot
// keeps the slices as the block's bytes, so no copy is made between the
// socket and the engine's import into its pool. Reactions run on gRPC
// threads one at a time (one read outstanding); Cancel() only touches the
// context, which is thread-safe.
class KvFetcher::StripeCall final
    : public grpc::ClientBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  StripeCall(Transfer* transfer, int32_t stripe)
      : transfer_(transfer), stripe_(stripe), next_(transfer->request().first_block + stripe) {}

  void Begin() {
    const FetchRequest& r = transfer_->request();
    stub_ = std::make_unique<grpc::GenericStub>(
        transfer_->fetcher().channels_.Get(r.address, stripe_));
    ctx_.set_deadline(absl::ToChronoTime(r.deadline));
    tandem::v1::FetchKvRequest req;
    req.set_lease_id(r.lease_id);
    req.set_stripe(stripe_);
    req.set_stripes(transfer_->stripes());
    req.set_first_block(r.first_block);
    req.set_fetch_id(transfer_->fetch_id());
    bool own_buffer = false;
    const grpc::Status s = grpc::SerializationTraits<tandem::v1::FetchKvRequest>::Serialize(
        req, &request_bytes_, &own_buffer);
    TANDEM_CHECK(s.ok(), "serializing a FetchKvRequest") << s.error_message();
    // A server-streaming method called as a stream whose one request is
    // also its last.
    stub_->PrepareBidiStreamingCall(&ctx_, kFetchKvMethod, grpc::StubOptions(), this);
    StartWriteLast(&request_bytes_, grpc::WriteOptions());
    StartRead(&message_);
    StartCall();
  }

  void Cancel() { ctx_.TryCancel(); }

  void OnReadDone(bool ok) override {
    if (!ok) return;  // the stream ended; OnDone follows
    auto slices = std::make_shared<std::vector<grpc::Slice>>();
    absl::Status s;
    if (const grpc::Status dumped = message_.Dump(slices.get()); !dumped.ok()) {
      s = rpc::FromGrpcStatus(dumped, "reading a KV block message");
    } else {
      s = transfer_->AddBlock(next_, std::move(slices));
    }
    message_.Clear();
    if (!s.ok()) {
      transfer_->Fail(std::move(s));
      return;
    }
    next_ += transfer_->stripes();
    StartRead(&message_);
  }

  // gRPC's last call on this reactor; the transfer may delete it.
  void OnDone(const grpc::Status& status) override { transfer_->StreamDone(status); }

 private:
  Transfer* const transfer_;
  const int32_t stripe_;
  int32_t next_;  // the index this stream owes next
  std::unique_ptr<grpc::GenericStub> stub_;
  grpc::ClientContext ctx_;
  grpc::ByteBuffer request_bytes_;
  grpc::ByteBuffer message_;  // the read outstanding
};

void KvFetcher::Transfer::Begin() {
  self_ = shared_from_this();
  {
    absl::MutexLock lock(&mu_);
    running_ = stripes_;
    if (request_.stall_timeout < absl::InfiniteDuration()) {
      ArmStallAlarm(start_ + request_.stall_timeout);
    }
  }
  for (int32_t i = 0; i < stripes_; ++i) calls_.push_back(std::make_unique<StripeCall>(this, i));
  for (const std::unique_ptr<StripeCall>& call : calls_) call->Begin();
}

void KvFetcher::Transfer::ArmStallAlarm(absl::Time at) {
  stall_alarm_ = std::make_unique<grpc::Alarm>();
  // Weak: the transfer keeps itself alive only while its streams run.
  std::weak_ptr<Transfer> weak = weak_from_this();
  stall_alarm_->Set(absl::ToChronoTime(at), [weak](bool ok) {
    if (std::shared_ptr<Transfer> self = weak.lock(); ok && self != nullptr) self->CheckStall();
  });
}

void KvFetcher::Transfer::CheckStall() {
  absl::Duration silent;
  {
    absl::MutexLock lock(&mu_);
    if (finished_ || !error_.ok()) return;
    silent = absl::Now() - last_block_;
    if (silent < request_.stall_timeout) {
      ArmStallAlarm(last_block_ + request_.stall_timeout);
      return;
    }
  }
  Fail(absl::UnavailableError(absl::StrCat("fetching KV from ", request_.address,
                                           ": no block arrived in ",
                                           absl::FormatDuration(silent))));
}

void KvFetcher::Transfer::CancelStreams() {
  for (const std::unique_ptr<StripeCall>& call : calls_) call->Cancel();
}

absl::Status KvFetcher::Transfer::AddBlock(int32_t expected,
                                           std::shared_ptr<std::vector<grpc::Slice>> slices) {
  std::vector<std::string_view> pieces;
  pieces.reserve(slices->size());
  for (const grpc::Slice& slice : *slices) {
    pieces.emplace_back(reinterpret_cast<const char*>(slice.begin()), slice.size());
  }
  ASSIGN_OR_RETURN(BlockMessageView msg, ParseBlockMessage(pieces));
  if (expected >= request_.num_blocks) {
    return absl::DataLossError(absl::StrCat("kv block ", msg.index, " arrives after the ",
                                            request_.num_blocks, " blocks announced"));
  }
  if (msg.index != expected) {
    return absl::DataLossError(absl::StrCat("kv block index ", msg.index, " arrived where ",
                                            expected, " was due"));
  }
  // The costly part, checksum included, on this stream's thread.
  Arrived arrived{.block = DecodeBlockPieces(msg.block, fetcher_->expect_),
                  .owner = std::move(slices)};
  absl::MutexLock lock(&mu_);
  last_block_ = absl::Now();
  bytes_ += static_cast<int64_t>(msg.block_bytes);
  waiting_.emplace(msg.index, std::move(arrived));
  // Chain every block whose predecessors are in.
  for (auto it = waiting_.begin();
       it != waiting_.end() && it->first == decoder_.next_index(); it = waiting_.erase(it)) {
    RETURN_IF_ERROR(decoder_.Add(std::move(it->second.block), std::move(it->second.owner)));
  }
  return absl::OkStatus();
}

void KvFetcher::Transfer::Fail(absl::Status status) {
  {
    absl::MutexLock lock(&mu_);
    if (error_.ok()) error_ = std::move(status);
  }
  CancelStreams();
}

void KvFetcher::Transfer::StreamDone(const grpc::Status& status) {
  // Held until this returns: once this stream is counted out, the last
  // one may finish (and let go of the transfer) on another thread while
  // this one still cancels the others.
  std::shared_ptr<Transfer> keep = shared_from_this();
  bool last = false;
  {
    absl::MutexLock lock(&mu_);
    // A cancellation this side caused (after a bad block) is not a cause.
    const bool caused_here = status.error_code() == grpc::StatusCode::CANCELLED &&
                             (!error_.ok() || cancelled_.load());
    if (!status.ok() && !caused_here && transport_error_.ok()) {
      transport_error_ =
          rpc::FromGrpcStatus(status, absl::StrCat("fetching KV from ", request_.address));
    }
    last = --running_ == 0;
  }
  if (!last) {
    if (!status.ok()) CancelStreams();  // one stream down takes the fetch down
    return;
  }
  Finish();
}

void KvFetcher::Transfer::Finish() {
  std::shared_ptr<Transfer> keep = std::move(self_);  // this dies with `keep`
  FetchResult result{.kv = absl::UnknownError("unset"), .took = absl::Now() - start_};
  int64_t bytes = 0;
  {
    absl::MutexLock lock(&mu_);
    finished_ = true;
    stall_alarm_.reset();  // cancelled: its callback sees !ok
    bytes = bytes_;
    if (!error_.ok()) {
      result.kv = error_;
    } else if (cancelled_.load()) {
      result.kv = absl::CancelledError("KV fetch cancelled");
    } else if (!transport_error_.ok()) {
      result.kv = transport_error_;
    } else if (decoder_.next_index() != request_.num_blocks) {
      result.kv = absl::DataLossError(absl::StrCat(
          "received ", decoder_.blocks_added(), " KV blocks, expected ",
          request_.num_blocks - request_.first_block, " (blocks ", request_.first_block, "..",
          request_.num_blocks - 1, ")"));
    } else {
      absl::StatusOr<engine::KvSnapshot> kv = std::move(decoder_).Finish();
      if (kv.ok()) {
        kv->draft_tokens = request_.draft_tokens;
        result.kv = std::make_shared<const engine::KvSnapshot>(std::move(*kv));
      } else {
        result.kv = kv.status();
      }
    }
  }
  // Tell the holder at once, either way: it frees the blocks now instead
  // of waiting for the lease to lapse.
  fetcher_->releases_.Release(request_.address, request_.lease_id, result.kv.status());
  if (result.kv.ok()) {
    fetcher_->blocks_received_.Increment(request_.num_blocks - request_.first_block);
    fetcher_->blocks_skipped_.Increment(request_.first_block);
    fetcher_->bytes_received_.Increment(static_cast<double>(bytes));
    fetcher_->transfer_seconds_.Observe(absl::ToDoubleSeconds(result.took));
  } else if (!absl::IsCancelled(result.kv.status())) {
    fetcher_->transfer_failures_.Increment();
  }
  done_(std::move(result));
  fetcher_->TransferEnded();  // last: the fetcher may go once every fetch ended
}

KvFetcher::KvFetcher(rpc::ChannelCache& channels, ReleaseClient& releases,
                     const BlockExpectation& expect, prometheus::Registry& registry,
                     int32_t streams, const std::string& side)
    : channels_(channels),
      releases_(releases),
      expect_(expect),
      streams_(std::clamp(streams, 1, kMaxStreams)),
      blocks_received_(rpc::CounterMetric(registry, "tandem_kv_transfer_blocks_total",
                                          "KV blocks moved between workers",
                                          {{"direction", "received"}})),
      blocks_skipped_(rpc::CounterMetric(
          registry, "tandem_kv_transfer_blocks_skipped_total",
          "KV blocks a hand-off named that this worker held already and did not fetch")),
      bytes_received_(rpc::CounterMetric(registry, "tandem_kv_transfer_bytes_total",
                                         "KV bytes moved between workers (wire format)",
                                         {{"direction", "received"}})),
      transfer_failures_(rpc::CounterMetric(registry, "tandem_kv_transfer_failures_total",
                                            "KV transfers that failed on this side",
                                            {{"side", side}})),
      transfer_seconds_(rpc::LatencyHistogram(registry, "tandem_kv_transfer_seconds",
                                              "Time fetching and verifying KV blocks",
                                              {{"side", side}})) {}

KvFetcher::~KvFetcher() {
  absl::MutexLock lock(&mu_);
  auto idle = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return in_flight_ == 0; };
  mu_.Await(absl::Condition(&idle));
}

void KvFetcher::TransferEnded() {
  absl::MutexLock lock(&mu_);
  --in_flight_;
}

std::shared_ptr<KvFetcher::Fetch> KvFetcher::Start(FetchRequest request, Done done) {
  {
    absl::MutexLock lock(&mu_);
    ++in_flight_;
  }
  auto transfer = std::make_shared<Transfer>(this, std::move(request), std::move(done));
  transfer->Begin();
  return transfer;
}

}  // namespace tandem::kvtransfer
