#include "kvtransfer/rpc/lease_server.h"

#include <algorithm>
#include <atomic>
#include <iostream>
#include <optional>
#include <span>
#include <vector>

#include <grpcpp/impl/codegen/proto_utils.h>
#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/slice.h>

#include "absl/strings/str_cat.h"
#include "kvtransfer/kv_snapshot_codec.h"
#include "kvtransfer/rpc/block_message.h"
#include "rpc/metrics.h"
#include "rpc/status.h"

namespace tandem::kvtransfer {

namespace {

template <typename T>
void DeleteHeld(void* held) {
  delete static_cast<T*>(held);
}

}  // namespace

// One FetchKv stream: one stripe of the lease's blocks from first_block on
// (every one of them when the fetch is not striped). Each block goes out as
// a KvBlockMessage in protobuf wire format assembled from slices: the framing and block header (copied,
// ~80 bytes), the payload straight from the leased snapshot (no copy; the
// slice holds a reference to the lease's blocks) and the checksum. Only the
// last, partial block is encoded into a buffer (its unused slots are
// zeroed). Reactions run on gRPC threads, one at a time (one write
// outstanding), so only `cancelled_` is shared with OnCancel.
class KvLeaseServer::FetchReactor final : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
 public:
  FetchReactor(KvLeaseServer* server, const tandem::v1::FetchKvRequest& request)
      : server_(server),
        lease_id_(request.lease_id()),
        stripe_(request.stripe()),
        stripes_(std::max(request.stripes(), 1)),
        fetch_id_(request.fetch_id()),
        next_(request.first_block() + stripe_) {
    absl::StatusOr<std::shared_ptr<const LeasedKv>> kv =
        server_->leases_.Acquire(lease_id_, stripe_, stripes_, request.first_block(), fetch_id_);
    if (!kv.ok()) {
      Finish(rpc::ToGrpcStatus(kv.status()));
      return;
    }
    kv_ = std::move(*kv);
    WriteNext();
  }

  void OnWriteDone(bool ok) override {
    if (!ok) {
      // The peer is gone (or cancelled): the lease ends with its fetch,
      // unless another fetch has taken the lease over.
      if (!cancelled_.load()) server_->transfer_failures_.Increment();
      server_->leases_.AbandonFetch(lease_id_, fetch_id_);
      server_->UpdateGauges();
      Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE, "KV fetch broke off"));
      return;
    }
    server_->leases_.Renew(lease_id_);  // the transfer is alive
    ++sent_;
    sent_bytes_ += msg_bytes_;
    next_ += stripes_;
    WriteNext();
  }

  void OnCancel() override { cancelled_.store(true); }
  void OnDone() override { delete this; }

 private:
  void WriteNext() {
    if (next_ >= kv_->blocks) {
      server_->blocks_sent_.Increment(sent_);
      server_->bytes_sent_.Increment(static_cast<double>(sent_bytes_));
      server_->transfer_seconds_.Observe(absl::ToDoubleSeconds(absl::Now() - start_));
      // A completed fetch ends the lease once every stripe has.
      server_->leases_.CompleteStripe(lease_id_, stripe_, fetch_id_);
      server_->UpdateGauges();
      Finish(grpc::Status::OK);
      return;
    }
    const SnapshotEncoder& encoder = *kv_->encoder;
    if (std::optional<BlockFrame> frame = encoder.Frame(next_); frame.has_value()) {
      const PayloadPieces payload = encoder.Payload(next_);
      size_t payload_bytes = 0;
      for (const std::span<const uint8_t> piece : payload) payload_bytes += piece.size();
      std::string head = BlockMessagePrefix(
          next_, frame->header.size() + payload_bytes + frame->checksum.size());
      head += frame->header;
      std::vector<grpc::Slice> slices;
      slices.reserve(payload.size() + 2);
      slices.emplace_back(head);
      for (const std::span<const uint8_t> piece : payload) {
        // Each slice holds a reference to the lease's blocks.
        slices.emplace_back(const_cast<uint8_t*>(piece.data()), piece.size(),
                            &DeleteHeld<std::shared_ptr<const LeasedKv>>,
                            new std::shared_ptr<const LeasedKv>(kv_));
      }
      slices.emplace_back(frame->checksum);
      msg_ = grpc::ByteBuffer(slices.data(), slices.size());
      msg_bytes_ = frame->header.size() + payload_bytes + frame->checksum.size();
    } else {
      auto* block = new std::string();
      encoder.EncodeTo(next_, block);
      grpc::Slice slices[2] = {
          grpc::Slice(BlockMessagePrefix(next_, block->size())),
          grpc::Slice(block->data(), block->size(), &DeleteHeld<std::string>, block),
      };
      msg_ = grpc::ByteBuffer(slices, 2);
      msg_bytes_ = block->size();
    }
    StartWrite(&msg_);
  }

  KvLeaseServer* const server_;
  const std::string lease_id_;
  const int32_t stripe_;
  const int32_t stripes_;
  const uint64_t fetch_id_;
  const absl::Time start_ = absl::Now();
  std::shared_ptr<const LeasedKv> kv_;
  int32_t next_;  // the block being written
  int32_t sent_ = 0;
  int64_t sent_bytes_ = 0;
  size_t msg_bytes_ = 0;  // wire bytes of the block being written
  grpc::ByteBuffer msg_;  // the write outstanding
  std::atomic<bool> cancelled_{false};
};

