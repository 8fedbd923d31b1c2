#include "gateway/http/https_certificate.h"

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include <cstdio>

#include "absl/strings/str_cat.h"
#include "common/file_stamp.h"
#include "common/log.h"

namespace tandem::gateway {

// A certificate chain and its key, as loaded; shared by the handshakes that
// use it while a newer one may replace it.
struct HttpsCertificate::Pair {
  X509* leaf = nullptr;
  STACK_OF(X509)* chain = nullptr;  // intermediates after the leaf
  EVP_PKEY* key = nullptr;
  ~Pair() {
    X509_free(leaf);
    sk_X509_pop_free(chain, X509_free);
    EVP_PKEY_free(key);
  }
};

namespace {

// Both files' stamps; "" while either is missing.
std::string Stamp(const std::string& cert, const std::string& key) {
  const std::string a = common::FileStamp(cert);
  const std::string b = common::FileStamp(key);
  return a.empty() || b.empty() ? "" : absl::StrCat(a, ";", b);
}

std::string OpenSslError() {
  const unsigned long e = ERR_get_error();
  ERR_clear_error();
  if (e == 0) return "unknown error";
  char text[256];
  ERR_error_string_n(e, text, sizeof(text));
  return text;
}

}  // namespace

HttpsCertificate::HttpsCertificate(std::string cert_path, std::string key_path,
                                   std::string client_ca, absl::Duration recheck)
    : cert_path_(std::move(cert_path)),
      key_path_(std::move(key_path)),
      client_ca_(std::move(client_ca)),
      recheck_(recheck) {}

HttpsCertificate::~HttpsCertificate() = default;

absl::StatusOr<std::shared_ptr<const HttpsCertificate::Pair>> HttpsCertificate::Read(
    const std::string& cert_path, const std::string& key_path) {
  auto pair = std::make_shared<Pair>();
  std::FILE* f = std::fopen(cert_path.c_str(), "r");
  if (f == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("--tls-cert ", cert_path, ": unreadable"));
  }
  pair->leaf = PEM_read_X509(f, nullptr, nullptr, nullptr);
  pair->chain = sk_X509_new_null();
  while (X509* more = PEM_read_X509(f, nullptr, nullptr, nullptr)) {
    sk_X509_push(pair->chain, more);
  }
  ERR_clear_error();  // the read past the last block
  std::fclose(f);
  if (pair->leaf == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("--tls-cert ", cert_path, ": no certificate"));
  }
  f = std::fopen(key_path.c_str(), "r");
  if (f == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("--tls-key ", key_path, ": unreadable"));
  }
  pair->key = PEM_read_PrivateKey(f, nullptr, nullptr, nullptr);
  std::fclose(f);
  if (pair->key == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("--tls-key ", key_path, ": no private key (", OpenSslError(), ")"));
  }
  if (X509_check_private_key(pair->leaf, pair->key) != 1) {
    ERR_clear_error();
    return absl::InvalidArgumentError(
        absl::StrCat("--tls-key ", key_path, ": does not match --tls-cert ", cert_path));
  }
  return std::shared_ptr<const Pair>(std::move(pair));
}

absl::StatusOr<std::shared_ptr<HttpsCertificate>> HttpsCertificate::Load(
    std::string cert_path, std::string key_path, std::string client_ca, absl::Duration recheck) {
  absl::StatusOr<std::shared_ptr<const Pair>> pair = Read(cert_path, key_path);
  if (!pair.ok()) return pair.status();
  std::shared_ptr<HttpsCertificate> cert(new HttpsCertificate(
      std::move(cert_path), std::move(key_path), std::move(client_ca), recheck));
  absl::MutexLock lock(&cert->mu_);
  cert->pair_ = std::move(*pair);
  cert->stamp_ = Stamp(cert->cert_path_, cert->key_path_);
  cert->next_check_ = absl::Now() + recheck;
  return cert;
}

std::shared_ptr<const HttpsCertificate::Pair> HttpsCertificate::Current() {
  {
    absl::MutexLock lock(&mu_);
    const absl::Time now = absl::Now();
    if (now < next_check_) return pair_;
    next_check_ = now + recheck_;
    const std::string stamp = Stamp(cert_path_, key_path_);
    if (stamp.empty() || stamp == stamp_) return pair_;
    stamp_ = stamp;  // tried once per change, whatever comes of it
  }
  absl::StatusOr<std::shared_ptr<const Pair>> fresh = Read(cert_path_, key_path_);
  absl::MutexLock lock(&mu_);
  if (!fresh.ok()) {
    common::LogLine("gateway") << "HTTPS certificate not reloaded, keeping the loaded one: "
                               << fresh.status().message();
    return pair_;
  }
  if (common::LogEnabled(common::LogLevel::kInfo)) {
    common::LogLine("gateway") << "HTTPS certificate reloaded from " << cert_path_;
  }
  pair_ = std::move(*fresh);
  return pair_;
}

int HttpsCertificate::OnHandshake(SSL* ssl, void* self) {
  const std::shared_ptr<const Pair> pair = static_cast<HttpsCertificate*>(self)->Current();
  // Copies references: the SSL keeps what it uses after `pair` goes.
  return SSL_use_cert_and_key(ssl, pair->leaf, pair->key, pair->chain, /*override=*/1) == 1 ? 1
                                                                                           : 0;
}

bool HttpsCertificate::Configure(SSL_CTX& ctx) {
  SSL_CTX_set_min_proto_version(&ctx, TLS1_2_VERSION);
  SSL_CTX_set_cert_cb(&ctx, &HttpsCertificate::OnHandshake, this);
  if (!client_ca_.empty()) {
    if (SSL_CTX_load_verify_locations(&ctx, client_ca_.c_str(), nullptr) != 1) return false;
    SSL_CTX_set_verify(&ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
  }
  return true;
}

}  // namespace tandem::gateway
