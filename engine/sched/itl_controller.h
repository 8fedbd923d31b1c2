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

namespace tandem::engine {

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

 private:
  const double target_s_;
  const double max_tokens_;
  double budget_;
  int64_t observed_ = 0;
};

}  // namespace tandem::engine

#endif  // TANDEM_ENGINE_SCHED_ITL_CONTROLLER_H_
