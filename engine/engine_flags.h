// Flags shared by every command that runs the engine (threads, KV budget,
// block size, context cap), and their translation into EngineOptions.
#ifndef TANDEM_ENGINE_ENGINE_FLAGS_H_
#define TANDEM_ENGINE_ENGINE_FLAGS_H_

#include <vector>

#include "absl/status/statusor.h"
#include "common/flags.h"
#include "engine/model/backend.h"
#include "engine/engine.h"

namespace tandem::engine {

std::vector<common::FlagSpec> EngineFlagSpecs();

struct EngineSetup {
  engine::EngineOptions engine;
  engine::CpuBackendOptions backend;
};

// InvalidArgument naming the flag for out-of-range values.
absl::StatusOr<EngineSetup> EngineSetupFromArgs(const common::Args& args);

}  // namespace tandem::engine

#endif  // TANDEM_ENGINE_ENGINE_FLAGS_H_
