// One gRPC channel per peer address, created on first use and shared by all
// requests (channels multiplex calls). Bounded: past `max_channels` the least
// recently used address is dropped (calls that hold its channel keep it
// alive), so addresses taken from requests cannot grow it without limit.
// Thread-safe.
#ifndef TANDEM_RPC_CHANNEL_CACHE_H_
#define TANDEM_RPC_CHANNEL_CACHE_H_

#include <list>
#include <memory>
#include <string>

#include <grpcpp/grpcpp.h>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/flags.h"
#include "rpc/tls.h"

namespace tandem::rpc {

struct ChannelCacheOptions {
  int max_message_bytes = 64 << 20;  // both directions
  int max_channels = 256;            // >= 1
  // HTTP/2 keepalive pings: a peer that stops answering (a stopped process,
  // a lost host) fails its calls UNAVAILABLE within time + timeout instead
  // of hanging them. 0 disables.
  absl::Duration keepalive_time = absl::Seconds(10);
  absl::Duration keepalive_timeout = absl::Seconds(5);
  // Reconnect backoff after a failed connection (gRPC's default grows to
  // 120 s): a restarted worker is found again within max_reconnect.
  absl::Duration min_reconnect = absl::Milliseconds(100);
  absl::Duration max_reconnect = absl::Seconds(1);
  // Mutual TLS to peers (rpc/tls.h); plaintext when not enabled.
  InternalTls tls = {};
};

// --max-peer-channels, --keepalive-ms, --keepalive-timeout-ms and the
// internal TLS flags (rpc/tls.h): every process that calls peers has them.
std::vector<common::FlagSpec> PeerChannelFlagSpecs();
// The options those flags say; InvalidArgument naming the flag.
absl::StatusOr<ChannelCacheOptions> PeerChannelOptionsFromArgs(const common::Args& args);

class ChannelCache {
 public:
  explicit ChannelCache(const ChannelCacheOptions& options = {});

  // The channel to `address`. Distinct `connection` numbers get channels on
  // distinct TCP connections (to spread one large transfer over several).
  std::shared_ptr<grpc::Channel> Get(const std::string& address, int connection = 0);
  int size() const;

 private:
  struct Entry {
    std::shared_ptr<grpc::Channel> channel;
    std::list<std::string>::iterator lru;  // position in lru_
  };

  const ChannelCacheOptions options_;
  const std::shared_ptr<grpc::ChannelCredentials> credentials_;
  mutable absl::Mutex mu_;
  // Keyed by address and connection number.
  absl::flat_hash_map<std::string, Entry> channels_ ABSL_GUARDED_BY(mu_);
  // Most recently used first.
  std::list<std::string> lru_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tandem::rpc

#endif  // TANDEM_RPC_CHANNEL_CACHE_H_
