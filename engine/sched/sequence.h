// One sequence's state: its tokens, where their KV lives and at which RoPE
// positions, its sampler and progress. Owned by the Scheduler; the Engine
// updates it between steps. Engine-thread only.
#ifndef TANDEM_ENGINE_SCHED_SEQUENCE_H_
#define TANDEM_ENGINE_SCHED_SEQUENCE_H_

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "engine/constrain/matcher.h"
#include "engine/kv/block_hash.h"
#include "engine/kv/block_pool.h"
#include "engine/kv/kv_snapshot.h"
#include "engine/kv/kv_tier.h"
#include "engine/sched/request.h"
#include "engine/sample/logits_processor.h"
#include "engine/sample/sampler.h"

namespace tandem::engine {

struct Sequence {
  int64_t id = 0;
  GenerationRequest request;
  // Token i sits in KV slot i of `blocks` (block i / block_size, slot
  // i % block_size) and is rotated for RoPE position positions[i]: an
  // explicit slot -> position map rather than pos / block_size, so that a
  // rolling window can drop whole blocks from the middle and keep the
  // positions of what stays, and a shifted sequence can lower them.
  std::vector<int32_t> tokens;
  std::vector<int32_t> positions;
  int32_t n_computed = 0;  // KV slots filled: [0, n_computed)
  int32_t n_generated = 0;
  // Leading tokens whose KV was not computed here at admission (whole
  // blocks): from the prefix cache, then from a pulled prefix.
  int32_t n_cached = 0;
  // Of n_cached, the tokens whose blocks came from each tier (KvTier order:
  // the pool itself, then promotions from host RAM and disk).
  std::array<int32_t, kNumKvTiers> n_cached_by_tier = {};
  std::optional<BlockList> blocks;
  // Leading full blocks whose hashes are known (published when the pool
  // took them), and the hash of the last of them: the chain continues there.
  int32_t n_hashed = 0;
  BlockHash last_hash = kRootParentHash;
  // A rolling window dropped blocks: the KV no longer matches a prefix of
  // `tokens` as the cache hashes them.
  bool rolled = false;
  Sampler sampler{SamplingParams{}};  // set from the request at Add
  LogitsProcessor logits_processor;
  // Prompt logprobs gathered so far (request.prompt_logprobs >= 0): entry i
  // is prompt token i + 1. Kept across a preemption's recompute.
  std::vector<SampledToken> prompt_logprobs;
  // KV computed elsewhere, copied into `blocks` when admitted: the whole
  // prompt (a prefill worker's hand-off, n_tokens == prompt size, the first
  // token appended) or a pulled prefix of it (GenerationRequest::prefix_kv).
  std::shared_ptr<const KvSnapshot> import;
  // The import's blocks from this one on are copied (those before came
  // from the prefix cache); set at admission.
  int32_t import_from_block = 0;
  // The request's response format, where it has one: its place in the
  // grammar after the tokens generated so far.
  std::unique_ptr<constrain::Matcher> matcher = nullptr;
  // Speculation (engine_speculate.cc): the proposed tokens at the end of
  // `tokens` this step (0: none), how many the next proposal may hold (it
  // grows while proposals are kept and halves when none is), and steps to
  // go before proposing again after proposals that were all rejected.
  int32_t n_proposed = 0;
  // The proposals are placeholders the draft model fills (Engine::RunDraft).
  bool drafting = false;
  // A draft model's KV: the last draft_lag of the n_computed slots have none
  // yet (the draft computes them with its next chunk: a sequence that
  // computes without proposing, a hand-off's prompt aside, puts them off
  // until it proposes, or for good; full blocks among them are hashed
  // marked BlockPool::draft_missing), and
  // the slot the draft's KV reaches once this step's draft passes ran
  // (Engine::RunDraft).
  int32_t draft_lag = 0;
  int32_t draft_end = 0;
  int32_t spec_k = 0;
  int32_t spec_cooldown = 0;
  int32_t spec_misses = 0;
  // The rate at which its draft proposals are kept (a moving average; the
  // engine's cost model weighs it, EngineOptions::Speculation::min_gain).
  // Negative until it first drafts: then the engine's recent rate.
  double spec_alpha = -1;
  // Resting because proposals did not pay: the next one is a probe.
  bool spec_resting = false;

  bool import_is_prefix() const {
    return import != nullptr && import->n_tokens < static_cast<int32_t>(request.prompt.size());
  }

  // Appends a token at the position after the last one.
  void Append(int32_t token) {
    positions.push_back(positions.empty() ? 0 : positions.back() + 1);
    tokens.push_back(token);
  }
  // The position the next appended token takes.
  int32_t next_position() const { return positions.empty() ? 0 : positions.back() + 1; }
  int32_t pending() const { return static_cast<int32_t>(tokens.size()) - n_computed; }
};

}  // namespace tandem::engine

#endif  // TANDEM_ENGINE_SCHED_SEQUENCE_H_
