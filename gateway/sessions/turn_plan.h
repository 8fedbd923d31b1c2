// A session's turn as pure functions of its record and the Chat request:
// ValidateChatRequest checks the request's own fields (before the record is
// read), PlanChatTurn decides the window (session_window.h), the Generate
// request and where the turn runs, and CommitChatTurn gives the record
// after it. GenerationService::Chat (session_rpcs.cc) only wires them to
// the session store and a GenerateCall. Pure functions; thread-safe.
#ifndef TANDEM_GATEWAY_SESSIONS_TURN_PLAN_H_
#define TANDEM_GATEWAY_SESSIONS_TURN_PLAN_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/tokenizer/chat_template.h"
#include "engine/tokenizer/tokenizer.h"
#include "gateway/calls/generate_call.h"
#include "gateway/calls/validated_request.h"
#include "gateway/sessions/session_window.h"
#include "tandem/v1/generation.pb.h"
#include "tandem/v1/worker.pb.h"

namespace tandem::gateway {

// What planning a turn needs from the gateway; the pointers outlive every
// turn planned with them.
struct TurnOptions {
  const engine::Tokenizer* tokenizer = nullptr;
  const engine::ChatTemplate* chat_template = nullptr;
  std::string model_name;
  GatewayLimits limits;
  // A turn that overflows its window evicts down to this fraction of it.
  double evict_to = 1.0;
  // A REPREFILL turn whose KV holder lacks at most this many of its prompt
  // tokens is prefilled there (0: never).
  int32_t local_prefill_tokens = 0;
  // The workers' KV block size; nullopt while no worker has reported it
  // (then no reply rolls and no turn is prefilled locally).
  std::optional<int32_t> block_size;
  // How many leading blocks of `prompt` (salted with `cache_salt`) decode
  // worker `holder` has reported, -1 when it is not known reachable.
  // Null: never known.
  std::function<int32_t(const std::string& holder, std::span<const int32_t> prompt,
                        uint64_t cache_salt)>
      held_blocks;
};

// InvalidArgument naming session_id unless it is 1 to 128 bytes.
absl::Status ValidateSessionId(const std::string& id);

// The Chat request's own fields: session_id, message (not empty, within
// limits.max_prompt_bytes), max_tokens (>= 0). InvalidArgument naming the
// field. Its sampling, stop and top_logprobs are checked with the turn's
// prompt (PlanChatTurn), as a Generate request's are.
absl::Status ValidateChatRequest(const tandem::v1::ChatRequest& request,
                                 const GatewayLimits& limits);

struct ChatTurnPlan {
  // The window decision: the prompt, the turns kept and evicted, the
  // reply's room, a SHIFT turn's cut.
  TurnPlan window;
  // The user's message, appended to the record with the reply.
  std::string message;
  // The turn as a Generate request (the window's prompt with the Chat
  // request's sampling, stop strings, top_logprobs, ignore_eos and the
  // tenant's cache salt), or InvalidArgument naming the Chat field that
  // makes it invalid: the turn is planned either way and ends with it.
  absl::StatusOr<ValidatedRequest> request;
  // Where and how the turn runs (commit left unset: the caller's).
  SessionTurn turn;
};

// Plans the turn `request` (which passed ValidateChatRequest) on `record`.
// Errors from the window (session_window.h): InvalidArgument naming message
// when the turn cannot fit the window, FailedPrecondition naming
// window.policy for a SHIFT session whose chat template re-renders.
absl::StatusOr<ChatTurnPlan> PlanChatTurn(const tandem::v1::SessionRecord& record,
                                          const tandem::v1::ChatRequest& request,
                                          const TurnOptions& options);

// How the turn went.
struct TurnResult {
  std::string reply;               // the text sent
  std::vector<int32_t> reply_ids;  // the ids of the tokens sent
  // The decode worker that produced the reply ("" when the prefill's token
  // ended it): the session's KV holder from now on.
  std::string decode_address;
};

struct CommittedTurn {
  // The record after the turn: version + 1, the kept turns then this one,
  // the eviction counters, the tokens held (the conversation's, at most the
  // window: a reply that rolled leaves the window full) and the KV holder.
  tandem::v1::SessionRecord record;
  // The session fields the turn's last message adds to its usage.
  tandem::v1::Usage usage;
};

// The record after `plan` ran on `record` and produced `result`.
CommittedTurn CommitChatTurn(const tandem::v1::SessionRecord& record, const ChatTurnPlan& plan,
                             const TurnResult& result, const TurnOptions& options);

}  // namespace tandem::gateway

#endif  // TANDEM_GATEWAY_SESSIONS_TURN_PLAN_H_
