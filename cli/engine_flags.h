// Flags shared by every command that runs the engine (threads, KV budget,
// block size, context cap), and their translation into EngineOptions.
#ifndef TANDEM_CLI_ENGINE_FLAGS_H_
#define TANDEM_CLI_ENGINE_FLAGS_H_

#include <vector>

#include "absl/status/statusor.h"
#include "cli/args.h"
#include "engine/backend.h"
#include "engine/engine.h"

namespace tandem::cli {

std::vector<FlagSpec> EngineFlagSpecs();

struct EngineSetup {
  engine::EngineOptions engine;
  engine::CpuBackendOptions backend;
};

// InvalidArgument naming the flag for out-of-range values.
absl::StatusOr<EngineSetup> EngineSetupFromArgs(const Args& args);

}  // namespace tandem::cli

#endif  // TANDEM_CLI_ENGINE_FLAGS_H_
