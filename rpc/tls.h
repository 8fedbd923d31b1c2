// TLS for Tandem's gRPC ports, from PEM files that are re-read while the
// process runs (gRPC's FileWatcherCertificateProvider), so a rotated
// certificate (a Kubernetes secret's mount changing) is picked up without a
// restart.
//
//   Public port (the gateway's): --tls-cert, --tls-key, and optionally
//   --tls-client-ca to require client certificates signed by that CA.
//   Internal links (gateway -> workers, worker -> worker): --mtls-cert,
//   --mtls-key, --mtls-ca on every process. A worker then serves only
//   clients whose certificate that CA signed, and every process presents its
//   own certificate and verifies its peers' against the CA. The peer's name
//   is checked against the address it was dialled by, or against
//   --mtls-server-name when set (one name in every worker's certificate,
//   since a Kubernetes pod is dialled by IP).
//   --tls-reload-s: how often the files are checked for changes.
// Without the flags, ports and channels are plaintext, as before.
#ifndef TANDEM_RPC_TLS_H_
#define TANDEM_RPC_TLS_H_

#include <memory>
#include <string>
#include <vector>

#include <grpcpp/security/credentials.h>
#include <grpcpp/security/server_credentials.h>

#include "absl/status/statusor.h"
#include "common/flags.h"

namespace tandem::rpc {

struct TlsFiles {
  std::string cert;  // PEM certificate chain ("" = none)
  std::string key;   // PEM private key of cert
  std::string ca;    // PEM bundle that verifies the peer ("" = none)
  int reload_s = 30;
};

// --mtls-cert, --mtls-key, --mtls-ca, --mtls-server-name, --tls-reload-s.
std::vector<common::FlagSpec> InternalTlsFlagSpecs();
// --tls-cert, --tls-key, --tls-client-ca (the gateway's public port).
std::vector<common::FlagSpec> PublicTlsFlagSpecs();

struct InternalTls {
  TlsFiles files = {};      // all three set, or none
  std::string server_name = {};  // "" = the dialled host
  bool enabled() const { return !files.cert.empty(); }
};
// InvalidArgument naming the flag: one of the three without the others, a
// file that cannot be read or holds no PEM block.
absl::StatusOr<InternalTls> InternalTlsFromArgs(const common::Args& args);
// The public port's files (cert and key both or neither; client CA only
// with them); `files.cert` empty when off.
absl::StatusOr<TlsFiles> PublicTlsFromArgs(const common::Args& args);

// Plaintext when `files.cert` is empty. With `files.ca`, clients must
// present a certificate it signed.
std::shared_ptr<grpc::ServerCredentials> ServerCredentials(const TlsFiles& files);
// Plaintext when `files.ca` and `files.cert` are empty. Verifies the server
// against `files.ca` (the system roots when empty) and presents `files.cert`
// when set.
std::shared_ptr<grpc::ChannelCredentials> ChannelCredentials(const TlsFiles& files);

}  // namespace tandem::rpc

#endif  // TANDEM_RPC_TLS_H_
