// The CPU Backend: MatMul through MatMulRunner (engine/cpu/matmul.h), the
// element-wise ops straight from the kernel table, split over the OpenMP
// pool only when the work outweighs the fork. Engine-thread only.
#include "engine/cpu/cpu_backend.h"

#include <omp.h>

#include <algorithm>
#include <cstring>
#include <new>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/check.h"
#include "common/strings.h"
#include "engine/cpu/attention.h"
#include "engine/cpu/matmul.h"

namespace tandem::engine {
namespace cpu {
namespace {

// Element-wise ops below this many elements run on the calling thread.
constexpr int64_t kMinParallelElements = 1 << 15;

class CpuBackend final : public Backend {
 public:
  CpuBackend(const KernelTable& kernels, int threads)
      : kernels_(kernels),
        threads_(threads),
        matmul_(kernels, threads),
        name_(absl::StrCat("cpu-", ToAbsl(IsaName(kernels.isa)))) {}

  std::string_view name() const override { return name_; }
  int threads() const override { return threads_; }

  // Host memory: a DevicePtr is the host address. Default-initialized, so
  // the OS commits pages only once they are written (RSS follows use).
  absl::StatusOr<DevicePtr<uint8_t>> Allocate(int64_t bytes, std::string_view what) override {
    TANDEM_CHECK(bytes >= 0, "allocation size is not negative");
    auto* p = static_cast<uint8_t*>(
        ::operator new(static_cast<size_t>(std::max<int64_t>(bytes, 1)), kAlign, std::nothrow));
    if (p == nullptr) {
      return absl::ResourceExhaustedError(
          absl::StrCat(ToAbsl(what), ": cannot allocate ", bytes, " bytes of host memory"));
    }
    memory_.emplace_back(p);
    return DevicePtr<uint8_t>(p);
  }

  void Upload(DevicePtr<uint8_t> dst, std::span<const uint8_t> src) override {
    if (!src.empty()) std::memcpy(dst.backend_address(), src.data(), src.size());
  }

  void Download(DevicePtr<const uint8_t> src, std::span<uint8_t> dst) override {
    if (!dst.empty()) std::memcpy(dst.data(), src.backend_address(), dst.size());
  }

  void Synchronize() override {}

  void ReadBlocks(const KvPoolView& pool, std::span<const BlockId> ids,
                  std::span<uint8_t> out) override {
    TANDEM_CHECK(static_cast<int64_t>(out.size()) ==
                     static_cast<int64_t>(ids.size()) * pool.block_bytes,
                 "ReadBlocks' staging holds exactly the blocks");
    for (size_t i = 0; i < ids.size(); ++i) {
      std::memcpy(out.data() + i * pool.block_bytes,
                  pool.base.backend_address() + int64_t{ids[i]} * pool.block_bytes,
                  pool.block_bytes);
    }
  }

  void WriteBlocks(const KvPoolView& pool, std::span<const BlockId> ids,
                   std::span<const KvBlockBytes> blocks) override {
    TANDEM_CHECK(ids.size() == blocks.size(), "one block of bytes per id");
    for (size_t i = 0; i < ids.size(); ++i) {
      TANDEM_CHECK(static_cast<int64_t>(blocks[i].size()) == pool.block_bytes,
                   "a written block is exactly one block");
      blocks[i].CopyTo(pool.base.backend_address() + int64_t{ids[i]} * pool.block_bytes);
    }
  }

  void MatMul(const WeightMatrix& w, const float* x, int64_t n_tokens, float* y) override {
    matmul_.Run(w, x, n_tokens, y);
  }

  void RmsNorm(const float* x, const float* weight, int64_t n_tokens, int64_t dim, float eps,
               float* y) override {
    if (n_tokens < 2 * threads_ || n_tokens * dim < kMinParallelElements) {
      kernels_.rms_norm(x, weight, n_tokens, dim, eps, y);
      return;
    }
#pragma omp parallel for num_threads(threads_) schedule(static)
    for (int64_t t = 0; t < n_tokens; ++t) {
      kernels_.rms_norm(x + t * dim, weight, 1, dim, eps, y + t * dim);
    }
  }

  void SwiGlu(const float* gate, const float* up, int64_t n, float* out) override {
    if (n < kMinParallelElements) {
      kernels_.swiglu(gate, up, n, out);
      return;
    }
    const int64_t chunk = ChunkFor(n);
#pragma omp parallel for num_threads(threads_) schedule(static)
    for (int64_t i = 0; i < n; i += chunk) {
      kernels_.swiglu(gate + i, up + i, std::min(chunk, n - i), out + i);
    }
  }

  void PagedAttention(const AttentionArgs& args) override {
    cpu::PagedAttention(args, {.threads = threads_, .isa = kernels_.isa});
  }

  void Add(float* x, const float* y, int64_t n) override {
    if (n < kMinParallelElements) {
      kernels_.add(x, y, n);
      return;
    }
    const int64_t chunk = ChunkFor(n);
#pragma omp parallel for num_threads(threads_) schedule(static)
    for (int64_t i = 0; i < n; i += chunk) kernels_.add(x + i, y + i, std::min(chunk, n - i));
  }

 private:
  // One contiguous, 16-float aligned chunk per thread.
  int64_t ChunkFor(int64_t n) const { return (n / threads_ + 16) / 16 * 16; }

  static constexpr std::align_val_t kAlign{64};
  struct Free {
    void operator()(uint8_t* p) const { ::operator delete(p, kAlign); }
  };

  const KernelTable& kernels_;
  const int threads_;
  MatMulRunner matmul_;
  const std::string name_;
  std::vector<std::unique_ptr<uint8_t, Free>> memory_;  // every Allocate, until the end
};

}  // namespace

std::unique_ptr<Backend> MakeCpuBackendWithIsa(const CpuBackendOptions& options, Isa isa) {
  TANDEM_CHECK(options.threads >= 0, "thread count is 0 (all cores) or positive");
  const int threads = options.threads == 0 ? omp_get_num_procs() : options.threads;
  return std::make_unique<CpuBackend>(Kernels(isa), threads);
}

}  // namespace cpu

std::unique_ptr<Backend> MakeCpuBackend(const CpuBackendOptions& options) {
  if (options.isa.empty()) return cpu::MakeCpuBackendWithIsa(options, cpu::DetectIsa());
  const std::optional<cpu::Isa> isa = cpu::IsaFromName(options.isa);
  TANDEM_CHECK(isa.has_value(), "CpuBackendOptions::isa names a kernel table") << options.isa;
  return cpu::MakeCpuBackendWithIsa(options, *isa);
}

}  // namespace tandem::engine
