// KV bytes in and out of a CUDA backend's pool, and moved within it: the
// Backend's ReadBlocks / WriteBlocks (whole blocks through a pinned staging
// buffer, every copy queued and then one wait) and MoveKvSlots (a SHIFT
// window's slots gathered, re-rotated and scattered on the device, only the
// slot lists crossing). Outside steps; engine-thread only, on the backend's
// stream.
#ifndef TANDEM_ENGINE_CUDA_KV_MOVES_H_
#define TANDEM_ENGINE_CUDA_KV_MOVES_H_

#include <cstdint>
#include <span>

#include "engine/cuda/backend_kernels.h"
#include "engine/cuda/device.h"
#include "engine/cuda/kernels.h"
#include "engine/model/backend.h"

namespace tandem::engine::cuda {

// A layer view of the pool as the kernels take it (f32 or f16 KV).
KvRows RowsOf(const PagedKvView& kv);

class KvMoves {
 public:
  explicit KvMoves(const Stream& stream) : stream_(stream) {}

  // Backend::ReadBlocks and WriteBlocks.
  void Read(const KvPoolView& pool, std::span<const BlockId> ids, std::span<uint8_t> out);
  void Write(const KvPoolView& pool, std::span<const BlockId> ids,
             std::span<const KvBlockBytes> blocks);
  // Backend::MoveKvSlots, keys rotated by `delta` with `rope`'s tables in
  // `style`.
  void Move(std::span<const PagedKvView> layers, int32_t head_dim, std::span<const int64_t> src,
            std::span<const int64_t> dst, int32_t delta, const RopeTable& rope, RopeStyle style);

 private:
  const Stream& stream_;
  PinnedBuffer staging_;  // Read / Write
  DeviceBuffer move_;     // Move's device staging (grows)
  PinnedBuffer host_move_;
};

}  // namespace tandem::engine::cuda

#endif  // TANDEM_ENGINE_CUDA_KV_MOVES_H_
