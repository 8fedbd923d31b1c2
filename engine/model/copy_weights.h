// A model's weights copied into a backend's own memory: what
// Backend::PrepareWeights does for a backend that cannot read the host's
// (the CUDA backend, the tests' fake device).
#ifndef TANDEM_ENGINE_MODEL_COPY_WEIGHTS_H_
#define TANDEM_ENGINE_MODEL_COPY_WEIGHTS_H_

#include <cstdint>
#include <span>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "engine/model/weights.h"

namespace tandem::engine {

// Copies `bytes` into the backend's memory and returns where they now are.
using CopyInFn =
    absl::FunctionRef<absl::StatusOr<DevicePtr<const uint8_t>>(std::span<const uint8_t> bytes)>;

// Every tensor of `w` through `copy_in`, each distinct matrix once (a tied
// output is the embedding's copy); a matrix without data, and an empty
// vector, stay null. `distinct`, when given, gets each copied matrix once.
// The first error of `copy_in` is returned.
absl::StatusOr<DeviceWeights> CopyWeights(const ModelWeights& w, CopyInFn copy_in,
                                          std::vector<DeviceMatrix>* distinct = nullptr);

}  // namespace tandem::engine

#endif  // TANDEM_ENGINE_MODEL_COPY_WEIGHTS_H_
