// The Prefill gRPC service: computes a prompt's KV and first token on the
// engine thread (via EngineLoop), encodes the blocks and holds them under a
// lease until a decode worker fetches and releases them. Handlers run on
// gRPC's sync-server threads and never touch the engine. Thread-safe.
#ifndef TANDEM_PREFILL_WORKER_PREFILL_SERVICE_H_
#define TANDEM_PREFILL_WORKER_PREFILL_SERVICE_H_

#include <memory>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "prefill_worker/lease_table.h"
#include "prometheus/counter.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"
#include "worker/engine_loop.h"
#include "tandem/v1/worker.grpc.pb.h"

namespace tandem::prefill {

struct PrefillServiceOptions {
  absl::Duration lease_ttl = absl::Seconds(30);
  int32_t max_leases = 4096;
  // How often a handler waiting on the engine looks for client cancellation.
  absl::Duration cancel_poll = absl::Milliseconds(20);
};

class PrefillService final : public tandem::v1::Prefill::Service {
 public:
  // `loop` and `registry` must outlive the service.
  PrefillService(worker::EngineLoop& loop, prometheus::Registry& registry,
                 const PrefillServiceOptions& options);
  ~PrefillService() override;

  grpc::Status Prefill(grpc::ServerContext* ctx, const tandem::v1::PrefillRequest* request,
                       tandem::v1::PrefillResponse* response) override;
  grpc::Status FetchKv(grpc::ServerContext* ctx, const tandem::v1::FetchKvRequest* request,
                       grpc::ServerWriter<tandem::v1::KvBlockMessage>* writer) override;
  grpc::Status ReleaseKv(grpc::ServerContext* ctx, const tandem::v1::ReleaseKvRequest* request,
                         tandem::v1::ReleaseKvResponse* response) override;
  grpc::Status GetWorkerStats(grpc::ServerContext* ctx,
                              const tandem::v1::WorkerStatsRequest* request,
                              tandem::v1::WorkerStats* response) override;

 private:
  absl::Status RunPrefill(grpc::ServerContext* ctx, const tandem::v1::PrefillRequest& request,
                          tandem::v1::PrefillResponse* response);
  void ReapLeases();
  void UpdateLeaseGauges();

  worker::EngineLoop& loop_;
  const PrefillServiceOptions options_;
  LeaseTable leases_;

  prometheus::Family<prometheus::Counter>& requests_;
  prometheus::Counter& prompt_tokens_;
  prometheus::Counter& blocks_sent_;
  prometheus::Counter& bytes_sent_;
  prometheus::Counter& leases_expired_;
  prometheus::Counter& transfer_failures_;
  prometheus::Histogram& queue_seconds_;
  prometheus::Histogram& prefill_seconds_;
  prometheus::Histogram& transfer_seconds_;
  prometheus::Gauge& leases_held_;
  prometheus::Gauge& blocks_leased_;

  absl::Notification stop_;
  std::thread reaper_;
};

}  // namespace tandem::prefill

#endif  // TANDEM_PREFILL_WORKER_PREFILL_SERVICE_H_
