// A Backend for tests that keeps the backend seam honest: the CPU backend's
// kernels over one arena of memory of its own that is PROT_NONE outside its
// own calls, so a host read of "device" memory behind the Backend's back
// faults. Every address an op receives must lie in the arena (checked), and
// it counts the bytes that cross host <-> device. Linked into the engine's
// test binaries; MakeTestBackend (tests/engine/test_backends.h) picks it.
// Engine-thread only, like every Backend.
#ifndef TANDEM_TESTS_ENGINE_FAKE_DEVICE_BACKEND_H_
#define TANDEM_TESTS_ENGINE_FAKE_DEVICE_BACKEND_H_

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/model/backend.h"

namespace tandem::engine::testing {

// Bytes that crossed between host and fake device.
struct DeviceTraffic {
  int64_t uploaded_bytes = 0;
  int64_t downloaded_bytes = 0;
  // Batched KV block copies: ReadBlocks and WriteBlocks calls.
  int64_t block_reads = 0;
  int64_t block_writes = 0;
  int64_t total() const { return uploaded_bytes + downloaded_bytes; }
};

class FakeDeviceBackend final : public Backend {
 public:
  // An arena of `arena_bytes` (reserved, committed as written); the kernels
  // run with `cpu` options.
  FakeDeviceBackend(int64_t arena_bytes, const CpuBackendOptions& cpu);
  ~FakeDeviceBackend() override;
  FakeDeviceBackend(const FakeDeviceBackend&) = delete;
  FakeDeviceBackend& operator=(const FakeDeviceBackend&) = delete;

  // Since construction or the last ResetTraffic: the weights' upload at
  // start counts, so reset before measuring a step.
  DeviceTraffic traffic() const { return traffic_; }
  void ResetTraffic() { traffic_ = {}; }
  // Whether [p, p + bytes) lies in the arena's allocated part.
  bool Contains(const void* p, int64_t bytes) const;

  std::string_view name() const override { return name_; }
  int threads() const override { return cpu_->threads(); }
  absl::StatusOr<DevicePtr<uint8_t>> Allocate(int64_t bytes, std::string_view what) override;
  void Upload(DevicePtr<uint8_t> dst, std::span<const uint8_t> src) override;
  void Download(DevicePtr<const uint8_t> src, std::span<uint8_t> dst) override;
  void Synchronize() override {}
  absl::StatusOr<DeviceWeights> PrepareWeights(const ModelWeights& weights) override;
  absl::Status PrepareRope(const RopeTable& rope) override;
  absl::Status ReserveStep(const StepLimits& limits) override;
  void BeginStep(const StepMetadata& step) override;
  void Embed(const DeviceMatrix& table, DevicePtr<float> x) override;
  void MatMul(const DeviceMatrix& w, DevicePtr<const float> x, int64_t n_tokens,
              DevicePtr<float> y) override;
  void AddBias(DevicePtr<float> x, DevicePtr<const float> bias, int64_t n_rows,
               int64_t dim) override;
  void Rope(DevicePtr<float> x, int32_t n_heads, int32_t head_dim) override;
  void StoreKv(const PagedKvView& kv, DevicePtr<const float> k,
               DevicePtr<const float> v) override;
  void RmsNorm(DevicePtr<const float> x, DevicePtr<const float> weight, int64_t n_tokens,
               int64_t dim, float eps, DevicePtr<float> y) override;
  void SwiGlu(DevicePtr<const float> gate, DevicePtr<const float> up, int64_t n,
              DevicePtr<float> out) override;
  void Add(DevicePtr<float> x, DevicePtr<const float> y, int64_t n) override;
  void PagedAttention(const AttentionOp& op) override;
  void GatherRows(DevicePtr<const float> x, int64_t dim, DevicePtr<float> out) override;
  void ReduceLogits(DevicePtr<const float> logits, int32_t n_vocab,
                    std::span<LogitsSummary> out) override;
  void ReadBlocks(const KvPoolView& pool, std::span<const BlockId> ids,
                  std::span<uint8_t> out) override;
  void WriteBlocks(const KvPoolView& pool, std::span<const BlockId> ids,
                   std::span<const KvBlockBytes> blocks) override;
  void MoveKvSlots(std::span<const PagedKvView> layers, int32_t head_dim,
                   std::span<const int64_t> src, std::span<const int64_t> dst,
                   int32_t delta) override;

 private:
  class Open;  // the arena readable and writable for one call

  // Checks that `bytes` from `p` lie in the arena; `what` names the operand.
  void Expect(const void* p, int64_t bytes, const char* what) const;
  void ExpectBlock(const KvPoolView& pool, BlockId id) const;
  // Host bytes to device memory, counted (Upload without the checks' guard).
  DevicePtr<uint8_t> CopyIn(std::span<const uint8_t> bytes, std::string_view what);
  const StepMetadata& step() const;

  const std::string name_;
  std::unique_ptr<Backend> cpu_;  // the kernels
  uint8_t* arena_ = nullptr;
  int64_t capacity_ = 0;
  int64_t used_ = 0;
  int depth_ = 0;  // nesting of Open
  DeviceTraffic traffic_;
  // The step's metadata: packed on the host, uploaded whole into
  // step_buffer_, read back from the arena into step_ for the kernels.
  DevicePtr<uint8_t> step_buffer_;
  int64_t step_capacity_ = 0;
  StepLimits limits_;
  std::vector<uint8_t> packed_;
  StepMetadata step_;
  bool has_step_ = false;
};

}  // namespace tandem::engine::testing

#endif  // TANDEM_TESTS_ENGINE_FAKE_DEVICE_BACKEND_H_
