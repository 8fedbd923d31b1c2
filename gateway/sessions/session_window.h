// A session's next turn within its rolling window (WINDOW_POLICY_REPREFILL):
// the conversation (system prompt, the turns held, the new user message)
// rendered with the chat template and tokenized as GenerateRequest.messages
// is, with the oldest whole turns after the kept prefix evicted until the
// prompt and the reply fit the window. The prompt is exactly what a fresh
// stateless request on the truncated conversation sends. Pure functions;
// thread-safe.
#ifndef TANDEM_GATEWAY_SESSIONS_SESSION_WINDOW_H_
#define TANDEM_GATEWAY_SESSIONS_SESSION_WINDOW_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/tokenizer/chat_template.h"
#include "engine/tokenizer/tokenizer.h"
#include "tandem/v1/worker.pb.h"

namespace tandem::gateway {

// The conversation a record holds, as chat messages: the system prompt (when
// not empty), then its turns.
std::vector<engine::ChatMessage> SessionMessages(const tandem::v1::SessionRecord& record);

// Tokens of `messages` rendered as a prompt (with the assistant's opening
// when `add_generation_prompt`), as ValidateGenerateRequest tokenizes them.
absl::StatusOr<std::vector<int32_t>> RenderTokens(const std::vector<engine::ChatMessage>& messages,
                                                  bool add_generation_prompt,
                                                  const engine::Tokenizer& tokenizer,
                                                  const engine::ChatTemplate& chat);

struct TurnPlan {
  // The prompt: the truncated conversation with the new user message last.
  std::vector<int32_t> prompt_ids;
  // The record's turns left after eviction (user, assistant, ...), without
  // the new message.
  std::vector<tandem::v1::ChatMessage> kept_turns;
  // Whole turns (a user message and its reply) this turn evicted, and how
  // many tokens shorter the prompt became for it.
  int32_t turns_evicted = 0;
  int64_t tokens_evicted = 0;
  // The reply's room: the request's max_tokens, clamped to what the window
  // leaves after the prompt.
  int32_t max_tokens = 0;
  // WINDOW_POLICY_SHIFT: the span of the KV's tokens this turn cuts out
  // (the evicted turns), and where each held turn starts in the prompt
  // (this one last).
  int32_t shift_from = 0;
  int32_t shift_count = 0;
  std::vector<int32_t> turn_offsets;
};

// Plans the turn `message` with up to `max_tokens` of reply, of which it
// makes room for at most a quarter of the window (a longer reply rolls in the
// window as it grows: `can_roll`; without it the reply is clamped to the
// room left). When prompt + that room would overflow window.max_tokens, turns are evicted oldest
// first, never one that starts inside the window's keep_first tokens, until
// prompt + max_tokens fits `evict_to` (in (0, 1]) of the window: evicting
// past what this turn needs leaves room for the next turns, whose prompts
// then extend this one and reuse its KV instead of computing the window
// again after every eviction.
// InvalidArgument naming `message` when even the kept prefix and the new
// message leave no room for one token of reply.
absl::StatusOr<TurnPlan> PlanTurn(const tandem::v1::SessionRecord& record,
                                  const std::string& message, int32_t max_tokens,
                                  const engine::Tokenizer& tokenizer,
                                  const engine::ChatTemplate& chat, double evict_to = 1.0,
                                  bool can_roll = false);

// The same for a WINDOW_POLICY_SHIFT session: the prompt is the token ids
// its KV holds (record.kv_token_ids) with the evicted turns' span cut out,
// then the new turn's tokens (the text its rendering adds after the
// conversation so far), so the KV holder computes only those and re-rotates
// the keys after the cut. FailedPrecondition naming window.policy when the
// chat template re-renders earlier turns instead of extending the text.
absl::StatusOr<TurnPlan> PlanShiftTurn(const tandem::v1::SessionRecord& record,
                                       const std::string& message, int32_t max_tokens,
                                       const engine::Tokenizer& tokenizer,
                                       const engine::ChatTemplate& chat, double evict_to = 1.0,
                                       bool can_roll = false);

}  // namespace tandem::gateway

#endif  // TANDEM_GATEWAY_SESSIONS_SESSION_WINDOW_H_
