// The step budget an inter-token latency target allows
// (EngineOptions::itl_target_s): the most tokens one engine step may hold,
// steered by the steps the engine runs. Each step's measured time (from its
// start to the next step's, so what the engine thread does between steps
// counts) says how many tokens would have fit in the target at that step's
// cost per token; the budget moves a fifth of the way there, at most half
// again or half down per step. A step that met the target while the budget
// held nothing back (everything waiting ran) says nothing about the budget
// and leaves it. The fixed
// point is the budget whose steps take the target; no model of the cost is
// fitted, so noise, a busy machine and contexts that grow only move it.
// Not thread-safe; the engine thread's.
#ifndef TANDEM_ENGINE_SCHED_ITL_CONTROLLER_H_
#define TANDEM_ENGINE_SCHED_ITL_CONTROLLER_H_

#include <cstdint>

#include "engine/sched/scheduler.h"

namespace tandem::engine {

// Where the budget starts (tokens), before any step was measured: small, so
// the first steps cannot overshoot.
inline constexpr int32_t kItlInitialTokens = 8;

class ItlController {
 public:
  // `max_tokens`: the budget's ceiling (the engine's max_batch_tokens);
  // `initial_tokens`: where it starts, before any step was measured.
  ItlController(double target_s, int32_t max_tokens, int32_t initial_tokens);

  // A step of `tokens` tokens took `seconds`; `limited`: the budget kept
  // work out of it (sequences waited, or prompt chunks were cut).
  void Observe(int32_t tokens, double seconds, bool limited);

  // The most tokens the next step may hold (at least 1).
  int32_t tokens() const { return static_cast<int32_t>(budget_); }
  int64_t observed() const { return observed_; }
  // tokens() as the scheduler takes it: a quarter of the step, at least one
  // token, is the prompts' (they keep moving however full the decode batch
  // is), and at most the rest running sequences.
  StepBudget budget() const;

  // The engine's side, once a step. BeginStep, at the step's start (`now_s`
  // on a steady clock), observes the last step as running to now (what the
  // engine thread did between them, streaming tokens out, is part of every
  // client's inter-token time) and returns this step's budget; Planned
  // records what the step holds and whether the budget held work back
  // (StepPlan); Idle forgets it (the wait for work is no step's cost).
  StepBudget BeginStep(double now_s);
  void Planned(int32_t tokens, bool held_back) {
    last_tokens_ = tokens;
    last_held_back_ = held_back;
  }
  void Idle() { last_tokens_ = 0; }

 private:
  const double target_s_;
  const double max_tokens_;
  double budget_;
  int64_t observed_ = 0;
  // The last step: its start, tokens (0: none to observe) and whether the
  // budget held work back.
  double last_start_s_ = 0;
  int32_t last_tokens_ = 0;
  bool last_held_back_ = false;
};

}  // namespace tandem::engine

#endif  // TANDEM_ENGINE_SCHED_ITL_CONTROLLER_H_
