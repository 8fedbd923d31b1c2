// Whether a prompt's hand-off should carry a draft model's KV: the decode
// workers report how many more hand-offs they would propose for with their
// draft from the first step (BlockEventBatch.draft_kv_room), and a gateway
// asks its prefill workers for the draft's KV only while its own prompts in
// prefill fit in that room (PrefillRequest.skip_draft_kv otherwise).
#ifndef TANDEM_GATEWAY_ROUTING_DRAFT_KV_ROOM_H_
#define TANDEM_GATEWAY_ROUTING_DRAFT_KV_ROOM_H_

#include <cstdint>
#include <optional>
#include <span>

namespace tandem::gateway {

// Whether the decode workers have room for one more hand-off that proposes
// with their draft model from its first step: `rooms` as each reachable
// decode worker last reported it (-1: any number; nullopt: not heard from,
// counted as any), against `prefilling`, this gateway's prompts in prefill
// (the one asking included), each of which is a hand-off soon.
bool DecodeRoomForDraftKv(std::span<const std::optional<int32_t>> rooms, int64_t prefilling);

}  // namespace tandem::gateway

#endif  // TANDEM_GATEWAY_ROUTING_DRAFT_KV_ROOM_H_
