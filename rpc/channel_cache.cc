#include "rpc/channel_cache.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace tandem::rpc {

ChannelCache::ChannelCache(const ChannelCacheOptions& options)
    : options_(options),
      credentials_(options.tls.enabled() ? ChannelCredentials(options.tls.files)
                                         : grpc::InsecureChannelCredentials()) {}

std::vector<common::FlagSpec> PeerChannelFlagSpecs() {
  std::vector<common::FlagSpec> specs = {
      {.name = "max-peer-channels", .default_value = "256",
       .help = "gRPC channels to peers kept open (least recently used dropped first)"},
      {.name = "keepalive-ms", .default_value = "10000",
       .help = "ping peers this often; one that stops answering fails its calls (and they "
               "move elsewhere); 0 = off"},
      {.name = "keepalive-timeout-ms", .default_value = "5000",
       .help = "how long a ping may go unanswered"},
  };
  for (common::FlagSpec& s : InternalTlsFlagSpecs()) specs.push_back(std::move(s));
  return specs;
}

absl::StatusOr<ChannelCacheOptions> PeerChannelOptionsFromArgs(const common::Args& args) {
  ChannelCacheOptions options;
  ASSIGN_OR_RETURN(options.max_channels, args.IntInRange("max-peer-channels", 1, 1 << 20));
  ASSIGN_OR_RETURN(const int32_t every, args.IntInRange("keepalive-ms", 0, 24 * 3600 * 1000));
  ASSIGN_OR_RETURN(const int32_t timeout,
                   args.IntInRange("keepalive-timeout-ms", 1, 24 * 3600 * 1000));
  options.keepalive_time = absl::Milliseconds(every);
  options.keepalive_timeout = absl::Milliseconds(timeout);
  ASSIGN_OR_RETURN(options.tls, InternalTlsFromArgs(args));
  return options;
}

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
  const int min_reconnect_ms = static_cast<int>(absl::ToInt64Milliseconds(options_.min_reconnect));
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, min_reconnect_ms);
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, min_reconnect_ms);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS,
              static_cast<int>(absl::ToInt64Milliseconds(options_.max_reconnect)));
  if (options_.keepalive_time > absl::ZeroDuration()) {
    args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS,
                static_cast<int>(absl::ToInt64Milliseconds(options_.keepalive_time)));
    args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS,
                static_cast<int>(absl::ToInt64Milliseconds(options_.keepalive_timeout)));
    args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
    args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);  // a long stream may be quiet
  }
  if (!options_.tls.server_name.empty()) {
    args.SetSslTargetNameOverride(options_.tls.server_name);
  }
  auto channel = grpc::CreateCustomChannel(address, credentials_, args);
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
