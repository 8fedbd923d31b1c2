#include "engine/cpu/kernels.h"

#include "common/check.h"

namespace tandem::engine::cpu {

std::string_view IsaName(Isa isa) {
  switch (isa) {
    case Isa::kPortable: return "portable";
    case Isa::kAvx512: return "avx512";
  }
  return "?";
}

bool IsaSupported(Isa isa) {
  switch (isa) {
    case Isa::kPortable:
      return true;
    case Isa::kAvx512: {
#if defined(__x86_64__) && defined(__GNUC__)
      // libgcc only reports AVX-512 features when the OS saves ZMM state.
      static const bool supported =
          __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
          __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
          __builtin_cpu_supports("avx512vnni");
      return supported;
#else
      return false;
#endif
    }
  }
  return false;
}

Isa DetectIsa() {
  static const Isa isa = IsaSupported(Isa::kAvx512) ? Isa::kAvx512 : Isa::kPortable;
  return isa;
}

const KernelTable& Kernels(Isa isa) {
  TANDEM_CHECK(IsaSupported(isa), "kernels requested for an ISA this CPU lacks");
  switch (isa) {
    case Isa::kPortable: return PortableKernels();
    case Isa::kAvx512: return Avx512Kernels();
  }
  return PortableKernels();
}

}  // namespace tandem::engine::cpu
