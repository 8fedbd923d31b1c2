// The Prefill gRPC service (callback API): admits a prompt (bounded requests
// in flight and queued prompt tokens), computes its KV and first token on the
// engine thread (via EngineLoop), and holds the blocks under a lease in the
// KvLeaseServer until a decode worker fetches them; FetchKv and ReleaseKv are
// the lease server's. A request may name another prefill worker holding its
// prefix: the blocks are pulled from there (PrefixPuller) rather than
// computed; ExportPrefix is the holder's side. No thread waits on the
// engine: the engine thread's listener finishes each call. Thread-safe.
#ifndef TANDEM_PREFILL_WORKER_PREFILL_SERVICE_H_
#define TANDEM_PREFILL_WORKER_PREFILL_SERVICE_H_

#include <memory>

#include "kvtransfer/rpc/kv_fetcher.h"
#include "kvtransfer/rpc/lease_server.h"
#include "kvtransfer/rpc/release_client.h"
#include "prefill_worker/prefix_puller.h"
#include "prometheus/counter.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"
#include "rpc/admission.h"
#include "tandem/v1/worker.grpc.pb.h"
#include "worker/engine_loop.h"
#include "worker/kv_export.h"

namespace tandem::prefill {

struct PrefillServiceOptions {
  kvtransfer::LeaseTableOptions leases;
  rpc::AdmissionLimits admission;
  // Pulling prefixes from other prefill workers (PrefillRequest.prefix_holder).
  rpc::ChannelCacheOptions channels;
  int32_t kv_transfer_streams = 2;
  absl::Duration pull_timeout = absl::Seconds(2);
};

// FetchKv is served raw (ByteBuffer): the lease server assembles each
// message from slices of the leased snapshot instead of copying it.
class PrefillService final
    : public tandem::v1::Prefill::WithRawCallbackMethod_FetchKv<
          tandem::v1::Prefill::CallbackService> {
 public:
  // `loop` and `registry` must outlive the service.
  PrefillService(worker::EngineLoop& loop, prometheus::Registry& registry,
                 const PrefillServiceOptions& options);

  grpc::ServerUnaryReactor* Prefill(grpc::CallbackServerContext* ctx,
                                    const tandem::v1::PrefillRequest* request,
                                    tandem::v1::PrefillResponse* response) override;
  grpc::ServerWriteReactor<grpc::ByteBuffer>* FetchKv(grpc::CallbackServerContext* ctx,
                                                      const grpc::ByteBuffer* request) override;
  grpc::ServerUnaryReactor* ReleaseKv(grpc::CallbackServerContext* ctx,
                                      const tandem::v1::ReleaseKvRequest* request,
                                      tandem::v1::ReleaseKvResponse* response) override;
  grpc::ServerUnaryReactor* RenewKv(grpc::CallbackServerContext* ctx,
                                    const tandem::v1::RenewKvRequest* request,
                                    tandem::v1::RenewKvResponse* response) override;
  grpc::ServerUnaryReactor* GetWorkerStats(grpc::CallbackServerContext* ctx,
                                           const tandem::v1::WorkerStatsRequest* request,
                                           tandem::v1::WorkerStats* response) override;
  grpc::ServerUnaryReactor* ExportPrefix(grpc::CallbackServerContext* ctx,
                                         const tandem::v1::ExportPrefixRequest* request,
                                         tandem::v1::ExportPrefixResponse* response) override;

  const kvtransfer::KvLeaseServer& leases() const { return export_.leases(); }
  const rpc::Admission& admission() const { return admission_; }

 private:
  class PrefillCall;
  void Count(const char* method, const absl::Status& status);

  worker::EngineLoop& loop_;
  const PrefillServiceOptions options_;
  worker::KvExporter export_;  // the lease server, FetchKv ... ExportPrefix
  rpc::Admission admission_;
  rpc::ChannelCache channels_;
  kvtransfer::ReleaseClient releases_;
  kvtransfer::KvFetcher fetcher_;
  PrefixPuller puller_;

  prometheus::Family<prometheus::Counter>& requests_;
  prometheus::Counter& prompt_tokens_;
  prometheus::Histogram& queue_seconds_;
  prometheus::Histogram& prefill_seconds_;
};

}  // namespace tandem::prefill

#endif  // TANDEM_PREFILL_WORKER_PREFILL_SERVICE_H_
