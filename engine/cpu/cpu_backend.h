// Internal entry point of the CPU backend for tests and benchmarks that must
// pin the instruction set, and the host <-> DevicePtr views its own tests use;
// the engine itself calls MakeCpuBackend (engine/model/backend.h), which
// picks the best ISA this CPU supports. Engine-thread only, like every Backend.
#ifndef TANDEM_ENGINE_CPU_CPU_BACKEND_H_
#define TANDEM_ENGINE_CPU_CPU_BACKEND_H_

#include <memory>

#include "engine/model/backend.h"
#include "engine/cpu/kernels.h"

namespace tandem::engine::cpu {

// `isa` must be supported by this CPU (IsaSupported).
std::unique_ptr<Backend> MakeCpuBackendWithIsa(const CpuBackendOptions& options, Isa isa);

// The CPU backend's memory is host memory: kernel tests and benchmarks hand
// it host buffers through these. Never for another backend.
template <typename T>
DevicePtr<T> HostPtr(T* p) {
  return DevicePtr<T>(p);
}
DeviceMatrix HostMatrix(const WeightMatrix& w);

}  // namespace tandem::engine::cpu

#endif  // TANDEM_ENGINE_CPU_CPU_BACKEND_H_
