#include "kvtransfer/rpc/release_client.h"

#include <iostream>
#include <memory>

#include "tandem/v1/worker.grpc.pb.h"

namespace tandem::kvtransfer {

struct ReleaseClient::Call {
  std::string address;
  std::unique_ptr<tandem::v1::Prefill::Stub> stub;
  grpc::ClientContext ctx;
  tandem::v1::ReleaseKvRequest request;
  tandem::v1::ReleaseKvResponse response;
};

ReleaseClient::ReleaseClient(rpc::ChannelCache& channels, std::string who,
                             absl::Duration timeout)
    : channels_(channels), who_(std::move(who)), timeout_(timeout) {}

ReleaseClient::~ReleaseClient() { AwaitIdle(); }

void ReleaseClient::AwaitIdle() const {
  absl::MutexLock lock(&mu_);
  auto idle = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return in_flight_ == 0; };
  mu_.Await(absl::Condition(&idle));
}

void ReleaseClient::Release(const std::string& address, const std::string& lease_id,
                            const absl::Status& outcome) {
  auto* call = new Call;
  call->address = address;
  call->stub = tandem::v1::Prefill::NewStub(channels_.Get(address));
  // Not the request's context: a release must go out even after a cancel.
  call->ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout_));
  call->request.set_lease_id(lease_id);
  call->request.set_ok(outcome.ok());
  call->request.set_cancelled(absl::IsCancelled(outcome));
  call->request.set_error(std::string(outcome.message()));
  {
    absl::MutexLock lock(&mu_);
    ++in_flight_;
  }
  call->stub->async()->ReleaseKv(&call->ctx, &call->request, &call->response,
                                 [this, call](grpc::Status s) {
                                   Done(call, s.ok() ? "" : s.error_message());
                                 });
}

void ReleaseClient::Done(Call* call, const std::string& error) {
  if (!error.empty()) {
    std::cerr << who_ << ": ReleaseKv to " << call->address << " failed: " << error
              << " (the lease's TTL frees the blocks)\n";
  }
  delete call;
  absl::MutexLock lock(&mu_);
  --in_flight_;
}

int ReleaseClient::in_flight() const {
  absl::MutexLock lock(&mu_);
  return in_flight_;
}

}  // namespace tandem::kvtransfer
