#include "gateway/sessions/session_window.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace tandem::gateway {
namespace {

// The room a turn makes for its reply: up to a quarter of the window.
int32_t ReplyRoom(int64_t window, int32_t max_tokens) {
  return static_cast<int32_t>(std::min<int64_t>(max_tokens, std::max<int64_t>(window / 4, 1)));
}

// The tokens the template adds after a reply to `messages` (ending with
// the new user message) once it is held: the conversation is kept rendered
// without a generation prompt, so what closes the assistant's turn (the
// plain template's "\n", an end-of-turn token) counts against the window
// too. A reply that fills its room then still fits.
absl::StatusOr<int32_t> ClosingTokens(const std::vector<engine::ChatMessage>& messages,
                                      size_t prompt_tokens, const engine::Tokenizer& tokenizer,
                                      const engine::ChatTemplate& chat) {
  std::vector<engine::ChatMessage> replied = messages;
  replied.push_back({.role = "assistant", .content = ""});
  ASSIGN_OR_RETURN(std::vector<int32_t> held, RenderTokens(replied, false, tokenizer, chat));
  return static_cast<int32_t>(
      std::max<int64_t>(static_cast<int64_t>(held.size()) - static_cast<int64_t>(prompt_tokens), 0));
}

}  // namespace

std::vector<engine::ChatMessage> SessionMessages(const tandem::v1::SessionRecord& record) {
  std::vector<engine::ChatMessage> messages;
  messages.reserve(static_cast<size_t>(record.turns_size()) + 2);
  if (!record.system_prompt().empty()) {
    messages.push_back({.role = "system", .content = record.system_prompt()});
  }
  for (const tandem::v1::ChatMessage& m : record.turns()) {
    messages.push_back({.role = m.role(), .content = m.content()});
  }
  return messages;
}

absl::StatusOr<std::vector<int32_t>> RenderTokens(const std::vector<engine::ChatMessage>& messages,
                                                  bool add_generation_prompt,
                                                  const engine::Tokenizer& tokenizer,
                                                  const engine::ChatTemplate& chat) {
  ASSIGN_OR_RETURN(std::string text, chat.Render(messages, add_generation_prompt));
  return tokenizer.Encode(text, {.add_special = true, .parse_special = true});
}

