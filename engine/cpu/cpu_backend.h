// Internal entry point of the CPU backend for tests and benchmarks that must
// pin the instruction set; the engine itself calls MakeCpuBackend
// (engine/model/backend.h), which picks the best ISA this CPU supports.
#ifndef TANDEM_ENGINE_CPU_CPU_BACKEND_H_
#define TANDEM_ENGINE_CPU_CPU_BACKEND_H_

#include <memory>

#include "engine/model/backend.h"
#include "engine/cpu/kernels.h"

namespace tandem::engine::cpu {

// `isa` must be supported by this CPU (IsaSupported).
std::unique_ptr<Backend> MakeCpuBackendWithIsa(const CpuBackendOptions& options, Isa isa);

}  // namespace tandem::engine::cpu

#endif  // TANDEM_ENGINE_CPU_CPU_BACKEND_H_
