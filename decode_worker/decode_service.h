// The Decode gRPC service (callback API): admits a request (bounded streams
// in flight), fetches its KV blocks from the prefill worker that holds them
// (KvFetcher: verified block by block, lease released without waiting),
// submits the sequence to the engine's continuous batch (via EngineLoop) and
// streams its tokens, one write outstanding, driven by the engine thread's
// listener. Cancelling the call cancels the fetch or the sequence at once.
// A session's turn (DecodeRequest.session_id) leaves its blocks pinned for
// the next one; the gateways keep session records here (SessionStore).
// Thread-safe.
#ifndef TANDEM_DECODE_WORKER_DECODE_SERVICE_H_
#define TANDEM_DECODE_WORKER_DECODE_SERVICE_H_

#include <memory>
#include <span>

#include "decode_worker/session_store.h"
#include "kvtransfer/rpc/kv_fetcher.h"
#include "kvtransfer/rpc/lease_keeper.h"
#include "kvtransfer/rpc/release_client.h"
#include "prometheus/counter.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"
#include "rpc/admission.h"
#include "rpc/channel_cache.h"
#include "tandem/v1/worker.grpc.pb.h"
#include "worker/block_event_publisher.h"
#include "worker/engine_loop.h"

namespace tandem::decode {

struct DecodeServiceOptions {
  // Upper bound on one KV fetch from a prefill worker.
  absl::Duration fetch_timeout = absl::Seconds(60);
  // The longest a fetch may go without a block arriving before it fails
  // Unavailable (the prefill worker cut off, or this worker from it); the
  // gateway then resumes the stream elsewhere.
  absl::Duration fetch_stall_timeout = absl::Seconds(1);
  rpc::AdmissionLimits admission;
  rpc::ChannelCacheOptions channels;
  // Streams one KV fetch is striped over (KvFetcher).
  int32_t kv_transfer_streams = 2;
  // Delta transfer: the blocks this worker's engine holds. A fetch skips the
  // prompt's leading blocks found here; nullptr fetches every block.
  const worker::BlockEventPublisher* held_blocks = nullptr;
  // The hand-off's heartbeat: a request's lease is renewed this often from
  // its arrival until its fetch ends (zero: off).
  absl::Duration lease_heartbeat = absl::Seconds(5);
  // A Decode stream with nothing written for this long sends a heartbeat
  // message (DecodeResponse.heartbeat; zero: never).
  absl::Duration stream_heartbeat = absl::Milliseconds(250);
  // The session store: its limit (--max-sessions), how often idle records
  // are swept, and the clock their idle TTLs are timed by (tests pass a fake
  // one and move it by hand).
  SessionStore::Options sessions;
};

class DecodeService final : public tandem::v1::Decode::CallbackService {
 public:
  // `loop` and `registry` must outlive the service.
  DecodeService(worker::EngineLoop& loop, prometheus::Registry& registry,
                const DecodeServiceOptions& options);

  grpc::ServerWriteReactor<tandem::v1::DecodeResponse>* Decode(
      grpc::CallbackServerContext* ctx, const tandem::v1::DecodeRequest* request) override;
  grpc::ServerUnaryReactor* GetWorkerStats(grpc::CallbackServerContext* ctx,
                                           const tandem::v1::WorkerStatsRequest* request,
                                           tandem::v1::WorkerStats* response) override;
  grpc::ServerUnaryReactor* PutSession(grpc::CallbackServerContext* ctx,
                                       const tandem::v1::PutSessionRequest* request,
                                       tandem::v1::PutSessionResponse* response) override;
  grpc::ServerUnaryReactor* GetSession(grpc::CallbackServerContext* ctx,
                                       const tandem::v1::SessionKey* request,
                                       tandem::v1::SessionRecord* response) override;
  grpc::ServerUnaryReactor* DropSession(grpc::CallbackServerContext* ctx,
                                        const tandem::v1::SessionKey* request,
                                        tandem::v1::DropSessionResponse* response) override;
  grpc::ServerUnaryReactor* ListSessions(grpc::CallbackServerContext* ctx,
                                         const tandem::v1::ListSessionRecordsRequest* request,
                                         tandem::v1::ListSessionRecordsResponse* response) override;

  const rpc::Admission& admission() const { return admission_; }

 private:
  class DecodeCall;
  absl::Status Validate(const tandem::v1::DecodeRequest& request) const;
  // Delta transfer: how many leading blocks of `tokens` (the positions the
  // lease holds) this worker holds and need not fetch (0 without
  // `held_blocks`). FailedPrecondition when the hand-off's block_hashes
  // differ from this worker's chain (another model or block size).
  absl::StatusOr<int32_t> BlocksHeld(const tandem::v1::DecodeRequest& request,
                                     std::span<const int32_t> tokens) const;
  void Count(const absl::Status& status);
  // Finishes a unary session call with `status`, counted under `method`.
  grpc::ServerUnaryReactor* Answer(grpc::CallbackServerContext* ctx, const char* method,
                                   const absl::Status& status);

  worker::EngineLoop& loop_;
  const DecodeServiceOptions options_;
  rpc::ChannelCache channels_;
  kvtransfer::ReleaseClient releases_;
  kvtransfer::KvFetcher fetcher_;
  kvtransfer::LeaseKeeper lease_keeper_;
  rpc::Admission admission_;
  SessionStore sessions_;  // lets go of a session's pinned KV through loop_

  prometheus::Family<prometheus::Counter>& requests_;
  prometheus::Counter& generated_tokens_;
  prometheus::Histogram& first_decode_seconds_;
};

}  // namespace tandem::decode

#endif  // TANDEM_DECODE_WORKER_DECODE_SERVICE_H_
