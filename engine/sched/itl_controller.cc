#include "engine/sched/itl_controller.h"

#include <algorithm>
#include <cmath>

namespace tandem::engine {
namespace {

// How far the budget moves toward a step's estimate.
constexpr double kGain = 0.2;
// A step's estimate counts within [budget / 2, budget * 3 / 2].
constexpr double kMaxDown = 0.5;
constexpr double kMaxUp = 1.5;

}  // namespace

ItlController::ItlController(double target_s, int32_t max_tokens, int32_t initial_tokens)
    : target_s_(target_s),
      max_tokens_(std::max(1, max_tokens)),
      budget_(std::clamp<double>(initial_tokens, 1, max_tokens_)) {}

void ItlController::Observe(int32_t tokens, double seconds, bool limited) {
  if (tokens < 1 || !(seconds > 0) || !std::isfinite(seconds)) return;
  ++observed_;
  if (seconds <= target_s_ && !limited) return;
  // The tokens that would fit in the target at this step's cost per token.
  const double fit = tokens * target_s_ / seconds;
  const double toward = std::clamp(fit, budget_ * kMaxDown, budget_ * kMaxUp);
  budget_ = std::clamp(budget_ + kGain * (toward - budget_), 1.0, max_tokens_);
}

StepBudget ItlController::budget() const {
  const int32_t n = tokens();
  const int32_t prompts = std::max(1, n / 4);
  return {.max_tokens = n, .max_running = std::max(1, n - prompts), .min_prefill_tokens = prompts};
}

StepBudget ItlController::BeginStep(double now_s) {
  if (last_tokens_ > 0) Observe(last_tokens_, now_s - last_start_s_, last_held_back_);
  last_start_s_ = now_s;
  last_tokens_ = 0;
  return budget();
}

}  // namespace tandem::engine
