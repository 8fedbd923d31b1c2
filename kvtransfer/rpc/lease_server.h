// The serving side of KV transfers over the gRPC stream transport. Holds a
// finished prefill's blocks under a lease (LeaseTable: TTL, count and byte
// budgets), streams them to the peer that fetches them (one block written at
// a time, its payload sent from where it lies; a fetch may be striped over
// several streams), and ends the lease when the fetch completes, breaks
// off, is released by the peer, or lapses. The
// Prefill service delegates FetchKv and ReleaseKv here. Thread-safe.
#ifndef TANDEM_KVTRANSFER_RPC_LEASE_SERVER_H_
#define TANDEM_KVTRANSFER_RPC_LEASE_SERVER_H_

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/status/statusor.h"
#include "absl/synchronization/notification.h"
#include "engine/kv/block_hash.h"
#include "engine/kv/kv_snapshot.h"
#include "kvtransfer/rpc/lease_table.h"
#include "prometheus/counter.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"
#include "tandem/v1/worker.pb.h"

namespace tandem::kvtransfer {

class KvLeaseServer {
 public:
  // `registry` must outlive the server.
  KvLeaseServer(const LeaseTableOptions& options, prometheus::Registry& registry);
  // Stops the TTL reaper. Fetches still streaming must be over (the gRPC
  // server is shut down first).
  ~KvLeaseServer();

  struct Held {
    std::string lease_id;
    int32_t num_blocks = 0;
    int64_t bytes = 0;  // on the wire
    // The hashes of the full blocks, in order (what a hand-off names).
    std::vector<engine::BlockHash> full_block_hashes;
  };
  // Holds `kv` (the positions of `token_ids`, hashed with `cache_salt`)
  // under a new lease. ResourceExhausted when the lease budgets are full.
  absl::StatusOr<Held> Hold(std::shared_ptr<const engine::KvSnapshot> kv,
                            std::vector<int32_t> token_ids, uint64_t cache_salt);

  // The FetchKv reactor, on the raw (ByteBuffer) form of the method so the
  // payload goes out without being copied (the Prefill service marks
  // FetchKv raw; clients see ordinary KvBlockMessages): NOT_FOUND for an
  // unknown lease, INVALID_ARGUMENT for a bad stripe, else the request's
  // stripe of the blocks in order, then OK. A broken-off fetch ends the
  // lease; a completed one does once all its stripes have completed.
  grpc::ServerWriteReactor<grpc::ByteBuffer>* Fetch(grpc::CallbackServerContext* ctx,
                                                    const grpc::ByteBuffer* request);
  // Ends a lease at the peer's word; a reported failure is counted and logged.
  void Release(const tandem::v1::ReleaseKvRequest& request);
  // A hand-off's heartbeat: renews each named lease's TTL and names those
  // that are gone. InvalidArgument when more than kMaxRenewIds are named.
  static constexpr int kMaxRenewIds = 1 << 16;
  absl::Status Renew(const tandem::v1::RenewKvRequest& request,
                     tandem::v1::RenewKvResponse* response);

  LeaseStats stats() const { return leases_.stats(); }
  const LeaseTable& table() const { return leases_; }

 private:
  class FetchReactor;

  void UpdateGauges();
  void ReapExpired();

  LeaseTable leases_;
  prometheus::Counter& blocks_sent_;
  prometheus::Counter& bytes_sent_;
  prometheus::Counter& leases_expired_;
  prometheus::Counter& lease_renewals_;
  prometheus::Counter& transfer_failures_;
  prometheus::Histogram& transfer_seconds_;
  prometheus::Gauge& leases_held_;
  prometheus::Gauge& blocks_leased_;
  prometheus::Gauge& bytes_leased_;

  absl::Notification stop_;
  std::thread reaper_;
};

}  // namespace tandem::kvtransfer

#endif  // TANDEM_KVTRANSFER_RPC_LEASE_SERVER_H_
