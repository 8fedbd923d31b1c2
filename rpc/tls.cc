#include "rpc/tls.h"

#include <fstream>
#include <sstream>

#include <grpcpp/security/tls_certificate_provider.h>
#include <grpcpp/security/tls_credentials_options.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace tandem::rpc {
namespace {

// The file must be readable and hold a PEM block: the watcher would
// otherwise fail every handshake without saying why.
absl::Status CheckPem(const std::string& flag, const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::InvalidArgumentError(absl::StrCat("--", flag, " ", path, ": unreadable"));
  std::stringstream text;
  text << in.rdbuf();
  if (!absl::StrContains(text.str(), "-----BEGIN ")) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag, " ", path, ": holds no PEM block"));
  }
  return absl::OkStatus();
}

std::shared_ptr<grpc::experimental::CertificateProviderInterface> Provider(
    const TlsFiles& files) {
  const auto every = static_cast<unsigned int>(files.reload_s);
  if (files.cert.empty()) {
    return std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(files.ca, every);
  }
  return std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
      files.key, files.cert, files.ca, every);
}

}  // namespace

std::vector<common::FlagSpec> InternalTlsFlagSpecs() {
  return {
      {.name = "mtls-cert", .default_value = "",
       .help = "PEM certificate this process presents to its peers and serves internal ports "
               "with (with --mtls-key and --mtls-ca: mutual TLS between gateways and workers)"},
      {.name = "mtls-key", .default_value = "", .help = "PEM private key of --mtls-cert"},
      {.name = "mtls-ca", .default_value = "",
       .help = "PEM CA bundle that must have signed every peer's certificate"},
      {.name = "mtls-server-name", .default_value = "",
       .help = "name every worker's certificate holds (default: the dialled host)"},
      {.name = "tls-reload-s", .default_value = "30",
       .help = "check the TLS files for changes this often (rotated certificates apply "
               "without a restart)"},
  };
}

std::vector<common::FlagSpec> PublicTlsFlagSpecs() {
  return {
      {.name = "tls-cert", .default_value = "",
       .help = "PEM certificate of the public port (with --tls-key: TLS for clients)"},
      {.name = "tls-key", .default_value = "", .help = "PEM private key of --tls-cert"},
      {.name = "tls-client-ca", .default_value = "",
       .help = "require client certificates signed by this PEM CA on the public port"},
  };
}

absl::StatusOr<InternalTls> InternalTlsFromArgs(const common::Args& args) {
  InternalTls tls;
  ASSIGN_OR_RETURN(tls.files.reload_s, args.IntInRange("tls-reload-s", 1, 86400));
  tls.files.cert = args.String("mtls-cert");
  tls.files.key = args.String("mtls-key");
  tls.files.ca = args.String("mtls-ca");
  tls.server_name = args.String("mtls-server-name");
  const int given = !tls.files.cert.empty() + !tls.files.key.empty() + !tls.files.ca.empty();
  if (given == 0) {
    if (!tls.server_name.empty()) {
      return absl::InvalidArgumentError("--mtls-server-name: needs --mtls-cert");
    }
    return tls;
  }
  if (given != 3) {
    return absl::InvalidArgumentError(
        "--mtls-cert, --mtls-key and --mtls-ca: give all three (mutual TLS) or none");
  }
  RETURN_IF_ERROR(CheckPem("mtls-cert", tls.files.cert));
  RETURN_IF_ERROR(CheckPem("mtls-key", tls.files.key));
  RETURN_IF_ERROR(CheckPem("mtls-ca", tls.files.ca));
  return tls;
}

absl::StatusOr<TlsFiles> PublicTlsFromArgs(const common::Args& args) {
  TlsFiles files;
  ASSIGN_OR_RETURN(files.reload_s, args.IntInRange("tls-reload-s", 1, 86400));
  files.cert = args.String("tls-cert");
  files.key = args.String("tls-key");
  files.ca = args.String("tls-client-ca");
  if (files.cert.empty() != files.key.empty()) {
    return absl::InvalidArgumentError("--tls-cert and --tls-key: give both or neither");
  }
  if (files.cert.empty()) {
    if (!files.ca.empty()) {
      return absl::InvalidArgumentError("--tls-client-ca: needs --tls-cert and --tls-key");
    }
    return files;
  }
  RETURN_IF_ERROR(CheckPem("tls-cert", files.cert));
  RETURN_IF_ERROR(CheckPem("tls-key", files.key));
  if (!files.ca.empty()) RETURN_IF_ERROR(CheckPem("tls-client-ca", files.ca));
  return files;
}

std::shared_ptr<grpc::ServerCredentials> ServerCredentials(const TlsFiles& files) {
  if (files.cert.empty()) return grpc::InsecureServerCredentials();
  grpc::experimental::TlsServerCredentialsOptions options(Provider(files));
  options.watch_identity_key_cert_pairs();
  if (!files.ca.empty()) {
    options.watch_root_certs();
    options.set_cert_request_type(GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  }
  return grpc::experimental::TlsServerCredentials(options);
}

std::shared_ptr<grpc::ChannelCredentials> ChannelCredentials(const TlsFiles& files) {
  if (files.cert.empty() && files.ca.empty()) return grpc::InsecureChannelCredentials();
  grpc::experimental::TlsChannelCredentialsOptions options;
  options.set_certificate_provider(Provider(files));
  if (!files.ca.empty()) options.watch_root_certs();
  if (!files.cert.empty()) options.watch_identity_key_cert_pairs();
  return grpc::experimental::TlsCredentials(options);
}

}  // namespace tandem::rpc
