// Flags shared by every command that runs the engine (device, threads, KV
// budget, block size, context cap), and their translation into
// EngineOptions, the device and the CPU backend's options.
#ifndef TANDEM_ENGINE_ENGINE_FLAGS_H_
#define TANDEM_ENGINE_ENGINE_FLAGS_H_

#include <vector>

#include "absl/status/statusor.h"
#include "common/flags.h"
#include "engine/device_spec.h"
#include "engine/model/backend.h"
#include "engine/engine.h"

namespace tandem::engine {

std::vector<common::FlagSpec> EngineFlagSpecs();

struct EngineSetup {
  engine::EngineOptions engine;
  DeviceSpec device;                  // --device; MakeBackendForModel builds it
  engine::CpuBackendOptions backend;  // used when device is the CPU
  engine::CudaBackendOptions cuda;    // used when it is a CUDA device
};

// InvalidArgument naming the flag for out-of-range values.
absl::StatusOr<EngineSetup> EngineSetupFromArgs(const common::Args& args);

}  // namespace tandem::engine

#endif  // TANDEM_ENGINE_ENGINE_FLAGS_H_
