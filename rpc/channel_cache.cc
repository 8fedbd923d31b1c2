#include "rpc/channel_cache.h"

#include <algorithm>

namespace tandem::rpc {

ChannelCache::ChannelCache(const ChannelCacheOptions& options) : options_(options) {}

std::shared_ptr<grpc::Channel> ChannelCache::Get(const std::string& address) {
  absl::MutexLock lock(&mu_);
  if (auto it = channels_.find(address); it != channels_.end()) {
    lru_.splice(lru_.begin(), lru_, it->second.lru);
    return it->second.channel;
  }
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(options_.max_message_bytes);
  args.SetMaxSendMessageSize(options_.max_message_bytes);
  auto channel = grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
  lru_.push_front(address);
  channels_[address] = Entry{.channel = channel, .lru = lru_.begin()};
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
