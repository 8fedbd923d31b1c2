#include "engine/cpu/kernels.h"

#include <cstdio>
#if defined(__x86_64__)
#include <cpuid.h>
#endif
#include <cstdlib>
#include <string>

#include "common/check.h"

namespace tandem::engine::cpu {

std::string_view IsaName(Isa isa) {
  switch (isa) {
    case Isa::kPortable: return "portable";
    case Isa::kAvx2: return "avx2";
    case Isa::kAvx512: return "avx512";
  }
  return "?";
}

std::optional<Isa> IsaFromName(std::string_view name) {
  for (Isa isa : {Isa::kPortable, Isa::kAvx2, Isa::kAvx512}) {
    if (IsaName(isa) == name) return isa;
  }
  return std::nullopt;
}

bool IsaSupported(Isa isa) {
  switch (isa) {
    case Isa::kPortable:
      return true;
    case Isa::kAvx2: {
#if defined(__x86_64__) && defined(__GNUC__)
      // F16C from cpuid leaf 1 (ECX bit 29): not every compiler's
      // __builtin_cpu_supports knows its name.
      static const bool supported = [] {
        unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
        const bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & (1u << 29)) != 0;
        return f16c && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
      }();
      return supported;
#else
      return false;
#endif
    }
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
  static const Isa isa = [] {
    const Isa best = IsaSupported(Isa::kAvx512) ? Isa::kAvx512
                     : IsaSupported(Isa::kAvx2) ? Isa::kAvx2
                                                : Isa::kPortable;
    // TANDEM_ISA forces a lower table (to test or measure it on a machine
    // with a higher one); one this CPU lacks, or an unknown name, is ignored
    // with a warning.
    const char* forced = std::getenv("TANDEM_ISA");
    if (forced == nullptr || *forced == '\0') return best;
    if (const std::optional<Isa> named = IsaFromName(forced); named.has_value()) {
      if (IsaSupported(*named)) return *named;
      std::fprintf(stderr, "TANDEM_ISA=%s: this CPU lacks it; using %s\n", forced,
                   std::string(IsaName(best)).c_str());
      return best;
    }
    std::fprintf(stderr, "TANDEM_ISA=%s: not portable, avx2 or avx512; using %s\n", forced,
                 std::string(IsaName(best)).c_str());
    return best;
  }();
  return isa;
}

const KernelTable& Kernels(Isa isa) {
  TANDEM_CHECK(IsaSupported(isa), "kernels requested for an ISA this CPU lacks");
  switch (isa) {
    case Isa::kPortable: return PortableKernels();
    case Isa::kAvx2: return Avx2Kernels();
    case Isa::kAvx512: return Avx512Kernels();
  }
  return PortableKernels();
}

}  // namespace tandem::engine::cpu
