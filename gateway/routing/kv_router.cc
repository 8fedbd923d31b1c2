#include "gateway/routing/kv_router.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/log.h"
#include "engine/kv/block_hash.h"
#include "rpc/metrics.h"

namespace tandem::gateway {

KvRouter::KvRouter(BlockIndex& index, int first_slot, const RouterOptions& options,
                   prometheus::Registry& registry, RouteRole role)
    : index_(index),
      first_slot_(first_slot),
      options_(options),
      role_(role),
      role_name_(role == RouteRole::kPrefill ? "prefill" : "decode"),
      pulls_(rpc::CounterMetric(registry, "tandem_router_prefix_pulls_total",
                                "Prefills sent with another worker to pull their prefix from",
                                {{"role", role_name_}})) {
  prometheus::Family<prometheus::Counter>& decisions = rpc::CounterFamily(
      registry, "tandem_router_decisions_total", "Routing decisions, by worker role and reason");
  for (size_t r = 0; r < kReasons.size(); ++r) {
    decisions_[r] = &decisions.Add({{"role", role_name_}, {"reason", kReasons[r]}});
  }
}

RouteDecision KvRouter::Route(WorkerPicker& picker, std::span<const int32_t> prompt,
                              const std::vector<int>& exclude, uint64_t cache_salt) {
  RouteDecision d;
  Reason reason;
  const int64_t tokens = static_cast<int64_t>(prompt.size());
  const std::optional<BlockHashParams> params = index_.params();
  if (!params.has_value()) {
    d.pick = picker.Acquire(exclude, tokens);
    reason = exclude.empty() ? kNoIndex : kRetry;
  } else {
    const int32_t bs = params->block_size;
    d.prompt_blocks = static_cast<int32_t>((tokens + bs - 1) / bs);
    // Scratch kept by the routing thread: a route over a thousand workers
    // allocates nothing, and writes into lines its last route left in the
    // caches rather than into the heap's (6 us of a route's p50 on the
    // fleet simulator's own thread at 1000 x 10000: docs/benchmarks.md).
    thread_local std::vector<engine::BlockHash> full;
    thread_local std::vector<int> slots;
    thread_local Overlaps overlaps;
    thread_local std::vector<double> base;
    // Every full block, as the worker will hash them; the engine always
    // computes the last prompt token, so a block holding it is computed
    // whatever is cached.
    engine::PrefixBlockHashes(prompt, bs, params->model_fingerprint, cache_salt, full);
    const std::span<const engine::BlockHash> chain =
        std::span(full).first(tokens == 0 ? 0 : static_cast<size_t>((tokens - 1) / bs));
    const int n = picker.size();
    if (std::ssize(slots) != n || (n > 0 && slots[0] != first_slot_)) {  // else as they are
      slots.resize(static_cast<size_t>(n));
      for (int i = 0; i < n; ++i) slots[static_cast<size_t>(i)] = first_slot_ + i;
    }
    // One walk answers both questions: what each worker holds or is
    // predicted to (the cost) and what it has reported (whom to pull from).
    index_.OverlapAll(slots, chain, overlaps);
    const std::vector<TieredOverlap>& tiered = overlaps.tiered;
    base.resize(tiered.size());
    int32_t best_overlap = 0;
    for (size_t i = 0; i < tiered.size(); ++i) {
      const TieredOverlap& o = tiered[i];
      best_overlap = std::max(best_overlap, o.blocks);
      // The slower tiers' terms only where they count (most workers hold
      // their blocks in the pool): the same sum, a thousand times a route.
      double credit = options_.tier_weights[0] * o.by_tier[0];
      for (size_t t = 1; t < kNumTiers; ++t) {
        if (o.by_tier[t] != 0) credit += options_.tier_weights[t] * o.by_tier[t];
      }
      base[i] = options_.overlap_weight * (d.prompt_blocks - credit);
    }
    // A worker added since (a DNS change) is known to hold nothing.
    auto overlap_of = [&](int i) { return i < n ? tiered[static_cast<size_t>(i)].blocks : 0; };
    const WorkerPicker::Charge charge = [&](int i) -> int64_t {
      if (role_ == RouteRole::kDecode) return tokens;
      return std::max<int64_t>(1, tokens - int64_t{overlap_of(i)} * bs);  // tokens to compute
    };
    const WorkerPicker::LinearCost cost{.base = base,
                                        .beyond = options_.overlap_weight * d.prompt_blocks,
                                        .per_token = options_.load_weight,
                                        .token_divisor = static_cast<double>(bs)};
    d.pick = picker.Acquire(exclude, charge, cost);
    if (d.pick.valid()) d.overlap_blocks = overlap_of(d.pick.index());
    if (d.pick.valid() && role_ == RouteRole::kPrefill && options_.pull_min_blocks > 0) {
      // A holder that has reported the blocks (not a prediction: those are
      // still being computed) and has enough more of them than the chosen
      // worker: pulling them beats computing them.
      const std::vector<int32_t>& held = overlaps.reported;
      int best = -1;
      for (int i = 0; i < n; ++i) {
        // Whether it would be the better holder first: that is a compare,
        // active() takes the picker's lock (a thousand workers, a thousand
        // locks a route otherwise).
        if (i == d.pick.index() || (best >= 0 && held[i] <= held[best])) continue;
        if (!picker.active(i) || std::find(exclude.begin(), exclude.end(), i) != exclude.end()) {
          continue;
        }
        best = i;
      }
      if (best >= 0 && held[best] - d.overlap_blocks >= options_.pull_min_blocks) {
        d.pull_from = picker.address(best);
        d.pull_blocks = held[best];
        pulls_.Increment();
      }
    }
    if (d.pick.valid() && options_.prediction_ttl > absl::ZeroDuration()) {
      // The leading blocks it reported holding need no prediction (Predict
      // would skip them, a shard lock each).
      const int i = d.pick.index();
      const size_t held = i < n ? static_cast<size_t>(overlaps.reported[i]) : 0;
      index_.Predict(first_slot_ + i, std::span(full).subspan(std::min(held, full.size())),
                     absl::Now() + options_.prediction_ttl);
    }
    if (!exclude.empty()) {
      reason = kRetry;
    } else if (d.overlap_blocks > 0) {
      reason = kKvOverlap;
    } else {
      reason = best_overlap > 0 ? kLoad : kNoOverlap;
    }
    if (common::LogEnabled(common::LogLevel::kDebug)) {
      // Each worker's cost as the pick saw it (the chosen one's load
      // without the charge the pick added).
      std::vector<double> costs(static_cast<size_t>(n));
      for (int i = 0; i < n; ++i) {
        const int64_t added = d.pick.valid() && i == d.pick.index() ? charge(i) : 0;
        costs[static_cast<size_t>(i)] =
            cost(i, {.in_flight = 0, .in_flight_tokens = picker.in_flight_tokens(i) - added});
      }
      common::LogLine("router") << role_name_ << " " << (d.pick.valid() ? d.pick.address() : "none")
                                << " reason=" << kReasons[reason]
                                << " prompt_blocks=" << d.prompt_blocks << " overlap=["
                                << absl::StrJoin(tiered, ",",
                                                 [](std::string* out, const TieredOverlap& o) {
                                                   absl::StrAppend(out, o.blocks);
                                                 })
                                << "] cost=[" << absl::StrJoin(costs, ",") << "]"
                                << (d.pull_from.empty()
                                        ? ""
                                        : absl::StrCat(" pull ", d.pull_blocks, " blocks from ",
                                                       d.pull_from));
    }
  }
  d.reason = kReasons[reason];
  decisions_[reason]->Increment();
  return d;
}

}  // namespace tandem::gateway
