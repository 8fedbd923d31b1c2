// Worker targets as flags name them, expanded to the addresses the gateway
// picks from and subscribes to. "host:port" stays as written (gRPC resolves
// it per connection: one worker). "dns:///host:port" (gRPC's syntax) is
// looked up and becomes one "ip:port" per address the name has, e.g. one per
// ready pod of a Kubernetes headless Service; the WorkerResolver looks it up
// again every interval so workers that come and go are followed. Thread-safe.
#ifndef TANDEM_GATEWAY_ROUTING_WORKER_RESOLVER_H_
#define TANDEM_GATEWAY_ROUTING_WORKER_RESOLVER_H_

#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"

namespace tandem::gateway {

// The addresses (IP literals, no port) a host name has.
using HostLookup = std::function<absl::StatusOr<std::vector<std::string>>(const std::string& host)>;

// getaddrinfo, any address family. NotFound naming the host when it has none.
absl::StatusOr<std::vector<std::string>> LookupHost(const std::string& host);

// InvalidArgument naming `flag` for a target that is neither "host:port"
// nor "dns:///host:port".
absl::Status ValidateTargets(const std::vector<std::string>& targets, const std::string& flag);

// Every target's addresses, in target order, each address once; a DNS
// name's addresses sorted. A failed lookup fails the whole expansion.
absl::StatusOr<std::vector<std::string>> ExpandTargets(const std::vector<std::string>& targets,
                                                       const HostLookup& lookup);

class WorkerResolver {
 public:
  using OnChange = std::function<void(const std::vector<std::string>& addresses)>;
  // Expands `targets` now and then every `interval` on a thread of its own
  // while any target is a DNS name, calling `on_change` (on that thread)
  // with the new addresses whenever they differ from the last. A failed
  // lookup keeps the last addresses (logged as a warning).
  WorkerResolver(std::vector<std::string> targets, absl::Duration interval, OnChange on_change,
                 HostLookup lookup = LookupHost);
  // Stops the thread.
  ~WorkerResolver();

  // The addresses as of the last successful expansion (empty if none yet).
  std::vector<std::string> addresses() const;

 private:
  void Refresh();

  const std::vector<std::string> targets_;
  const absl::Duration interval_;
  const OnChange on_change_;
  const HostLookup lookup_;
  const bool has_dns_;  // any target is a DNS name: looked up again
  absl::Notification stop_;
  mutable absl::Mutex mu_;
  std::vector<std::string> addresses_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

}  // namespace tandem::gateway

#endif  // TANDEM_GATEWAY_ROUTING_WORKER_RESOLVER_H_
