#include "gateway/session_window.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace tandem::gateway {

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
                                  const engine::ChatTemplate& chat, double evict_to) {
  const int64_t window = record.window().max_tokens();
  const int64_t keep_first = record.window().keep_first();
  TurnPlan plan;
  plan.kept_turns.assign(record.turns().begin(), record.turns().end());
  const size_t system = record.system_prompt().empty() ? 0 : 1;

  auto render = [&]() -> absl::Status {
    tandem::v1::SessionRecord view;
    view.set_system_prompt(record.system_prompt());
    for (const tandem::v1::ChatMessage& m : plan.kept_turns) *view.add_turns() = m;
    plan.messages = SessionMessages(view);
    plan.messages.push_back({.role = "user", .content = message});
    ASSIGN_OR_RETURN(plan.prompt_ids, RenderTokens(plan.messages, true, tokenizer, chat));
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(render());
  const int64_t full = static_cast<int64_t>(plan.prompt_ids.size());

  // The first turns that start inside the kept prefix are never evicted:
  // turn i (messages 2i, 2i+1) starts where the conversation before it ends.
  size_t protected_turns = 0;
  {
    std::vector<engine::ChatMessage> before(plan.messages.begin(),
                                            plan.messages.begin() + system);
    for (size_t i = 0; i + 1 < plan.kept_turns.size(); i += 2) {
      ASSIGN_OR_RETURN(std::vector<int32_t> ids, RenderTokens(before, false, tokenizer, chat));
      if (static_cast<int64_t>(ids.size()) >= keep_first) break;
      ++protected_turns;
      before.push_back(plan.messages[system + i]);
      before.push_back(plan.messages[system + i + 1]);
    }
  }
  auto over = [&](double limit) {
    return static_cast<double>(plan.prompt_ids.size()) + max_tokens > limit;
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
  if (prompt >= window) {
    return absl::InvalidArgumentError(absl::StrCat(
        "message: the turn renders to ", prompt, " tokens after the kept prefix (",
        keep_first, " tokens) and every evictable turn, leaving no room to reply within "
        "window.max_tokens ", window));
  }
  plan.tokens_evicted = full - prompt;
  plan.max_tokens = static_cast<int32_t>(std::min<int64_t>(max_tokens, window - prompt));
  return plan;
}

}  // namespace tandem::gateway