KvLeaseServer::KvLeaseServer(const LeaseTableOptions& options, prometheus::Registry& registry)
    : leases_(options),
      blocks_sent_(rpc::CounterMetric(registry, "tandem_kv_transfer_blocks_total",
                                      "KV blocks moved between workers", {{"direction", "sent"}})),
      bytes_sent_(rpc::CounterMetric(registry, "tandem_kv_transfer_bytes_total",
                                     "KV bytes moved between workers (wire format)",
                                     {{"direction", "sent"}})),
      leases_expired_(rpc::CounterMetric(registry, "tandem_kv_leases_expired_total",
                                         "KV leases dropped because their TTL lapsed")),
      lease_renewals_(rpc::CounterMetric(registry, "tandem_kv_lease_renewals_total",
                                         "KV lease TTLs renewed by a hand-off's heartbeat")),
      transfer_failures_(rpc::CounterMetric(
          registry, "tandem_kv_transfer_failures_total",
          "KV transfers that failed: broken off, or reported failed by the fetching side",
          {{"side", "prefill"}})),
      transfer_seconds_(rpc::LatencyHistogram(registry, "tandem_kv_transfer_seconds",
                                              "Time streaming a lease's KV blocks",
                                              {{"side", "prefill"}})),
      leases_held_(rpc::GaugeMetric(registry, "tandem_kv_leases", "KV leases held")),
      blocks_leased_(
          rpc::GaugeMetric(registry, "tandem_kv_blocks_leased", "KV blocks held under leases")),
      bytes_leased_(rpc::GaugeMetric(registry, "tandem_kv_lease_bytes",
                                     "Wire bytes of the KV blocks held under leases")) {
  reaper_ = std::thread([this] { ReapExpired(); });
}

KvLeaseServer::~KvLeaseServer() {
  stop_.Notify();
  reaper_.join();
}

void KvLeaseServer::ReapExpired() {
  // Expiry needs no precision finer than a fraction of the TTL.
  const absl::Duration period = std::max(leases_.ttl() / 4, absl::Milliseconds(10));
  while (!stop_.WaitForNotificationWithTimeout(period)) {
    const int32_t n = leases_.Expire(absl::Now());
    if (n > 0) leases_expired_.Increment(n);
    UpdateGauges();
  }
}

void KvLeaseServer::UpdateGauges() {
  const LeaseStats s = leases_.stats();
  leases_held_.Set(s.leases);
  blocks_leased_.Set(s.blocks);
  bytes_leased_.Set(static_cast<double>(s.bytes));
}

absl::StatusOr<KvLeaseServer::Held> KvLeaseServer::Hold(
    std::shared_ptr<const engine::KvSnapshot> kv, std::vector<int32_t> token_ids,
    uint64_t cache_salt) {
  const int32_t full_blocks = kv->block_size > 0 ? kv->n_tokens / kv->block_size : 0;
  auto encoder = std::make_shared<const SnapshotEncoder>(std::move(kv), std::move(token_ids),
                                                         cache_salt);
  auto leased = std::make_shared<const LeasedKv>(LeasedKv{
      .encoder = encoder, .blocks = encoder->num_blocks(), .bytes = encoder->wire_bytes()});
  absl::StatusOr<std::string> id = leases_.Create(leased);
  if (!id.ok()) return id.status();
  UpdateGauges();
  return Held{.lease_id = std::move(*id),
              .num_blocks = leased->blocks,
              .bytes = leased->bytes,
              .full_block_hashes = std::vector<engine::BlockHash>(
                  encoder->hashes().begin(), encoder->hashes().begin() + full_blocks)};
}

grpc::ServerWriteReactor<grpc::ByteBuffer>* KvLeaseServer::Fetch(
    grpc::CallbackServerContext*, const grpc::ByteBuffer* request) {
  grpc::ByteBuffer copy = *request;  // shares the slices
  tandem::v1::FetchKvRequest parsed;
  if (!grpc::SerializationTraits<tandem::v1::FetchKvRequest>::Deserialize(&copy, &parsed).ok()) {
    parsed.Clear();  // answered NOT_FOUND like any unknown lease
  }
  return new FetchReactor(this, parsed);
}

absl::Status KvLeaseServer::Renew(const tandem::v1::RenewKvRequest& request,
                                 tandem::v1::RenewKvResponse* response) {
  if (request.lease_ids_size() > kMaxRenewIds) {
    return absl::InvalidArgumentError(absl::StrCat(
        "lease_ids: ", request.lease_ids_size(), " ids, at most ", kMaxRenewIds, " per call"));
  }
  for (const std::string& id : request.lease_ids()) {
    if (leases_.Renew(id)) {
      lease_renewals_.Increment();
    } else {
      response->add_unknown_lease_ids(id);
    }
  }
  return absl::OkStatus();
}

void KvLeaseServer::Release(const tandem::v1::ReleaseKvRequest& request) {
  // A lease already gone (fetched, released twice, expired) has nothing left
  // to count.
  if (leases_.Release(request.lease_id()) && !request.ok() && !request.cancelled()) {
    transfer_failures_.Increment();
    std::cerr << "KV lease " << request.lease_id() << " failed on the fetching side: "
              << request.error() << "\n";
  }
  UpdateGauges();
}

}  // namespace tandem::kvtransfer
