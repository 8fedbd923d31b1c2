// API keys at the gateway: who may call, and which tenant a call belongs to.
// Keys come from a file (one "TENANT KEY" pair per line, '#' comments), are
// kept only as SHA-256 digests, and a presented key is compared against
// every stored digest in constant time (CRYPTO_memcmp, no early exit), so
// neither a key nor its length leaks through timing. The file is re-read
// when it changes (as a mounted Kubernetes secret does); a file that no
// longer parses keeps the previous keys and is logged.
//
// A tenant's prefix-cache salt is derived from its name: every block hash of
// its requests is salted with it, so tenants never share (or time) cached
// blocks. No keys configured: one anonymous tenant, salt 0 (hashes as
// without tenants). Thread-safe.
#ifndef TANDEM_GATEWAY_API_KEYS_H_
#define TANDEM_GATEWAY_API_KEYS_H_

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace tandem::gateway {

struct Tenant {
  std::string name;      // "" without API keys
  uint64_t salt = 0;     // 0 only for the anonymous tenant
};

// The salt of tenant `name` (0 for ""): a 64-bit hash, never 0 for a name.
uint64_t TenantSalt(const std::string& name);

// Why a call was refused, for tandem_auth_failures_total{reason}.
enum class AuthFailure { kMissing, kMalformed, kUnknownKey };
const char* AuthFailureName(AuthFailure f);

class ApiKeys {
 public:
  // Parses `path`; InvalidArgument naming the file and line for a bad line
  // (not two fields, a tenant name outside [A-Za-z0-9._-]{1,64}, a key
  // shorter than 8 or longer than 256 bytes or not printable ASCII, a
  // repeated key), NotFound when unreadable, and for a file with no keys.
  // The file is checked for changes at most every `recheck`.
  static absl::StatusOr<std::unique_ptr<ApiKeys>> Load(std::string path, absl::Duration recheck);

  struct Result {
    absl::StatusOr<Tenant> tenant;
    AuthFailure failure = AuthFailure::kMissing;  // when !tenant.ok()
  };
  // `authorization` is the call's "authorization" metadata value (null
  // when absent): "Bearer KEY" (scheme case-insensitive). Unauthenticated
  // with a message that never repeats the key.
  Result Authenticate(const std::string* authorization);

  int size() const;

 private:
  using Digest = std::array<unsigned char, 32>;
  struct Entry {
    Digest digest;
    Tenant tenant;
  };
  ApiKeys(std::string path, absl::Duration recheck) : path_(std::move(path)), recheck_(recheck) {}
  // `stamp`: common::FileStamp of the file as read.
  static absl::StatusOr<std::vector<Entry>> Parse(const std::string& path, std::string* stamp);
  void MaybeReload() ABSL_LOCKS_EXCLUDED(mu_);

  const std::string path_;
  const absl::Duration recheck_;
  mutable absl::Mutex mu_;
  std::vector<Entry> entries_ ABSL_GUARDED_BY(mu_);
  std::string stamp_ ABSL_GUARDED_BY(mu_);  // common::FileStamp when last read
  absl::Time next_check_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tandem::gateway

#endif  // TANDEM_GATEWAY_API_KEYS_H_
