// The Decode gRPC service: pulls a request's KV blocks from the prefill
// worker that holds them (checksums and model verified), releases the lease,
// admits the sequence into the engine's continuous batch (via EngineLoop) and
// streams its tokens. Handlers run on gRPC's sync-server threads and never
// touch the engine. Thread-safe.
#ifndef TANDEM_DECODE_WORKER_DECODE_SERVICE_H_
#define TANDEM_DECODE_WORKER_DECODE_SERVICE_H_

#include <memory>

#include "absl/status/statusor.h"
#include "engine/kv_snapshot.h"
#include "prometheus/counter.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"
#include "rpc/channel_cache.h"
#include "worker/engine_loop.h"
#include "tandem/v1/worker.grpc.pb.h"

namespace tandem::decode {

struct DecodeServiceOptions {
  // Upper bound on one KV fetch from a prefill worker.
  absl::Duration fetch_timeout = absl::Seconds(60);
  // How often a handler waiting on the engine looks for client cancellation.
  absl::Duration cancel_poll = absl::Milliseconds(20);
};

class DecodeService final : public tandem::v1::Decode::Service {
 public:
  // `loop` and `registry` must outlive the service.
  DecodeService(worker::EngineLoop& loop, prometheus::Registry& registry,
                const DecodeServiceOptions& options);

  grpc::Status Decode(grpc::ServerContext* ctx, const tandem::v1::DecodeRequest* request,
                      grpc::ServerWriter<tandem::v1::DecodeResponse>* writer) override;
  grpc::Status GetWorkerStats(grpc::ServerContext* ctx,
                              const tandem::v1::WorkerStatsRequest* request,
                              tandem::v1::WorkerStats* response) override;

 private:
  absl::Status Validate(const tandem::v1::DecodeRequest& request) const;
  // Streams the lease's blocks and decodes them into a snapshot; tells the
  // prefill worker at once whether that worked (ReleaseKv).
  absl::StatusOr<std::shared_ptr<const engine::KvSnapshot>> FetchKv(
      grpc::ServerContext* ctx, const tandem::v1::DecodeRequest& request);
  void ReleaseLease(const tandem::v1::DecodeRequest& request, const absl::Status& outcome);
  absl::Status Stream(grpc::ServerContext* ctx, const tandem::v1::DecodeRequest& request,
                      std::shared_ptr<const engine::KvSnapshot> kv, absl::Time start,
                      absl::Duration transfer, grpc::ServerWriter<tandem::v1::DecodeResponse>* writer);

  worker::EngineLoop& loop_;
  const DecodeServiceOptions options_;
  rpc::ChannelCache channels_;

  prometheus::Family<prometheus::Counter>& requests_;
  prometheus::Counter& generated_tokens_;
  prometheus::Counter& blocks_received_;
  prometheus::Counter& bytes_received_;
  prometheus::Counter& transfer_failures_;
  prometheus::Histogram& transfer_seconds_;
  prometheus::Histogram& first_decode_seconds_;
};

}  // namespace tandem::decode

#endif  // TANDEM_DECODE_WORKER_DECODE_SERVICE_H_
