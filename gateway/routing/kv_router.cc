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
    // Every full block, as the worker will hash them; the engine always
    // computes the last prompt token, so a block holding it is computed
    // whatever is cached.
    const std::vector<engine::BlockHash> full =
        engine::PrefixBlockHashes(prompt, bs, params->model_fingerprint, cache_salt);
    const std::span<const engine::BlockHash> chain =
        std::span(full).first(tokens == 0 ? 0 : static_cast<size_t>((tokens - 1) / bs));
    const int n = picker.size();
    // Scratch kept by the routing thread: a route over a thousand workers
    // allocates nothing.
    thread_local std::vector<int> slots;
    thread_local std::vector<int> listed;
    thread_local std::vector<double> base;
    if (std::ssize(slots) != n || (n > 0 && slots[0] != first_slot_)) {  // else as they are
      slots.resize(static_cast<size_t>(n));
      for (int i = 0; i < n; ++i) slots[static_cast<size_t>(i)] = first_slot_ + i;
    }
    // One walk answers both questions: what each worker holds or is
    // predicted to (the cost) and what it has reported (whom to pull from).
    // It lists the prompt's holders alone; every other worker holds none of
    // it, and costs by its load (the picker finds the least loaded).
    const Overlaps overlaps = index_.OverlapAll(slots, chain);
    listed.clear();
    base.clear();
    int32_t best_overlap = 0;
    for (const Overlaps::Held& h : overlaps.held) {
      const TieredOverlap& o = h.tiered;
      best_overlap = std::max(best_overlap, o.blocks);
      // The slower tiers' terms only where they count (most workers hold
      // their blocks in the pool).
      double credit = options_.tier_weights[0] * o.by_tier[0];
      for (size_t t = 1; t < kNumTiers; ++t) {
        if (o.by_tier[t] != 0) credit += options_.tier_weights[t] * o.by_tier[t];
      }
      listed.push_back(h.at);
      base.push_back(options_.overlap_weight * (d.prompt_blocks - credit));
    }
    auto held_by = [&](int i) -> const Overlaps::Held* {
      for (const Overlaps::Held& h : overlaps.held) {
        if (h.at == i) return &h;
      }
      return nullptr;  // none of the prompt (or a worker added since: a DNS change)
    };
    auto overlap_of = [&](int i) {
      const Overlaps::Held* h = held_by(i);
      return h == nullptr ? 0 : h->tiered.blocks;
    };
    const WorkerPicker::Charge charge = [&](int i) -> int64_t {
      if (role_ == RouteRole::kDecode) return tokens;
      return std::max<int64_t>(1, tokens - int64_t{overlap_of(i)} * bs);  // tokens to compute
    };
    // Every unlisted worker's base: nothing of the prompt held.
    const double rest = options_.overlap_weight * d.prompt_blocks;
    const WorkerPicker::SparseLinearCost cost{.listed = listed,
                                              .base = base,
                                              .rest = rest,
                                              .per_token = options_.load_weight,
                                              .token_divisor = static_cast<double>(bs)};
    d.pick = picker.Acquire(exclude, charge, cost);
    if (d.pick.valid()) d.overlap_blocks = overlap_of(d.pick.index());
    if (d.pick.valid() && role_ == RouteRole::kPrefill && options_.pull_min_blocks > 0) {
      // A holder that has reported the blocks (not a prediction: those are
      // still being computed) and has enough more of them than the chosen
      // worker: pulling them beats computing them. The most reported, ties
      // to the lowest index; only a listed worker reported any.
      const Overlaps::Held* best = nullptr;
      for (const Overlaps::Held& h : overlaps.held) {
        if (h.at == d.pick.index() || h.reported == 0) continue;
        if (best != nullptr &&
            (h.reported < best->reported || (h.reported == best->reported && h.at > best->at))) {
          continue;
        }
        // active() takes the picker's lock: asked only of a better holder.
        if (!picker.active(h.at) ||
            std::find(exclude.begin(), exclude.end(), h.at) != exclude.end()) {
          continue;
        }
        best = &h;
      }
      if (best != nullptr && best->reported - d.overlap_blocks >= options_.pull_min_blocks) {
        d.pull_from = picker.address(best->at);
        d.pull_blocks = best->reported;
        pulls_.Increment();
      }
    }
    if (d.pick.valid() && options_.prediction_ttl > absl::ZeroDuration()) {
      // The leading blocks it reported holding need no prediction (Predict
      // would skip them, a shard lock each).
      const Overlaps::Held* h = held_by(d.pick.index());
      const size_t held = h == nullptr ? 0 : static_cast<size_t>(h->reported);
      index_.Predict(first_slot_ + d.pick.index(),
                     std::span(full).subspan(std::min(held, full.size())),
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
      std::vector<int32_t> overlap(static_cast<size_t>(n));
      std::vector<double> costs(static_cast<size_t>(n));
      for (int i = 0; i < n; ++i) {
        const int64_t added = d.pick.valid() && i == d.pick.index() ? charge(i) : 0;
        const Overlaps::Held* h = held_by(i);
        overlap[static_cast<size_t>(i)] = h == nullptr ? 0 : h->tiered.blocks;
        const double b = h == nullptr ? rest : base[static_cast<size_t>(h - overlaps.held.data())];
        costs[static_cast<size_t>(i)] =
            b + options_.load_weight * static_cast<double>(picker.in_flight_tokens(i) - added) / bs;
      }
      common::LogLine("router") << role_name_ << " " << (d.pick.valid() ? d.pick.address() : "none")
                                << " reason=" << kReasons[reason]
                                << " prompt_blocks=" << d.prompt_blocks << " overlap=["
                                << absl::StrJoin(overlap, ",") << "] cost=["
                                << absl::StrJoin(costs, ",") << "]"
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
