#include "worker/kv_export.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "rpc/status.h"

namespace tandem::worker {

std::vector<common::FlagSpec> LeaseFlagSpecs() {
  return {
      {.name = "lease-ttl-ms", .default_value = "30000",
       .help = "how long unclaimed KV blocks are held for the worker that fetches them"},
      {.name = "max-leases", .default_value = "4096",
       .help = "KV leases held at once before more are refused (RESOURCE_EXHAUSTED)"},
      {.name = "max-lease-mb", .default_value = "1024",
       .help = "KV bytes held under leases before more are refused (RESOURCE_EXHAUSTED)"},
  };
}

absl::StatusOr<kvtransfer::LeaseTableOptions> LeaseOptionsFromArgs(const common::Args& args) {
  ASSIGN_OR_RETURN(int32_t ttl_ms, args.IntInRange("lease-ttl-ms", 1, 24 * 3600 * 1000));
  ASSIGN_OR_RETURN(int32_t max_leases, args.IntInRange("max-leases", 1, 1 << 30));
  ASSIGN_OR_RETURN(int32_t max_mb, args.IntInRange("max-lease-mb", 1, 1 << 24));
  return kvtransfer::LeaseTableOptions{.ttl = absl::Milliseconds(ttl_ms),
                                       .max_leases = max_leases,
                                       .max_bytes = int64_t{max_mb} << 20};
}

KvExporter::KvExporter(EngineLoop& loop, const kvtransfer::LeaseTableOptions& leases,
                       prometheus::Registry& registry, Count count)
    : loop_(loop), leases_(leases, registry), count_(std::move(count)) {}

grpc::ServerWriteReactor<grpc::ByteBuffer>* KvExporter::FetchKv(
    grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request) {
  return leases_.Fetch(ctx, request);
}

grpc::ServerUnaryReactor* KvExporter::ReleaseKv(grpc::CallbackServerContext* ctx,
                                                const tandem::v1::ReleaseKvRequest* request) {
  leases_.Release(*request);
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerUnaryReactor* KvExporter::RenewKv(grpc::CallbackServerContext* ctx,
                                              const tandem::v1::RenewKvRequest* request,
                                              tandem::v1::RenewKvResponse* response) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  reactor->Finish(rpc::ToGrpcStatus(leases_.Renew(*request, response)));
  return reactor;
}

grpc::ServerUnaryReactor* KvExporter::ExportPrefix(grpc::CallbackServerContext* ctx,
                                                   const tandem::v1::ExportPrefixRequest* request,
                                                   tandem::v1::ExportPrefixResponse* response) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  if (request->prompt_token_ids_size() < loop_.kv_block_size()) {
    const absl::Status s = absl::InvalidArgumentError(
        absl::StrCat("prompt_token_ids: ", request->prompt_token_ids_size(),
                     " tokens hold no full block of ", loop_.kv_block_size()));
    count_("ExportPrefix", s);
    reactor->Finish(rpc::ToGrpcStatus(s));
    return reactor;
  }
  std::vector<int32_t> tokens(request->prompt_token_ids().begin(),
                              request->prompt_token_ids().end());
  // The copy is made between two engine steps; the lease is taken on the
  // engine thread, and the call finished from there.
  const uint64_t salt = request->cache_salt();
  loop_.ExportPrefix(tokens, salt, [this, reactor, response, tokens,
                                    salt](std::shared_ptr<const engine::KvSnapshot> kv) {
    absl::Status s;
    if (kv == nullptr) {
      s = absl::NotFoundError("this worker holds none of the prefix's blocks");
    } else {
      absl::StatusOr<kvtransfer::KvLeaseServer::Held> held = leases_.Hold(
          kv, std::vector<int32_t>(tokens.begin(), tokens.begin() + kv->n_tokens), salt);
      if (held.ok()) {
        response->set_lease_id(held->lease_id);
        response->set_num_blocks(held->num_blocks);
      } else {
        s = held.status();
      }
    }
    count_("ExportPrefix", s);
    reactor->Finish(rpc::ToGrpcStatus(s));
  });
  return reactor;
}

}  // namespace tandem::worker
