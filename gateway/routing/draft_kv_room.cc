#include "gateway/routing/draft_kv_room.h"

namespace tandem::gateway {

bool DecodeRoomForDraftKv(std::span<const std::optional<int32_t>> rooms, int64_t prefilling) {
  int64_t room = 0;
  for (const std::optional<int32_t>& r : rooms) {
    if (!r.has_value() || *r < 0) return true;
    room += *r;
  }
  return prefilling <= room;
}

}  // namespace tandem::gateway
