#include "rpc/channel_cache.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace tandem::rpc {

ChannelCache::ChannelCache(const ChannelCacheOptions& options) : options_(options) {}

std::shared_ptr<grpc::Channel> ChannelCache::Get(const std::string& address, int connection) {
  const std::string key = connection == 0 ? address : absl::StrCat(address, "#", connection);
  absl::MutexLock lock(&mu_);
  if (auto it = channels_.find(key); it != channels_.end()) {
    lru_.splice(lru_.begin(), lru_, it->second.lru);
    return it->second.channel;
  }
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(options_.max_message_bytes);
  args.SetMaxSendMessageSize(options_.max_message_bytes);
  // gRPC shares a connection between channels whose arguments are equal;
  // this one keeps each numbered connection to itself.
  if (connection != 0) args.SetInt("tandem.connection", connection);
  auto channel = grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
  lru_.push_front(key);
  channels_[key] = Entry{.channel = channel, .lru = lru_.begin()};
  while (static_cast<int>(channels_.size()) > std::max(options_.max_channels, 1)) {
    channels_.erase(lru_.back());
    lru_.pop_back();
  }
  return channel;
}

int ChannelCache::size() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(channels_.size());
}

}  // namespace tandem::rpc
