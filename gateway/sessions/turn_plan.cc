#include "gateway/sessions/turn_plan.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "gateway/api_keys.h"
#include "rpc/convert.h"

namespace tandem::gateway {
namespace {

absl::Status FieldError(const std::string& field, const std::string& message) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", message));
}

}  // namespace

absl::Status ValidateSessionId(const std::string& id) {
  if (id.empty()) return FieldError("session_id", "empty");
  if (id.size() > 128) return FieldError("session_id", "longer than 128 bytes");
  return absl::OkStatus();
}

absl::Status ValidateChatRequest(const tandem::v1::ChatRequest& request,
                                 const GatewayLimits& limits) {
  RETURN_IF_ERROR(ValidateSessionId(request.session_id()));
  if (request.message().empty()) return FieldError("message", "empty");
  if (static_cast<int64_t>(request.message().size()) > limits.max_prompt_bytes) {
    return FieldError("message", absl::StrCat(request.message().size(),
                                              " bytes exceed the limit of ",
                                              limits.max_prompt_bytes));
  }
  if (request.max_tokens() < 0) {
    return FieldError("max_tokens",
                      absl::StrCat("must be >= 0 (0 = unset), got ", request.max_tokens()));
  }
  return absl::OkStatus();
}

absl::StatusOr<ChatTurnPlan> PlanChatTurn(const tandem::v1::SessionRecord& record,
                                          const tandem::v1::ChatRequest& request,
                                          const TurnOptions& options) {
  const bool shift = record.window().policy() == tandem::v1::WINDOW_POLICY_SHIFT;
  // The decode worker rolls a reply that outgrows the window (it needs two
  // blocks after the kept prefix; the block size is the workers').
  const int32_t window = record.window().max_tokens();
  const int32_t keep = record.window().keep_first();
  const bool can_roll =
      options.block_size.has_value() && window >= keep + 2 * *options.block_size + 1;
  const int32_t max_tokens =
      request.max_tokens() > 0 ? request.max_tokens() : options.limits.default_max_tokens;
  const engine::Tokenizer& tokenizer = *options.tokenizer;
  const engine::ChatTemplate& chat = *options.chat_template;
  ChatTurnPlan plan;
  ASSIGN_OR_RETURN(plan.window,
                   shift ? PlanShiftTurn(record, request.message(), max_tokens, tokenizer, chat,
                                         options.evict_to, can_roll)
                         : PlanTurn(record, request.message(), max_tokens, tokenizer, chat,
                                    options.evict_to, can_roll));
  plan.message = request.message();

  tandem::v1::GenerateRequest generate;
  generate.mutable_prompt_token_ids()->Assign(plan.window.prompt_ids.begin(),
                                              plan.window.prompt_ids.end());
  generate.set_max_tokens(plan.window.max_tokens);
  rpc::ChatSamplingToGenerate(request, &generate);
  *generate.mutable_stop() = request.stop();
  generate.set_ignore_eos(request.ignore_eos());
  plan.request = ValidateGenerateRequest(generate, tokenizer, options.model_name, options.limits,
                                         &chat);
  const uint64_t salt = TenantSalt(record.tenant());
  if (plan.request.ok()) plan.request->cache_salt = salt;

  SessionTurn& turn = plan.turn;
  turn.session_id = record.session_id();
  turn.kv_holder = record.kv_holder();
  if (can_roll) {
    turn.roll_window = window;
    turn.roll_keep = keep;
  }
  if (shift) {
    // The KV is the holder's alone (the index knows none of it): the turn
    // goes there, or is rebuilt from its tokens on another worker.
    turn.local_prefill = !record.kv_holder().empty();
    turn.private_kv = true;
    turn.shift_from = plan.window.shift_from;
    turn.shift_count = plan.window.shift_count;
  } else if (plan.request.ok() && options.block_size.has_value()) {
    // Few tokens to compute: the holder prefills them itself. Otherwise a
    // prefill worker does, pulling the blocks the holder keeps.
    const std::vector<int32_t>& prompt = plan.request->prompt_ids;
    const int32_t held = options.held_blocks != nullptr
                             ? options.held_blocks(record.kv_holder(), prompt, salt)
                             : -1;
    const int64_t to_compute =
        static_cast<int64_t>(prompt.size()) - int64_t{held} * *options.block_size;
    turn.local_prefill = held >= 0 && options.local_prefill_tokens > 0 &&
                         to_compute <= options.local_prefill_tokens;
    turn.holder_blocks = std::max(held, 0);
  }
  return plan;
}

CommittedTurn CommitChatTurn(const tandem::v1::SessionRecord& record, const ChatTurnPlan& plan,
                             const TurnResult& result, const TurnOptions& options) {
  const TurnPlan& window = plan.window;
  CommittedTurn out;
  tandem::v1::SessionRecord& next = out.record;
  next = record;
  next.set_version(record.version() + 1);
  next.clear_turns();
  for (const tandem::v1::ChatMessage& m : window.kept_turns) *next.add_turns() = m;
  tandem::v1::ChatMessage* user = next.add_turns();
  user->set_role("user");
  user->set_content(plan.message);
  tandem::v1::ChatMessage* assistant = next.add_turns();
  assistant->set_role("assistant");
  assistant->set_content(result.reply);
  next.set_turns_evicted(record.turns_evicted() + window.turns_evicted);
  next.set_tokens_evicted(record.tokens_evicted() + window.tokens_evicted);
  if (record.window().policy() == tandem::v1::WINDOW_POLICY_SHIFT) {
    // What the holder's KV is built from: the prompt, then the reply's
    // tokens (an end-of-generation token left out: the template's own end
    // of turn follows in the next turn's tokens).
    next.mutable_kv_token_ids()->Assign(window.prompt_ids.begin(), window.prompt_ids.end());
    std::span<const int32_t> reply_ids = result.reply_ids;
    if (!reply_ids.empty() && options.tokenizer->IsEog(reply_ids.back())) {
      reply_ids = reply_ids.first(reply_ids.size() - 1);
    }
    next.mutable_kv_token_ids()->Add(reply_ids.begin(), reply_ids.end());
    next.mutable_turn_token_offsets()->Assign(window.turn_offsets.begin(),
                                              window.turn_offsets.end());
    next.set_tokens_held(next.kv_token_ids_size());
  } else {
    absl::StatusOr<std::vector<int32_t>> held = RenderTokens(
        SessionMessages(next), false, *options.tokenizer, *options.chat_template);
    next.set_tokens_held(held.ok() ? static_cast<int32_t>(held->size()) : 0);
  }
  // The tokens the session's context holds now, as a sliding window's
  // context length: a reply that outgrew the window rolled in it (the
  // decode worker dropped the oldest tokens after the kept prefix), so the
  // context is the window, full. The record keeps the whole reply's text
  // (and, for SHIFT, its ids): the next turn evicts it as a whole.
  next.set_tokens_held(std::min(next.tokens_held(), record.window().max_tokens()));
  if (!result.decode_address.empty()) next.set_kv_holder(result.decode_address);
  out.usage.set_session_tokens_evicted(static_cast<int32_t>(window.tokens_evicted));
  out.usage.set_session_tokens_held(next.tokens_held());
  out.usage.set_session_rebuilt(!record.kv_holder().empty() && !result.decode_address.empty() &&
                                result.decode_address != record.kv_holder());
  return out;
}

}  // namespace tandem::gateway
