#include "rpc/gateway_client.h"

#include <cstdlib>
#include <fstream>
#include <sstream>

#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>

#include "absl/strings/str_cat.h"

namespace tandem::rpc {

std::vector<common::FlagSpec> GatewayClientFlagSpecs() {
  return {
      {.name = "tls-ca", .default_value = "",
       .help = "PEM CA that signed the gateway's certificate (connect with TLS); empty = "
               "plaintext"},
      {.name = "tls-server-name", .default_value = "",
       .help = "name in the gateway's certificate (default: the address's host)"},
      {.name = "api-key", .default_value = "",
       .help = "API key sent as \"authorization: Bearer KEY\" (default: $TANDEM_API_KEY)"},
  };
}

absl::StatusOr<GatewayClientOptions> GatewayClientOptionsFromArgs(const common::Args& args) {
  GatewayClientOptions o;
  o.tls_ca = args.String("tls-ca");
  o.server_name = args.String("tls-server-name");
  o.api_key = args.String("api-key");
  if (o.api_key.empty()) {
    const char* env = std::getenv("TANDEM_API_KEY");
    if (env != nullptr) o.api_key = env;
  }
  for (char c : o.api_key) {
    if (c <= ' ' || c > '~') {
      return absl::InvalidArgumentError(
          "--api-key: only printable ASCII without spaces (nor in $TANDEM_API_KEY)");
    }
  }
  if (!o.tls_ca.empty() && !std::ifstream(o.tls_ca)) {
    return absl::InvalidArgumentError(absl::StrCat("--tls-ca ", o.tls_ca, ": unreadable"));
  }
  if (o.tls_ca.empty() && !o.server_name.empty()) {
    return absl::InvalidArgumentError("--tls-server-name: needs --tls-ca");
  }
  return o;
}

std::shared_ptr<grpc::Channel> DialGateway(const std::string& address,
                                           const GatewayClientOptions& options) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);
  if (options.tls_ca.empty()) {
    return grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
  }
  std::ifstream in(options.tls_ca);
  std::stringstream pem;
  pem << in.rdbuf();
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = pem.str();
  if (!options.server_name.empty()) args.SetSslTargetNameOverride(options.server_name);
  return grpc::CreateCustomChannel(address, grpc::SslCredentials(ssl), args);
}

void Authorize(grpc::ClientContext& ctx, const GatewayClientOptions& options) {
  if (!options.api_key.empty()) ctx.AddMetadata("authorization", "Bearer " + options.api_key);
}

}  // namespace tandem::rpc
