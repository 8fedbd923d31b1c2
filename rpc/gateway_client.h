// How Tandem's own clients (tandem chat, tandem-load) reach a gateway that
// requires TLS or API keys: --tls-ca (trust this CA: TLS; empty: plaintext),
// --tls-server-name (the name its certificate holds, when the address does
// not say it) and --api-key (sent as "authorization: Bearer KEY"; default:
// the TANDEM_API_KEY environment variable, so the key stays out of `ps`).
#ifndef TANDEM_RPC_GATEWAY_CLIENT_H_
#define TANDEM_RPC_GATEWAY_CLIENT_H_

#include <memory>
#include <string>
#include <vector>

#include <grpcpp/channel.h>
#include <grpcpp/client_context.h>

#include "absl/status/statusor.h"
#include "common/flags.h"

namespace tandem::rpc {

struct GatewayClientOptions {
  std::string tls_ca;       // PEM file; "" = plaintext
  std::string server_name;  // "" = the address's host
  std::string api_key;      // "" = none
};

std::vector<common::FlagSpec> GatewayClientFlagSpecs();
// InvalidArgument naming the flag (an unreadable CA file, a key with
// spaces or control characters).
absl::StatusOr<GatewayClientOptions> GatewayClientOptionsFromArgs(const common::Args& args);

// A channel to the gateway at `address` with those options.
std::shared_ptr<grpc::Channel> DialGateway(const std::string& address,
                                           const GatewayClientOptions& options);
// Adds the API key's metadata to `ctx` (nothing without a key).
void Authorize(grpc::ClientContext& ctx, const GatewayClientOptions& options);

}  // namespace tandem::rpc

#endif  // TANDEM_RPC_GATEWAY_CLIENT_H_
