#include "kvtransfer/rpc/lease_keeper.h"

#include <memory>
#include <vector>

#include "tandem/v1/worker.grpc.pb.h"

namespace tandem::kvtransfer {

struct LeaseKeeper::Call {
  std::unique_ptr<tandem::v1::Prefill::Stub> stub;
  grpc::ClientContext ctx;
  tandem::v1::RenewKvRequest request;
  tandem::v1::RenewKvResponse response;
};

common::FlagSpec LeaseHeartbeatFlagSpec() {
  return {.name = "lease-heartbeat-ms", .default_value = "5000",
          .help = "while a KV hand-off waits, renew its lease on the prefill worker this often "
                  "(keep it well under the prefill workers' --lease-ttl-ms); 0 = off"};
}

LeaseKeeper::LeaseKeeper(rpc::ChannelCache& channels, absl::Duration period)
    : channels_(channels), period_(period) {
  if (period_ > absl::ZeroDuration()) thread_ = std::thread([this] { Run(); });
}

LeaseKeeper::~LeaseKeeper() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  if (thread_.joinable()) thread_.join();
  absl::MutexLock lock(&mu_);
  auto idle = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return in_flight_ == 0; };
  mu_.Await(absl::Condition(&idle));
}

LeaseKeeper::Handle LeaseKeeper::Keep(const std::string& address, const std::string& lease_id) {
  if (period_ <= absl::ZeroDuration()) return Handle();
  absl::MutexLock lock(&mu_);
  const int64_t id = next_id_++;
  leases_[id] = Lease{.address = address, .lease_id = lease_id};
  return Handle([this, id] { Drop(id); });
}

void LeaseKeeper::Drop(int64_t id) {
  absl::MutexLock lock(&mu_);
  leases_.erase(id);
}

void LeaseKeeper::Run() {
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      mu_.AwaitWithTimeout(absl::Condition(&stop_), period_);
      if (stop_) return;
    }
    Beat();
  }
}

void LeaseKeeper::Beat() {
  absl::flat_hash_map<std::string, std::vector<std::string>> by_holder;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [id, lease] : leases_) by_holder[lease.address].push_back(lease.lease_id);
    in_flight_ += static_cast<int32_t>(by_holder.size());
  }
  for (auto& [address, ids] : by_holder) {
    auto* call = new Call;
    call->stub = tandem::v1::Prefill::NewStub(channels_.Get(address));
    // A beat that cannot be delivered within a period is late anyway.
    call->ctx.set_deadline(absl::ToChronoTime(absl::Now() + period_));
    for (std::string& id : ids) call->request.add_lease_ids(std::move(id));
    const int32_t named = call->request.lease_ids_size();
    call->stub->async()->RenewKv(&call->ctx, &call->request, &call->response,
                                 [this, call, named](grpc::Status s) {
                                   // A failed beat is not a lost lease: the
                                   // next may arrive, and the fetch itself
                                   // finds out.
                                   Answered(call, s.ok() ? named : 0,
                                            s.ok() ? call->response.unknown_lease_ids_size() : 0);
                                 });
  }
}

void LeaseKeeper::Answered(Call* call, int32_t named, int32_t unknown) {
  delete call;
  absl::MutexLock lock(&mu_);
  renewed_ += named;
  unknown_ += unknown;
  --in_flight_;
}

int32_t LeaseKeeper::kept() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int32_t>(leases_.size());
}

int64_t LeaseKeeper::renewed() const {
  absl::MutexLock lock(&mu_);
  return renewed_;
}

int64_t LeaseKeeper::unknown() const {
  absl::MutexLock lock(&mu_);
  return unknown_;
}

bool LeaseKeeper::AwaitRenewed(int64_t n, absl::Duration timeout) const {
  absl::MutexLock lock(&mu_);
  auto enough = [this, n]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return renewed_ >= n; };
  return mu_.AwaitWithTimeout(absl::Condition(&enough), timeout);
}

}  // namespace tandem::kvtransfer
