// What a worker serves so that others can take KV blocks from it: its KV
// lease server (FetchKv, ReleaseKv, RenewKv) and ExportPrefix, which holds a
// copy of the leading blocks of a prompt its prefix cache has under a lease
// for a peer to fetch. Prefill workers serve it inside their Prefill
// service (a prefill's hand-off is a lease too); decode workers serve it as
// KvExportService, so a prefill worker computing a session's next turn can
// pull the session's blocks from the decode worker that keeps them. No
// thread waits on the engine. Thread-safe.
#ifndef TANDEM_WORKER_KV_EXPORT_H_
#define TANDEM_WORKER_KV_EXPORT_H_

#include <functional>

#include <grpcpp/grpcpp.h>

#include "absl/status/status.h"
#include "common/flags.h"
#include "kvtransfer/rpc/lease_server.h"
#include "prometheus/registry.h"
#include "tandem/v1/worker.grpc.pb.h"
#include "worker/engine_loop.h"

namespace tandem::worker {

// --lease-ttl-ms, --max-leases, --max-lease-mb.
std::vector<common::FlagSpec> LeaseFlagSpecs();
absl::StatusOr<kvtransfer::LeaseTableOptions> LeaseOptionsFromArgs(const common::Args& args);

class KvExporter {
 public:
  // Counts a finished call by method and status.
  using Count = std::function<void(const char* method, const absl::Status& status)>;
  // `loop` and `registry` must outlive the exporter.
  KvExporter(EngineLoop& loop, const kvtransfer::LeaseTableOptions& leases,
             prometheus::Registry& registry, Count count);

  grpc::ServerWriteReactor<grpc::ByteBuffer>* FetchKv(grpc::CallbackServerContext* ctx,
                                                      const grpc::ByteBuffer* request);
  grpc::ServerUnaryReactor* ReleaseKv(grpc::CallbackServerContext* ctx,
                                      const tandem::v1::ReleaseKvRequest* request);
  grpc::ServerUnaryReactor* RenewKv(grpc::CallbackServerContext* ctx,
                                    const tandem::v1::RenewKvRequest* request,
                                    tandem::v1::RenewKvResponse* response);
  // NOT_FOUND when the prefix cache holds none of the prompt's blocks.
  grpc::ServerUnaryReactor* ExportPrefix(grpc::CallbackServerContext* ctx,
                                         const tandem::v1::ExportPrefixRequest* request,
                                         tandem::v1::ExportPrefixResponse* response);

  kvtransfer::KvLeaseServer& leases() { return leases_; }
  const kvtransfer::KvLeaseServer& leases() const { return leases_; }

 private:
  EngineLoop& loop_;
  kvtransfer::KvLeaseServer leases_;
  const Count count_;
};

// A decode worker's side of prefix pulls: the Prefill service's FetchKv,
// ReleaseKv, RenewKv and ExportPrefix (its Prefill method is not served).
class KvExportService final
    : public tandem::v1::Prefill::WithRawCallbackMethod_FetchKv<
          tandem::v1::Prefill::CallbackService> {
 public:
  explicit KvExportService(KvExporter& exporter) : exporter_(exporter) {}

  grpc::ServerWriteReactor<grpc::ByteBuffer>* FetchKv(grpc::CallbackServerContext* ctx,
                                                      const grpc::ByteBuffer* request) override {
    return exporter_.FetchKv(ctx, request);
  }
  grpc::ServerUnaryReactor* ReleaseKv(grpc::CallbackServerContext* ctx,
                                      const tandem::v1::ReleaseKvRequest* request,
                                      tandem::v1::ReleaseKvResponse*) override {
    return exporter_.ReleaseKv(ctx, request);
  }
  grpc::ServerUnaryReactor* RenewKv(grpc::CallbackServerContext* ctx,
                                    const tandem::v1::RenewKvRequest* request,
                                    tandem::v1::RenewKvResponse* response) override {
    return exporter_.RenewKv(ctx, request, response);
  }
  grpc::ServerUnaryReactor* ExportPrefix(grpc::CallbackServerContext* ctx,
                                         const tandem::v1::ExportPrefixRequest* request,
                                         tandem::v1::ExportPrefixResponse* response) override {
    return exporter_.ExportPrefix(ctx, request, response);
  }

 private:
  KvExporter& exporter_;
};

}  // namespace tandem::worker

#endif  // TANDEM_WORKER_KV_EXPORT_H_
