#include "engine/cuda/cublas_api.h"

#include <dlfcn.h>

#include <string>
#include <type_traits>

#include "absl/strings/str_cat.h"

namespace tandem::engine::cuda {
namespace {

// "libcublas.so.13"
std::string LibraryName() { return absl::StrCat("libcublas.so.", CUBLAS_VER_MAJOR); }

absl::StatusOr<CublasApi> Load() {
  const std::string name = LibraryName();
  // RTLD_LOCAL: nothing else in the process resolves against it.
  void* lib = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
  std::string first_error = lib == nullptr ? dlerror() : "";
#ifdef TANDEM_CUDA_LIBRARY_DIR
  if (lib == nullptr) {
    lib = dlopen(absl::StrCat(TANDEM_CUDA_LIBRARY_DIR, "/", name).c_str(), RTLD_NOW | RTLD_LOCAL);
  }
#endif
  if (lib == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot load cuBLAS (", name, "): ", first_error,
                     "; add the CUDA toolkit's lib64 directory to LD_LIBRARY_PATH"));
  }
  // Never dlclosed: the handles live until exit.
  CublasApi api;
  std::string missing;
  const auto find = [&](auto& fn, const char* symbol) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, symbol));
    if (fn == nullptr) absl::StrAppend(&missing, missing.empty() ? "" : ", ", symbol);
  };
  find(api.create, "cublasCreate_v2");
  find(api.destroy, "cublasDestroy_v2");
  find(api.set_stream, "cublasSetStream_v2");
  find(api.set_workspace, "cublasSetWorkspace_v2");
  find(api.gemm_ex, "cublasGemmEx");
  find(api.status_name, "cublasGetStatusName");
  if (!missing.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat(name, " lacks ", missing, " (a cuBLAS older than this build's headers?)"));
  }
  return api;
}

}  // namespace

absl::StatusOr<const CublasApi*> Cublas() {
  static const absl::StatusOr<CublasApi>* const api = new absl::StatusOr<CublasApi>(Load());
  if (!api->ok()) return api->status();
  return &**api;
}

}  // namespace tandem::engine::cuda
