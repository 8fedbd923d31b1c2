// Flags shared by every command that runs the engine (device, threads, KV
// budget, block size, context cap), and their translation into
// EngineOptions, the device and the CPU backend's options.
#ifndef TANDEM_ENGINE_ENGINE_FLAGS_H_
#define TANDEM_ENGINE_ENGINE_FLAGS_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/flags.h"
#include "engine/device_spec.h"
#include "engine/engine.h"
#include "engine/model/backend.h"

namespace tandem::engine {

std::vector<common::FlagSpec> EngineFlagSpecs();

struct EngineSetup {
  engine::EngineOptions engine;
  std::string draft_model;            // --draft-model; empty: none
  DeviceSpec device;                  // --device; MakeBackendForModel builds it
  engine::CpuBackendOptions backend;  // used when device is the CPU
  engine::CudaBackendOptions cuda;    // used when it is a CUDA device
};

// InvalidArgument naming the flag for out-of-range values.
absl::StatusOr<EngineSetup> EngineSetupFromArgs(const common::Args& args);

// OK when `speculative` (--speculative) is off, prompt-lookup or draft, and
// draft comes with a `draft_model` (--draft-model); InvalidArgument naming
// the flag otherwise. For every command that passes them on, too.
absl::Status CheckSpeculativeFlags(const std::string& speculative, const std::string& draft_model);

// The draft model setup.draft_model names (null when none); errors name
// --draft-model.
absl::StatusOr<std::unique_ptr<Model>> LoadDraftModel(const EngineSetup& setup);

// The engine `setup` describes on `model`, with its backend for
// setup.device (MakeBackendForModel), and `draft` (LoadDraftModel's; may be
// null; must outlive the engine) on a backend of its own on the same device.
absl::StatusOr<std::unique_ptr<Engine>> CreateEngine(const Model& model, const Model* draft,
                                                     const EngineSetup& setup);

}  // namespace tandem::engine

#endif  // TANDEM_ENGINE_ENGINE_FLAGS_H_
