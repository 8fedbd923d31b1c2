// One gRPC channel per peer address, created on first use and shared by all
// requests (channels multiplex calls). Thread-safe.
#ifndef TANDEM_RPC_CHANNEL_CACHE_H_
#define TANDEM_RPC_CHANNEL_CACHE_H_

#include <memory>
#include <string>

#include <grpcpp/grpcpp.h>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"

namespace tandem::rpc {

class ChannelCache {
 public:
  explicit ChannelCache(int max_message_bytes = 64 << 20)
      : max_message_bytes_(max_message_bytes) {}

  std::shared_ptr<grpc::Channel> Get(const std::string& address);

 private:
  const int max_message_bytes_;
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<grpc::Channel>> channels_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace tandem::rpc

#endif  // TANDEM_RPC_CHANNEL_CACHE_H_
