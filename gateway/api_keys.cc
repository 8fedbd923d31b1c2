#include "gateway/api_keys.h"

#include <openssl/crypto.h>
#include <openssl/sha.h>
#include <xxhash.h>

#include <fstream>
#include <sstream>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/file_stamp.h"
#include "common/log.h"

namespace tandem::gateway {
namespace {

// XXH3 seed of tenant salts ("TANDEMTN").
constexpr uint64_t kTenantSaltSeed = 0x4E544D45444E4154ull;

bool ValidTenantName(absl::string_view name) {
  if (name.empty() || name.size() > 64) return false;
  for (char c : name) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' &&
        c != '-') {
      return false;
    }
  }
  return true;
}

bool ValidKey(absl::string_view key) {
  if (key.size() < 8 || key.size() > 256) return false;
  for (char c : key) {
    if (c <= ' ' || c > '~') return false;
  }
  return true;
}

std::array<unsigned char, 32> Sha256(absl::string_view bytes) {
  std::array<unsigned char, 32> out{};
  SHA256(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size(), out.data());
  return out;
}

}  // namespace

uint64_t TenantSalt(const std::string& name) {
  if (name.empty()) return 0;
  const uint64_t h = XXH3_64bits_withSeed(name.data(), name.size(), kTenantSaltSeed);
  return h == 0 ? 1 : h;
}

const char* AuthFailureName(AuthFailure f) {
  switch (f) {
    case AuthFailure::kMissing: return "missing";
    case AuthFailure::kMalformed: return "malformed";
    case AuthFailure::kUnknownKey: return "unknown_key";
  }
  return "unknown";
}

absl::StatusOr<std::vector<ApiKeys::Entry>> ApiKeys::Parse(const std::string& path,
                                                          std::string* stamp) {
  *stamp = common::FileStamp(path);
  std::ifstream in(path);
  if (stamp->empty() || !in) {
    return absl::NotFoundError(absl::StrCat("--api-keys-file ", path, ": cannot read it"));
  }
  std::vector<Entry> entries;
  absl::flat_hash_set<std::string> digests;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    absl::string_view text = absl::StripAsciiWhitespace(line);
    if (text.empty() || text.front() == '#') continue;
    const std::vector<absl::string_view> fields =
        absl::StrSplit(text, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    const std::string where = absl::StrCat("--api-keys-file ", path, " line ", number, ": ");
    if (fields.size() != 2) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, "want \"TENANT KEY\", got ", fields.size(), " fields"));
    }
    if (!ValidTenantName(fields[0])) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, "tenant must be 1-64 of [A-Za-z0-9._-]"));
    }
    // The key itself is never repeated in a message.
    if (!ValidKey(fields[1])) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, "key must be 8-256 printable ASCII characters without spaces"));
    }
    Entry e{.digest = Sha256(fields[1]),
            .tenant = {.name = std::string(fields[0]), .salt = TenantSalt(std::string(fields[0]))}};
    if (!digests.insert(std::string(e.digest.begin(), e.digest.end())).second) {
      return absl::InvalidArgumentError(absl::StrCat(where, "key repeats an earlier line's"));
    }
    entries.push_back(std::move(e));
  }
  if (entries.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("--api-keys-file ", path, ": holds no keys"));
  }
  return entries;
}

absl::StatusOr<std::unique_ptr<ApiKeys>> ApiKeys::Load(std::string path, absl::Duration recheck) {
  std::string stamp;
  absl::StatusOr<std::vector<Entry>> entries = Parse(path, &stamp);
  if (!entries.ok()) return entries.status();
  std::unique_ptr<ApiKeys> keys(new ApiKeys(std::move(path), recheck));
  absl::MutexLock lock(&keys->mu_);
  keys->entries_ = std::move(*entries);
  keys->stamp_ = stamp;
  keys->next_check_ = absl::Now() + recheck;
  return keys;
}

void ApiKeys::MaybeReload() {
  {
    absl::MutexLock lock(&mu_);
    const absl::Time now = absl::Now();
    if (now < next_check_) return;
    next_check_ = now + recheck_;
    const std::string stamp = common::FileStamp(path_);
    if (stamp == stamp_) return;
  }
  // Parsed outside the lock; calls meanwhile use the keys they have.
  std::string stamp;
  absl::StatusOr<std::vector<Entry>> entries = Parse(path_, &stamp);
  absl::MutexLock lock(&mu_);
  if (!entries.ok()) {
    common::LogLine("gateway") << "API keys not reloaded, keeping the "
                      << entries_.size() << " loaded: " << entries.status().message();
    stamp_ = stamp;  // logged once per change, not per call
    return;
  }
  if (common::LogEnabled(common::LogLevel::kInfo)) {
    common::LogLine("gateway") << "reloaded " << entries->size() << " API keys from " << path_;
  }
  entries_ = std::move(*entries);
  stamp_ = stamp;
}

ApiKeys::Result ApiKeys::Authenticate(const std::string* authorization) {
  constexpr char kHint[] = "send metadata \"authorization: Bearer <API key>\"";
  if (authorization == nullptr || authorization->empty()) {
    return {absl::UnauthenticatedError(absl::StrCat("authorization: missing; ", kHint)),
            AuthFailure::kMissing};
  }
  const absl::string_view value = *authorization;
  if (value.size() < 7 || !absl::EqualsIgnoreCase(value.substr(0, 7), "bearer ")) {
    return {absl::UnauthenticatedError(absl::StrCat("authorization: not a Bearer token; ", kHint)),
            AuthFailure::kMalformed};
  }
  const Digest presented = Sha256(absl::StripAsciiWhitespace(value.substr(7)));
  MaybeReload();
  absl::MutexLock lock(&mu_);
  // Every entry is compared, whichever matches.
  const Entry* match = nullptr;
  for (const Entry& e : entries_) {
    const bool equal = CRYPTO_memcmp(e.digest.data(), presented.data(), presented.size()) == 0;
    match = equal ? &e : match;
  }
  if (match == nullptr) {
    return {absl::UnauthenticatedError("authorization: unknown API key"),
            AuthFailure::kUnknownKey};
  }
  return {match->tenant, AuthFailure::kMissing};
}

int ApiKeys::size() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(entries_.size());
}

}  // namespace tandem::gateway
