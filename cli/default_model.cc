#include "cli/default_model.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <system_error>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "engine/model/synthetic_model.h"

namespace tandem::cli {
namespace {

std::string EnvOrEmpty(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? "" : v;
}

}  // namespace

absl::StatusOr<std::string> DefaultSyntheticModelPath() {
  std::string cache = EnvOrEmpty("XDG_CACHE_HOME");
  if (cache.empty()) {
    const std::string home = EnvOrEmpty("HOME");
    if (home.empty()) {
      return absl::FailedPreconditionError(
          "no cache directory for the default model: set XDG_CACHE_HOME or HOME, "
          "or pass --model");
    }
    cache = absl::StrCat(home, "/.cache");
  }
  return absl::StrCat(cache, "/tandem/synthetic-llama-f32.gguf");
}

absl::StatusOr<std::string> EnsureSyntheticModel(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_regular_file(path, ec)) return path;
  const fs::path parent = fs::path(path).parent_path();
  if (!parent.empty()) {
    fs::create_directories(parent, ec);
    if (ec) {
      return absl::FailedPreconditionError(
          absl::StrCat("cannot create ", parent.string(), ": ", ec.message()));
    }
  }
  // A per-process temp name: a concurrent `tandem up` writes its own copy,
  // and whichever rename lands last wins with identical bytes.
  const std::string temp = absl::StrCat(path, ".tmp.", ::getpid());
  if (absl::Status s = engine::WriteSyntheticModel({}, temp); !s.ok()) {
    std::remove(temp.c_str());
    return s;
  }
  fs::rename(temp, path, ec);
  if (ec) {
    std::remove(temp.c_str());
    return absl::FailedPreconditionError(
        absl::StrCat("cannot rename ", temp, " to ", path, ": ", ec.message()));
  }
  return path;
}

}  // namespace tandem::cli
