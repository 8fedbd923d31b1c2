// The model `tandem up` serves when given no --model: the default synthetic
// Llama (engine/model/synthetic_model.h), generated once into the user's cache
// directory and reused. Called by cli/up_command.cc on its main thread;
// functions are thread-compatible (two processes racing are safe: each
// writes its own temp file and renames it into place).
#ifndef TANDEM_CLI_DEFAULT_MODEL_H_
#define TANDEM_CLI_DEFAULT_MODEL_H_

#include <string>

#include "absl/status/statusor.h"

namespace tandem::cli {

// ($XDG_CACHE_HOME or $HOME/.cache)/tandem/synthetic-llama-f32.gguf.
// FailedPrecondition when neither variable is set (or both are empty).
absl::StatusOr<std::string> DefaultSyntheticModelPath();

// Returns `path`, first writing the default synthetic model there (parent
// directories created, temp file then rename) unless a file already exists.
absl::StatusOr<std::string> EnsureSyntheticModel(const std::string& path);

}  // namespace tandem::cli

#endif  // TANDEM_CLI_DEFAULT_MODEL_H_
