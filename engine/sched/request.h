// The engine's request and result value types: what a caller submits
// (GenerationRequest), what each step reports (StepOutput: one TokenEvent
// per sequence that produced a token or ended, and the block events a
// worker publishes to the block index), and the engine's counters. Plain
// values; thread-compatible.
#ifndef TANDEM_ENGINE_SCHED_REQUEST_H_
#define TANDEM_ENGINE_SCHED_REQUEST_H_

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/kv/block_hash.h"
#include "engine/kv/kv_snapshot.h"
#include "engine/kv/kv_tier.h"
#include "engine/sample/sampling_params.h"

namespace tandem::engine {

enum class FinishReason {
  kNone,       // still running
  kLength,     // max_tokens reached, or the sequence filled max_context
  kEos,        // an end-of-generation token was sampled
  kStop,       // one of the request's stop_token_ids was sampled
  kCancelled,  // Cancel() was called
};

// `sampling`, `top_logprobs` and `prompt_logprobs` are the SamplingRequest
// base's: a worker converts them from its RPC's proto in one piece. With
// prompt_logprobs >= 0 they are reported with the first generated token
// (TokenEvent::prompt_logprobs), and the whole prompt is computed (no prefix
// cache, no pulled prefix), in chunks of at most kPromptLogprobsChunk tokens,
// whose logits rows are reduced to O(k) per position as they are made.
struct GenerationRequest : SamplingRequest {
  std::vector<int32_t> prompt;  // token ids, BOS included when wanted
  int32_t max_tokens = 16;      // >= 1; counts `generated` too
  bool ignore_eos = false;
  // On finish, copy the sequence's KV (its computed positions) into the
  // finishing TokenEvent's `kv` before the blocks are freed (prefill side
  // of a disaggregated request).
  bool export_kv = false;
  // An export_kv sequence whose hand-off need not carry a draft model's KV
  // (the decode side will not propose with the draft at once): its draft is
  // put off as any other sequence's, and the snapshot says how far the
  // draft's KV reaches (KvSnapshot::draft_tokens).
  bool export_without_draft = false;
  // Tokens already generated for this request elsewhere (a stream resumed
  // on another worker): they follow the prompt, are computed with it, count
  // against max_tokens, and the sampler skips the draws that made them, so
  // the continuation equals an uninterrupted run.
  std::vector<int32_t> generated;
  // A prefix of the prompt's KV pulled from another worker (full blocks from
  // position 0, fewer positions than the prompt): at admission the blocks
  // this engine's cache lacks are copied in instead of computed.
  std::shared_ptr<const KvSnapshot> prefix_kv = nullptr;
  // A session's turn: when the sequence ends (however it ends), its full
  // blocks stay pinned under this key, replacing the key's previous pin, so
  // the session's next turn finds them in the prefix cache. Empty: none.
  std::string pin_key;
  // A SHIFT session's turn (WINDOW_POLICY_SHIFT; with pin_key): the
  // sequence's KV is private, never hashed into the prefix cache or
  // reported, and pinned whole when it ends. It starts from the KV pinned
  // under pin_key: of the pinned tokens, [shift_from, shift_from +
  // shift_count) are dropped and the keys after them rotated back by
  // shift_count positions (RoPE composes), as far as the pinned tokens so
  // shifted agree with the prompt; the rest of the prompt is computed.
  bool private_kv = false;
  int32_t shift_from = 0;
  int32_t shift_count = 0;
  // A rolling window (a session's): when the sequence would hold more than
  // roll_window tokens of KV, its oldest whole block after the first
  // roll_keep tokens is dropped (the tokens after it keep their positions;
  // from then on the sequence's KV is its own, never hashed). 0: off.
  int32_t roll_window = 0;
  int32_t roll_keep = 0;
  // Salts every block hash of the sequence (a tenant's; 0: none): its
  // blocks are found and shared only by requests with the same salt.
  uint64_t cache_salt = 0;
};

// Prompt tokens per step, over all requests, whose logits rows are kept for
// prompt logprobs: a step holds at most this many such rows beyond one per
// sequence.
inline constexpr int32_t kPromptLogprobsChunk = 64;

struct TokenEvent {
  int64_t seq_id = 0;
  SampledToken token;
  // On the first generated token of a request with prompt_logprobs >= 0:
  // entry i is prompt token i + 1 (its logprob under the raw logits of the
  // positions before it, and the top alternatives, as SampledToken).
  std::vector<SampledToken> prompt_logprobs = {};
  FinishReason finish = FinishReason::kNone;
  // Leading prompt tokens whose KV the prefix cache supplied (a multiple of
  // the block size); the same on every event of a sequence.
  int32_t cached_tokens = 0;
  // Set on the finishing event of a sequence added with export_kv.
  std::shared_ptr<const KvSnapshot> kv = nullptr;
  // Speculation in the step that produced this event (on the first event of
  // the step's tokens for the sequence; 0 elsewhere): tokens proposed, and
  // of them those the model kept.
  int32_t spec_proposed = 0;
  int32_t spec_accepted = 0;
};

// A change in the full blocks this worker holds, for the block index:
// `stored` when a block fills or lands in a tier (its hash chains from
// `parent_hash` when known), `removed` when it leaves that tier. The
// engine reports its pool's (kDevice); the lower tiers report their own.
struct BlockEvent {
  enum class Kind { kStored, kRemoved };
  Kind kind = Kind::kStored;
  BlockHash hash;
  BlockHash parent_hash;  // kStored only
  KvTier tier = KvTier::kDevice;
};

// What one step produced.
struct StepOutput {
  std::vector<TokenEvent> tokens;
  std::vector<BlockEvent> blocks;
};

struct EngineStats {
  int32_t running = 0;
  int32_t waiting = 0;
  int32_t blocks_used = 0;
  int32_t blocks_free = 0;
  int32_t blocks_total = 0;
  int32_t blocks_cached = 0;  // free blocks that still hold a hashed block
  int64_t block_bytes = 0;    // one KV block, all layers
  int64_t preemptions = 0;
  // Prefix cache since start: prompt tokens of sequences admitted without
  // imported KV, and those whose KV came from the cache.
  int64_t prefix_queried_tokens = 0;
  int64_t prefix_hit_tokens = 0;
  // Of prefix_hit_tokens, those each tier supplied (KvTier order).
  std::array<int64_t, kNumKvTiers> prefix_hit_tokens_by_tier = {};
  // Delta transfers whose leading blocks were evicted between the fetch and
  // admission: their prompt was computed from where the cache ended.
  int64_t delta_fallbacks = 0;
  // Prompt tokens whose KV came from a pulled prefix (prefix_kv).
  int64_t prefix_pulled_tokens = 0;
  // Sessions' kept KV: keys pinned, the blocks their pins hold (a block
  // shared by two pins counted twice), and pins dropped to bound them or to
  // make room for waiting sequences.
  int32_t pins = 0;
  int32_t blocks_pinned = 0;
  int64_t pins_dropped = 0;
  // Speculation: tokens proposed, and of them those the model kept (every
  // method); of those, the draft model's.
  int64_t spec_proposed = 0;
  int64_t spec_accepted = 0;
  int64_t spec_draft_proposed = 0;
  int64_t spec_draft_accepted = 0;
  // Tokens the draft model computed KV for (prompts and output; not those
  // that came computed with a hand-off, a pulled prefix or the cache).
  int64_t draft_computed_tokens = 0;
  // Hand-offs the engine could admit now and still propose for with the
  // draft model from their first step: its speculation's max_batch less
  // its running and waiting sequences (at least 0), -1 for any number
  // (max_batch 0), 0 without a draft or when the draft is not its default
  // method. Gateways ask prefill workers for the draft's KV only while the
  // decode workers have room (BlockEventBatch.draft_kv_room).
  int32_t draft_kv_room = 0;
  // Under an inter-token latency target (EngineOptions::itl_target_s): the
  // most tokens the last step could hold and the most sequences it could
  // run (0: no target).
  int32_t itl_step_tokens = 0;
  int32_t itl_max_running = 0;
};

}  // namespace tandem::engine

#endif  // TANDEM_ENGINE_SCHED_REQUEST_H_
