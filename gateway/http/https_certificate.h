// The HTTP front's TLS certificate, re-read when its files change: OpenSSL
// asks for it at every handshake (SSL_CTX_set_cert_cb), so a rotated
// certificate (a Kubernetes secret's mount changing) serves the next
// connection without a restart, as the gRPC port's file watcher does. A
// pair that no longer loads keeps the previous one and is logged.
// Thread-safe.
#ifndef TANDEM_GATEWAY_HTTP_HTTPS_CERTIFICATE_H_
#define TANDEM_GATEWAY_HTTP_HTTPS_CERTIFICATE_H_

#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

typedef struct ssl_ctx_st SSL_CTX;
typedef struct ssl_st SSL;

namespace tandem::gateway {

class HttpsCertificate {
 public:
  // Loads the PEM chain and key; InvalidArgument naming the flag when they
  // do not load or do not match. `client_ca` (may be empty): connections
  // must present a certificate it signed (read once).
  static absl::StatusOr<std::shared_ptr<HttpsCertificate>> Load(std::string cert_path,
                                                                std::string key_path,
                                                                std::string client_ca,
                                                                absl::Duration recheck);
  ~HttpsCertificate();

  // Sets up `ctx` to ask this object for the certificate at each handshake
  // (and to verify clients). This object must outlive `ctx`.
  bool Configure(SSL_CTX& ctx);

 private:
  struct Pair;
  HttpsCertificate(std::string cert_path, std::string key_path, std::string client_ca,
                   absl::Duration recheck);
  static absl::StatusOr<std::shared_ptr<const Pair>> Read(const std::string& cert_path,
                                                          const std::string& key_path);
  static int OnHandshake(SSL* ssl, void* self);
  std::shared_ptr<const Pair> Current() ABSL_LOCKS_EXCLUDED(mu_);

  const std::string cert_path_;
  const std::string key_path_;
  const std::string client_ca_;
  const absl::Duration recheck_;
  absl::Mutex mu_;
  std::shared_ptr<const Pair> pair_ ABSL_GUARDED_BY(mu_);
  std::string stamp_ ABSL_GUARDED_BY(mu_);  // the files' inode, size and mtime
  absl::Time next_check_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tandem::gateway

#endif  // TANDEM_GATEWAY_HTTP_HTTPS_CERTIFICATE_H_
