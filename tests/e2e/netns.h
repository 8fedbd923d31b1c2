// A worker behind its own network: a network namespace joined to the host by
// a veth pair on a /30 of 10.213.0.0/16 no other test network holds (host
// .1, worker .2), and the faults a fleet's network has, made with nftables
// inside the namespace and iproute2: every
// packet dropped both ways (a blackhole), one way only, or the link down;
// then healed. Needs root (CAP_NET_ADMIN), `ip` and `nft`; Create says why
// not where they are missing, and tests skip with that message.
#ifndef TANDEM_TESTS_E2E_NETNS_H_
#define TANDEM_TESTS_E2E_NETNS_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace tandem::testing {

class WorkerNetwork {
 public:
  enum class Fault {
    kBlackhole,      // every packet to and from the worker dropped
    kLinkDown,       // the veth pair down
    kDropToWorker,   // packets to the worker dropped (one way)
    kDropFromWorker  // packets from the worker dropped (one way)
  };

  // A new namespace on a subnet no other network on the host uses.
  // FailedPrecondition with the reason when namespaces or nftables cannot
  // be used here.
  static absl::StatusOr<std::unique_ptr<WorkerNetwork>> Create();
  ~WorkerNetwork();  // the namespace and the veth pair are removed

  const std::string& host_ip() const { return host_ip_; }
  const std::string& worker_ip() const { return worker_ip_; }
  // `argv` run inside the namespace.
  std::vector<std::string> Wrap(const std::vector<std::string>& argv) const;

  absl::Status Inject(Fault fault);
  // Cuts the worker off from one service on the host only (every packet
  // between the worker and host_ip():port dropped, both ways) while the
  // rest of its traffic flows: the partial partition a fleet's network has
  // when one path fails.
  absl::Status CutFromHostPort(int port);
  // Heals every fault and cut.
  absl::Status Heal();
  // Whether a fresh TCP connection from the host to `worker_ip():port`
  // completes within `timeout` (attempts that fail early are retried until
  // then): how a test proves a fault took effect (or healed).
  bool Connects(int port, absl::Duration timeout) const;
  // Whether a fresh TCP connection from the worker to `host_ip():port`
  // completes within `timeout` (proves a CutFromHostPort).
  bool ConnectsFromWorker(int port, absl::Duration timeout) const;

 private:
  WorkerNetwork() = default;
  std::string ns_;
  std::string host_if_;
  std::string worker_if_;
  std::string host_ip_;
  std::string worker_ip_;
};

const char* FaultName(WorkerNetwork::Fault fault);

}  // namespace tandem::testing

#endif  // TANDEM_TESTS_E2E_NETNS_H_