absl::StatusOr<TurnPlan> PlanTurn(const tandem::v1::SessionRecord& record,
                                  const std::string& message, int32_t max_tokens,
                                  const engine::Tokenizer& tokenizer,
                                  const engine::ChatTemplate& chat, double evict_to,
                                  bool can_roll) {
  const int64_t window = record.window().max_tokens();
  const int32_t room = ReplyRoom(window, max_tokens);
  const int64_t keep_first = record.window().keep_first();
  TurnPlan plan;
  plan.kept_turns.assign(record.turns().begin(), record.turns().end());
  const size_t system = record.system_prompt().empty() ? 0 : 1;
  // The conversation the prompt renders (system, kept turns, the new message).
  std::vector<engine::ChatMessage> messages;
  auto render = [&]() -> absl::Status {
    tandem::v1::SessionRecord view;
    view.set_system_prompt(record.system_prompt());
    for (const tandem::v1::ChatMessage& m : plan.kept_turns) *view.add_turns() = m;
    messages = SessionMessages(view);
    messages.push_back({.role = "user", .content = message});
    ASSIGN_OR_RETURN(plan.prompt_ids, RenderTokens(messages, true, tokenizer, chat));
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(render());
  const int64_t full = static_cast<int64_t>(plan.prompt_ids.size());
  ASSIGN_OR_RETURN(const int32_t close,
                   ClosingTokens(messages, plan.prompt_ids.size(), tokenizer, chat));

  // The first turns that start inside the kept prefix are never evicted:
  // turn i (messages 2i, 2i+1) starts where the conversation before it ends.
  size_t protected_turns = 0;
  {
    std::vector<engine::ChatMessage> before(messages.begin(), messages.begin() + system);
    for (size_t i = 0; i + 1 < plan.kept_turns.size(); i += 2) {
      ASSIGN_OR_RETURN(std::vector<int32_t> ids, RenderTokens(before, false, tokenizer, chat));
      if (static_cast<int64_t>(ids.size()) >= keep_first) break;
      ++protected_turns;
      before.push_back(messages[system + i]);
      before.push_back(messages[system + i + 1]);
    }
  }
  auto over = [&](double limit) {
    return static_cast<double>(plan.prompt_ids.size()) + room + close > limit;
  };
  const double target = std::clamp(evict_to, 0.0, 1.0) * static_cast<double>(window);
  const bool overflow = over(static_cast<double>(window));
  while (overflow && over(target) && plan.kept_turns.size() >= 2 * protected_turns + 2) {
    const auto first = plan.kept_turns.begin() + static_cast<std::ptrdiff_t>(2 * protected_turns);
    plan.kept_turns.erase(first, first + 2);
    ++plan.turns_evicted;
    RETURN_IF_ERROR(render());
  }
  const int64_t prompt = static_cast<int64_t>(plan.prompt_ids.size());
  if (prompt + close >= window) {
    return absl::InvalidArgumentError(absl::StrCat(
        "message: the turn renders to ", prompt, " tokens after the kept prefix (",
        keep_first, " tokens) and every evictable turn, leaving no room to reply within "
        "window.max_tokens ", window));
  }
  plan.tokens_evicted = full - prompt;
  plan.max_tokens = can_roll ? max_tokens
                             : static_cast<int32_t>(
                                   std::min<int64_t>(max_tokens, window - prompt - close));
  return plan;
}

absl::StatusOr<TurnPlan> PlanShiftTurn(const tandem::v1::SessionRecord& record,
                                       const std::string& message, int32_t max_tokens,
                                       const engine::Tokenizer& tokenizer,
                                       const engine::ChatTemplate& chat, double evict_to,
                                       bool can_roll) {
  const int64_t window = record.window().max_tokens();
  const int32_t room = ReplyRoom(window, max_tokens);
  const int64_t keep_first = record.window().keep_first();
  std::vector<engine::ChatMessage> held = SessionMessages(record);
  ASSIGN_OR_RETURN(const std::string before, chat.Render(held, false));
  held.push_back({.role = "user", .content = message});
  ASSIGN_OR_RETURN(const std::string after, chat.Render(held, true));
  if (after.compare(0, before.size(), before) != 0) {
    return absl::FailedPreconditionError(
        "window.policy: WINDOW_POLICY_SHIFT needs a chat template whose text grows turn by "
        "turn; this model's re-renders earlier turns (use WINDOW_POLICY_REPREFILL)");
  }
  std::vector<int32_t> kv(record.kv_token_ids().begin(), record.kv_token_ids().end());
  if (kv.empty()) kv = tokenizer.Encode(before, {.add_special = true, .parse_special = true});
  const std::vector<int32_t> added = tokenizer.Encode(
      after.substr(before.size()), {.add_special = kv.empty(), .parse_special = true});
  std::vector<int32_t> offsets(record.turn_token_offsets().begin(),
                               record.turn_token_offsets().end());
  const size_t turns = offsets.size();
  if (static_cast<size_t>(record.turns_size()) != 2 * turns) {
    return absl::InternalError("session: its turns and their token offsets disagree");
  }

  TurnPlan plan;
  size_t protected_turns = 0;
  while (protected_turns < turns && offsets[protected_turns] < keep_first) ++protected_turns;
  // A SHIFT record holds the KV's tokens, which end with the reply: the
  // template's closing follows in the next turn's tokens, so none is
  // reserved here.
  const int64_t need = static_cast<int64_t>(kv.size() + added.size()) + room;
  size_t last = protected_turns;  // evicts turns [protected_turns, last)
  int64_t cut = 0;
  if (need > window) {
    const double target = std::clamp(evict_to, 0.0, 1.0) * static_cast<double>(window);
    const int64_t from = protected_turns < turns ? offsets[protected_turns] : 0;
    while (last < turns && static_cast<double>(need - cut) > target) {
      ++last;
      cut = (last < turns ? offsets[last] : static_cast<int64_t>(kv.size())) - from;
    }
  }
  const int32_t from = protected_turns < turns ? offsets[protected_turns] : 0;
  plan.shift_from = cut > 0 ? from : 0;
  plan.shift_count = static_cast<int32_t>(cut);
  plan.turns_evicted = static_cast<int32_t>(last - protected_turns);
  plan.tokens_evicted = cut;
  for (size_t t = 0; t < turns; ++t) {
    if (t >= protected_turns && t < last) continue;
    plan.kept_turns.push_back(record.turns(static_cast<int>(2 * t)));
    plan.kept_turns.push_back(record.turns(static_cast<int>(2 * t + 1)));
    plan.turn_offsets.push_back(t < protected_turns ? offsets[t]
                                                    : offsets[t] - static_cast<int32_t>(cut));
  }
  plan.prompt_ids.assign(kv.begin(), kv.begin() + plan.shift_from);
  plan.prompt_ids.insert(plan.prompt_ids.end(), kv.begin() + plan.shift_from + cut, kv.end());
  plan.turn_offsets.push_back(static_cast<int32_t>(plan.prompt_ids.size()));
  plan.prompt_ids.insert(plan.prompt_ids.end(), added.begin(), added.end());
  const int64_t prompt = static_cast<int64_t>(plan.prompt_ids.size());
  if (prompt >= window) {
    return absl::InvalidArgumentError(absl::StrCat(
        "message: the turn is ", prompt, " tokens after the kept prefix (", keep_first,
        " tokens) and every evictable turn, leaving no room to reply within window.max_tokens ",
        window));
  }
  plan.max_tokens =
      can_roll ? max_tokens : static_cast<int32_t>(std::min<int64_t>(max_tokens, window - prompt));
  return plan;
}

}  // namespace tandem::gateway
