#include "engine/cuda/kv_moves.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "common/check.h"

namespace tandem::engine::cuda {

KvRows RowsOf(const PagedKvView& kv) {
  TANDEM_CHECK(kv.dtype == GgmlType::kF32 || kv.dtype == GgmlType::kF16, "KV is f32 or f16");
  return {.base = kv.base.backend_address(),
          .block_bytes = kv.block_bytes,
          .k_offset = kv.k_offset,
          .v_offset = kv.v_offset,
          .block_size = kv.block_size,
          .kv_dim = kv.kv_dim,
          .f16 = kv.dtype == GgmlType::kF16};
}

void KvMoves::Read(const KvPoolView& pool, std::span<const BlockId> ids,
                   std::span<uint8_t> out) {
  TANDEM_CHECK(static_cast<int64_t>(out.size()) ==
                   static_cast<int64_t>(ids.size()) * pool.block_bytes,
               "ReadBlocks' staging holds exactly the blocks");
  if (ids.empty()) return;
  CheckInStep(staging_.Reserve(static_cast<int64_t>(out.size())), "ReadBlocks staging");
  for (size_t i = 0; i < ids.size(); ++i) {
    CheckInStep(cudaMemcpyAsync(staging_.data() + i * pool.block_bytes,
                                pool.base.backend_address() + int64_t{ids[i]} * pool.block_bytes,
                                static_cast<size_t>(pool.block_bytes), cudaMemcpyDeviceToHost,
                                stream_.stream()),
                "ReadBlocks");
  }
  CheckInStep(stream_.Synchronize(), "ReadBlocks");
  std::memcpy(out.data(), staging_.data(), out.size());
}

void KvMoves::Write(const KvPoolView& pool, std::span<const BlockId> ids,
                    std::span<const KvBlockBytes> blocks) {
  TANDEM_CHECK(ids.size() == blocks.size(), "one block of bytes per id");
  if (ids.empty()) return;
  // The last copies out of the staging must be done before it is rewritten.
  CheckInStep(stream_.Synchronize(), "WriteBlocks");
  CheckInStep(staging_.Reserve(static_cast<int64_t>(ids.size()) * pool.block_bytes),
              "WriteBlocks staging");
  for (size_t i = 0; i < ids.size(); ++i) {
    TANDEM_CHECK(static_cast<int64_t>(blocks[i].size()) == pool.block_bytes,
                 "a written block is exactly one block");
    blocks[i].CopyTo(staging_.data() + i * pool.block_bytes);
    CheckInStep(cudaMemcpyAsync(pool.base.backend_address() + int64_t{ids[i]} * pool.block_bytes,
                                staging_.data() + i * pool.block_bytes,
                                static_cast<size_t>(pool.block_bytes), cudaMemcpyHostToDevice,
                                stream_.stream()),
                "WriteBlocks");
  }
  CheckInStep(stream_.Synchronize(), "WriteBlocks");
}

// Layer by layer: every source row gathered (keys to f32), the keys rotated
// by the delta's own table, then scattered.
void KvMoves::Move(std::span<const PagedKvView> layers, int32_t head_dim,
                   std::span<const int64_t> src, std::span<const int64_t> dst, int32_t delta,
                   const RopeTable& rope, RopeStyle style) {
  TANDEM_CHECK(src.size() == dst.size(), "one destination slot per source slot");
  if (src.empty() || layers.empty()) return;
  const int64_t n = static_cast<int64_t>(src.size());
  int32_t kv_dim = 0;
  for (const PagedKvView& kv : layers) kv_dim = std::max(kv_dim, kv.kv_dim);
  const int32_t n_rot = rope.n_rot();
  const int64_t half = n_rot / 2;
  // Device staging: slots (src, dst), zero positions, the delta's cos and
  // sin, the keys as f32 and the values as bytes (f32 at most).
  const int64_t slot_bytes = 2 * n * 8;
  const int64_t pos_bytes = n * 4;
  const int64_t table_bytes = 2 * half * 4;
  const int64_t key_bytes = n * kv_dim * 4;
  const int64_t need = slot_bytes + pos_bytes + table_bytes + 2 * key_bytes;
  if (move_.bytes() < static_cast<size_t>(need)) {
    CheckInStep(stream_.Synchronize(), "MoveKvSlots");
    absl::StatusOr<DeviceBuffer> b = DeviceBuffer::Allocate(static_cast<size_t>(need));
    CheckInStep(b.status(), "MoveKvSlots staging");
    move_ = *std::move(b);
  }
  CheckInStep(host_move_.Reserve(slot_bytes + table_bytes), "MoveKvSlots staging");
  uint8_t* host = host_move_.data();
  std::memcpy(host, src.data(), n * 8);
  std::memcpy(host + n * 8, dst.data(), n * 8);
  auto* cos = reinterpret_cast<float*>(host + slot_bytes);
  rope.DeltaTables(delta, cos, cos + half);
  uint8_t* dev = move_.as<uint8_t>();
  CheckInStep(cudaMemcpyAsync(dev, host, slot_bytes, cudaMemcpyHostToDevice, stream_.stream()),
              "MoveKvSlots slots");
  CheckInStep(cudaMemcpyAsync(dev + slot_bytes + pos_bytes, host + slot_bytes, table_bytes,
                              cudaMemcpyHostToDevice, stream_.stream()),
              "MoveKvSlots tables");
  CheckInStep(cudaMemsetAsync(dev + slot_bytes, 0, pos_bytes, stream_.stream()), "MoveKvSlots");
  const auto* src_dev = reinterpret_cast<const int64_t*>(dev);
  const auto* dst_dev = src_dev + n;
  const auto* positions = reinterpret_cast<const int32_t*>(dev + slot_bytes);
  const auto* delta_cos = reinterpret_cast<const float*>(dev + slot_bytes + pos_bytes);
  auto* keys = reinterpret_cast<float*>(dev + slot_bytes + pos_bytes + table_bytes);
  auto* values = reinterpret_cast<uint8_t*>(keys) + key_bytes;
  for (const PagedKvView& kv : layers) {
    const KvRows rows = RowsOf(kv);
    CheckInStep(LaunchGatherKvRows(rows, src_dev, n, keys, values, stream_.stream()),
                "MoveKvSlots");
    if (delta != 0) {
      CheckInStep(LaunchRope(keys, positions, n, kv.kv_dim / head_dim, head_dim, n_rot, style,
                             delta_cos, delta_cos + half, stream_.stream()),
                  "MoveKvSlots rotation");
    }
    CheckInStep(LaunchScatterKvRows(rows, dst_dev, n, keys, values, stream_.stream()),
                "MoveKvSlots");
  }
  // The pinned slot lists are rewritten by the next call.
  CheckInStep(stream_.Synchronize(), "MoveKvSlots");
}

}  // namespace tandem::engine::cuda
