#include "engine/engine.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "common/check.h"
#include "common/status_macros.h"
#include "engine/gguf/model_fingerprint.h"

namespace tandem::engine {
namespace {

// Logits rows a step may give speculative proposals: k per running sequence
// (a request may ask for speculation the engine does not do by default).
int32_t SpeculativeRows(const EngineOptions& options) {
  return static_cast<int32_t>(
      std::min<int64_t>(int64_t{options.max_running} * options.speculation.k, 1 << 16));
}

// A draft must speak the model's vocabulary (its proposals are the model's
// token ids) and fill KV rows of the model's width (its layers share the
// model's blocks).
absl::Status CheckDraft(const Model& model, const Model& draft) {
  const Tokenizer& a = model.tokenizer();
  const Tokenizer& b = draft.tokenizer();
  if (a.n_vocab() != b.n_vocab() || model.config().n_vocab != draft.config().n_vocab) {
    return absl::InvalidArgumentError(absl::StrCat("draft_model: its vocabulary has ", b.n_vocab(),
                                                   " tokens, the model's ", a.n_vocab()));
  }
  for (int32_t id = 0; id < a.n_vocab(); ++id) {
    if (a.TokenText(id) != b.TokenText(id)) {
      return absl::InvalidArgumentError(absl::StrCat("draft_model: token ", id, " is \"",
                                                     b.TokenText(id), "\", the model's is \"",
                                                     a.TokenText(id), "\""));
    }
  }
  if (draft.config().kv_dim() != model.config().kv_dim()) {
    return absl::InvalidArgumentError(
        absl::StrCat("draft_model: its KV width (n_head_kv x head_dim) is ",
                     draft.config().kv_dim(), ", the model's ", model.config().kv_dim(),
                     "; a draft's KV rides in the model's blocks, which have one width"));
  }
  return absl::OkStatus();
}

}  // namespace

static_assert(kMaxReducedTop == kMaxTopLogprobs, "a reduced row holds every top-k asked for");

absl::StatusOr<std::unique_ptr<Engine>> Engine::Create(const Model& model,
                                                       std::unique_ptr<Backend> backend,
                                                       const EngineOptions& options,
                                                       DraftModel draft) {
  if (options.max_context < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_context ", options.max_context, " must be >= 0"));
  }
  if (options.max_batch_tokens < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_batch_tokens ", options.max_batch_tokens, " must be at least 1"));
  }
  if (!(options.itl_target_s >= 0 && options.itl_target_s <= 3600)) {
    return absl::InvalidArgumentError(
        absl::StrCat("itl_target_s ", options.itl_target_s, " is outside [0, 3600]"));
  }
  if (options.max_running < 1 || options.max_waiting < 0) {
    return absl::InvalidArgumentError("max_running must be >= 1 and max_waiting >= 0");
  }
  if (options.speculation.draft && draft.model == nullptr) {
    return absl::InvalidArgumentError("draft_model: speculation by draft needs a draft model");
  }
  if (options.speculation.draft && options.speculation.prompt_lookup) {
    return absl::InvalidArgumentError("speculation: prompt lookup or draft, not both");
  }
  KvCacheOptions kv_options = options.kv;
  if (draft.model != nullptr) {
    RETURN_IF_ERROR(CheckDraft(model, *draft.model));
    TANDEM_CHECK(draft.backend != nullptr, "a draft model comes with its backend");
    kv_options.extra_layers = draft.model->config().n_layer;
  }
  ASSIGN_OR_RETURN(std::unique_ptr<KvCache> kv,
                   CreateKvCache(*backend, model.config(), kv_options));
  EngineOptions resolved = options;
  if (resolved.max_context == 0) resolved.max_context = model.config().n_ctx_train;
  auto rope = std::make_unique<RopeTable>(model.config(), model.weights().rope_freq_factors,
                                          resolved.max_context);
  // The scheduler's bounds: a chunk per running sequence, one logits row
  // each, and at most kPromptLogprobsChunk more in a step for the chunks
  // gathering prompt logprobs; never more rows than tokens.
  const ForwardLimits limits{
      .max_tokens = options.max_batch_tokens,
      .max_seqs = options.max_running,
      .max_logit_rows = static_cast<int32_t>(std::min<int64_t>(
          options.max_batch_tokens,
          int64_t{options.max_running} + kPromptLogprobsChunk + SpeculativeRows(options)))};
  ASSIGN_OR_RETURN(std::unique_ptr<ForwardPass> forward,
                   ForwardPass::Create(model, *backend, *kv, *rope, limits));
  Draft d;
  if (draft.model != nullptr) {
    d.model = draft.model;
    d.backend = std::move(draft.backend);
    d.rope = std::make_unique<RopeTable>(
        draft.model->config(), draft.model->weights().rope_freq_factors, resolved.max_context);
    // The draft computes every chunk the model does, and one logits row per
    // chunk; room for a block more per sequence, so that a lag of less than
    // a block (a sequence that filled a block) takes one pass. Longer lags
    // (a draft put off, RunDraft) take more.
    const ForwardLimits draft_limits{
        .max_tokens = options.max_batch_tokens + options.max_running * options.kv.block_size,
        .max_seqs = options.max_running,
        .max_logit_rows = options.max_running};
    ASSIGN_OR_RETURN(d.forward, ForwardPass::Create(*draft.model, *d.backend, *kv, *d.rope,
                                                    draft_limits, model.config().n_layer));
    d.max_tokens = draft_limits.max_tokens;
  }
  return std::unique_ptr<Engine>(new Engine(model, std::move(backend), resolved, std::move(kv),
                                            std::move(rope), std::move(forward), std::move(d)));
}

Engine::Engine(const Model& model, std::unique_ptr<Backend> backend, const EngineOptions& options,
               std::unique_ptr<KvCache> kv, std::unique_ptr<RopeTable> rope,
               std::unique_ptr<ForwardPass> forward, Draft draft)
    : model_(model),
      options_(options),
      backend_(std::move(backend)),
      kv_(std::move(kv)),
      rope_(std::move(rope)),
      forward_(std::move(forward)),
      draft_(std::move(draft)),
      kv_fingerprint_(LayoutFor(model, draft_.model, options.kv).fingerprint),
      row_(static_cast<size_t>(model.config().n_vocab)),
      scheduler_({.max_batch_tokens = options.max_batch_tokens,
                  .max_running = options.max_running,
                  .model_fingerprint = kv_fingerprint_,
                  .max_speculative_rows = SpeculativeRows(options)},
                 kv_->pool(), kv_->block_size(), options.tiers != nullptr ? this : nullptr),
      itl_(options.itl_target_s, options.max_batch_tokens, kItlInitialTokens) {
  // Runs inside an allocation on the engine thread, before the block's
  // memory is reused: the lower tiers get its bytes before anything writes
  // it (FlushEvictions), and the next Step reports the block removed.
  kv_->pool().set_eviction_callback(
      [this](BlockId id, const BlockHash& hash) { OnPoolEviction(id, hash); });
}

int64_t Engine::Enqueue(GenerationRequest request, std::shared_ptr<const KvSnapshot> import,
                        const SampledToken* first, std::optional<BlockList> kept,
                        std::unique_ptr<constrain::Matcher> matcher) {
  auto seq = std::make_unique<Sequence>();
  seq->id = next_id_++;
  seq->request = std::move(request);
  seq->import = std::move(import);
  seq->matcher = std::move(matcher);
  seq->sampler = Sampler(seq->request.sampling);
  seq->logits_processor = LogitsProcessor(
      seq->request.sampling, seq->request.ignore_eos ? std::span<const int32_t>()
                                                     : model_.tokenizer().eog_ids());
  seq->logits_processor.ObservePrompt(seq->request.prompt);
  for (int32_t id : seq->request.generated) seq->logits_processor.ObserveGenerated(id);
  if (first != nullptr) seq->logits_processor.ObserveGenerated(first->id);
  for (int32_t id : seq->request.prompt) seq->Append(id);
  // Tokens generated before this sequence existed (elsewhere, or by the
  // prefill side for `first`): computed with the prompt, and the draws that
  // made them are skipped so the sampler continues where it stood.
  for (int32_t id : seq->request.generated) seq->Append(id);
  seq->n_generated = static_cast<int32_t>(seq->request.generated.size());
  if (first != nullptr) {
    seq->Append(first->id);
    ++seq->n_generated;
  }
  seq->sampler.Skip(seq->n_generated);
  if (kept.has_value()) {
    // A SHIFT's kept KV, already in the pool: computed, as if cached. A
    // failed admission or a preemption frees it and recomputes the prompt.
    seq->n_cached = kept->size() * kv_->block_size();
    seq->n_computed = seq->n_cached;
    seq->n_cached_by_tier[static_cast<size_t>(KvTier::kDevice)] = seq->n_cached;
    seq->blocks = std::move(kept);
  }
  const int64_t id = seq->id;
  scheduler_.Enqueue(std::move(seq));
  return id;
}

absl::StatusOr<int64_t> Engine::Add(GenerationRequest request) {
  RETURN_IF_ERROR(ValidateRequest(request));
  std::shared_ptr<const KvSnapshot> prefix = std::move(request.prefix_kv);
  request.prefix_kv = nullptr;
  // Prompt logprobs need every prompt position computed here.
  if (request.prompt_logprobs >= 0) prefix = nullptr;
  if (prefix != nullptr) {
    RETURN_IF_ERROR(ValidatePrefix(request, *prefix));
    if (!request.generated.empty()) {
      return absl::InvalidArgumentError("generated: must be empty with a pulled prefix");
    }
  }
  ASSIGN_OR_RETURN(std::unique_ptr<constrain::Matcher> matcher, StartMatcher(request, nullptr));
  std::optional<BlockList> kept;
  if (request.private_kv && prefix == nullptr && request.generated.empty()) {
    kept = ShiftPinned(request);
  }
  return Enqueue(std::move(request), std::move(prefix), nullptr, std::move(kept),
                 std::move(matcher));
}

absl::StatusOr<int64_t> Engine::AddWithKv(GenerationRequest request, const SampledToken& first,
                                          std::shared_ptr<const KvSnapshot> kv) {
  RETURN_IF_ERROR(ValidateRequest(request));
  if (request.prompt_logprobs >= 0) {
    return absl::InvalidArgumentError("prompt_logprobs: the prompt's KV comes computed");
  }
  if (kv == nullptr) return absl::InvalidArgumentError("kv: missing");
  RETURN_IF_ERROR(ValidateSnapshot(request, *kv));
  if (!model_.tokenizer().IsValidId(first.id)) {
    return absl::InvalidArgumentError(
        absl::StrCat("first_token.id ", first.id, " is out of range"));
  }
  const int64_t held = static_cast<int64_t>(request.prompt.size() + request.generated.size());
  if (request.max_tokens < static_cast<int64_t>(request.generated.size()) + 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max_tokens: ", request.max_tokens, " leaves nothing to generate after the ",
        request.generated.size() + 1, " tokens that came with the KV"));
  }
  if (held + 1 > options_.max_context) {
    return absl::InvalidArgumentError(absl::StrCat(
        "prompt: ", held, " tokens leave no room under max_context ", options_.max_context));
  }
  ASSIGN_OR_RETURN(std::unique_ptr<constrain::Matcher> matcher, StartMatcher(request, &first));
  return Enqueue(std::move(request), std::move(kv), &first, std::nullopt, std::move(matcher));
}

void Engine::Roll(Sequence& seq) {
  const int32_t bs = kv_->block_size();
  // The next step computes the last token: the KV then holds every token.
  while (static_cast<int32_t>(seq.tokens.size()) > seq.request.roll_window &&
         seq.blocks.has_value()) {
    const int32_t k = (seq.request.roll_keep + bs - 1) / bs;  // first block after the kept
    if (k >= seq.n_computed / bs) return;  // no full computed block to drop
    seq.blocks->Erase(k);
    const auto first = static_cast<std::ptrdiff_t>(int64_t{k} * bs);
    seq.tokens.erase(seq.tokens.begin() + first, seq.tokens.begin() + first + bs);
    seq.positions.erase(seq.positions.begin() + first, seq.positions.begin() + first + bs);
    seq.n_computed -= bs;
    seq.n_hashed = std::min(seq.n_hashed, k);
    seq.rolled = true;
  }
}

void Engine::Cancel(int64_t seq_id) {
  if (const Sequence* seq = scheduler_.Find(seq_id); seq != nullptr) PinBlocks(*seq);
  if (scheduler_.Remove(seq_id)) cancelled_.push_back(seq_id);
}

void Engine::PinBlocks(const Sequence& seq) {
  if (seq.request.pin_key.empty()) return;
  BlockList pinned(&kv_->pool());
  std::vector<int32_t> tokens;
  if (seq.request.private_kv && seq.blocks.has_value()) {
    // Private KV has no hashes: every full computed block, with its tokens.
    // (Those the draft's KV fills too, where there is a draft.)
    const int32_t n =
        std::min((seq.n_computed - seq.draft_lag) / kv_->block_size(), seq.blocks->size());
    for (int32_t i = 0; i < n; ++i) {
      kv_->pool().Ref((*seq.blocks)[i]);
      pinned.Append((*seq.blocks)[i]);
    }
    tokens.assign(seq.tokens.begin(), seq.tokens.begin() + int64_t{n} * kv_->block_size());
  } else if (seq.blocks.has_value()) {
    // Only blocks the prefix cache can find: a block left private (another
    // one holds its hash) ends the run.
    const int32_t n = std::min(seq.n_hashed, seq.blocks->size());
    for (int32_t i = 0; i < n; ++i) {
      const BlockId id = (*seq.blocks)[i];
      if (!kv_->pool().hash(id).has_value()) break;
      kv_->pool().Ref(id);
      pinned.Append(id);
    }
  }
  Unpin(seq.request.pin_key);
  if (pinned.empty()) return;
  pinned_blocks_ += pinned.size();
  pins_[seq.request.pin_key] =
      Pin{.blocks = std::move(pinned), .stamp = ++pin_stamp_, .tokens = std::move(tokens)};
  const double limit = options_.max_pinned_fraction * kv_->num_blocks();
  while (!pins_.empty() && static_cast<double>(pinned_blocks_) > limit) DropOldestPin();
}

void Engine::Unpin(const std::string& key) {
  const auto it = pins_.find(key);
  if (it == pins_.end()) return;
  pinned_blocks_ -= it->second.blocks.size();
  pins_.erase(it);  // the blocks go back to the prefix cache's LRU
}

void Engine::DropOldestPin() {
  auto oldest = pins_.begin();
  for (auto it = pins_.begin(); it != pins_.end(); ++it) {
    if (it->second.stamp < oldest->second.stamp) oldest = it;
  }
  ++pins_dropped_;
  Unpin(std::string(oldest->first));
}

absl::StatusOr<StepOutput> Engine::Step() {
  const bool itl = options_.itl_target_s > 0;
  // Timed for the draft's cost model and the latency target's.
  const auto step_start = draft_.model != nullptr || itl ? std::chrono::steady_clock::now()
                                                         : std::chrono::steady_clock::time_point();
  const StepBudget budget =
      itl ? itl_.BeginStep(std::chrono::duration<double>(step_start.time_since_epoch()).count())
          : StepBudget{};
  StepOutput out;
  for (int64_t id : cancelled_) {
    out.tokens.push_back({.seq_id = id, .token = {}, .finish = FinishReason::kCancelled});
  }
  cancelled_.clear();
  Propose();
  StepPlan plan = scheduler_.Schedule(budget);
  // Pins never hold back work: sequences wait with nothing running while
  // pinned blocks would make room.
  while (plan.chunks.empty() && scheduler_.num_waiting() > 0 && !pins_.empty()) {
    DropOldestPin();
    plan = scheduler_.Schedule(budget);
  }
  if (itl) itl_.Planned(plan.tokens(), plan.held_back);
  TrimProposals(plan);
  // What scheduling evicted and promoted comes before what this step's
  // forward pass stores: a hash evicted and then computed again ends held.
  out.blocks = std::move(pending_blocks_);
  pending_blocks_.clear();
  FlushEvictions();  // before the promotions, imports and forward pass write the pool
  WritePromotions();
  CopyImports(plan.imported);
  RETURN_IF_ERROR(RunDraft(plan));
  if (!plan.chunks.empty()) {
    // Each chunk's logits requests, laid out before any span points in.
    int32_t n_rows = 0;
    for (const ScheduledChunk& c : plan.chunks) {
      n_rows += WantsAllRows(*scheduler_.Find(c.seq_id), c) ? c.count : 1;
    }
    requests_.assign(static_cast<size_t>(n_rows), LogitsRequest{});
    std::vector<BatchChunk> chunks;
    chunks.reserve(plan.chunks.size());
    int32_t row = 0;
    for (const ScheduledChunk& c : plan.chunks) {
      const Sequence& seq = *scheduler_.Find(c.seq_id);
      const bool all_logits = WantsAllRows(seq, c);
      const std::span<LogitsRequest> reduce =
          std::span<LogitsRequest>(requests_).subspan(row, all_logits ? c.count : 1);
      RequestLogits(seq, c, reduce);
      row += static_cast<int32_t>(reduce.size());
      chunks.push_back({
          .tokens = std::span<const int32_t>(seq.tokens).subspan(c.start, c.count),
          .positions = std::span<const int32_t>(seq.positions).subspan(c.start, c.count),
          .kv_start = c.start,
          .blocks = seq.blocks->ids(),
          .all_logits = all_logits,
          .reduce = reduce,
      });
    }
    ASSIGN_OR_RETURN(ForwardResult result, forward_->Run(chunks));
    const int32_t proposals = draft_.model != nullptr ? DecodeStepProposals(plan) : -1;
    Update(plan, result, out);
    if (proposals >= 0) {
      ObserveStepCost(
          proposals,
          std::chrono::duration<double>(std::chrono::steady_clock::now() - step_start).count());
    }
  }
  if (itl && !HasWork()) itl_.Idle();
  return out;
}

bool Engine::WantsPromptLogprobs(const Sequence& seq, const ScheduledChunk& c) {
  return seq.request.prompt_logprobs >= 0 &&
         c.start + 1 < static_cast<int32_t>(seq.request.prompt.size());
}

bool Engine::WantsAllRows(const Sequence& seq, const ScheduledChunk& c) {
  return WantsPromptLogprobs(seq, c) || seq.n_proposed > 0;
}

bool Engine::SamplesFromSummary(const Sequence& seq) {
  return seq.sampler.SamplesFromTop() && !seq.logits_processor.active() &&
         seq.matcher == nullptr;
}

void Engine::RequestLogits(const Sequence& seq, const ScheduledChunk& c,
                           std::span<LogitsRequest> reduce) {
  const std::vector<int32_t>& prompt = seq.request.prompt;
  if (WantsPromptLogprobs(seq, c)) {
    for (int32_t r = 0; r < c.count; ++r) {
      // Row r holds the logits after slot c.start + r: they predict the next
      // prompt token (GatherPromptLogprobs), unless gathered already.
      const int32_t target = c.start + r + 1;
      if (target >= static_cast<int32_t>(prompt.size())) break;
      if (target - 1 < static_cast<int32_t>(seq.prompt_logprobs.size())) continue;
      reduce[r] = {.top_k = seq.request.prompt_logprobs, .target = prompt[target]};
    }
  }
  // The last row samples the next token when the chunk ends the sequence's
  // pending tokens (every row of a speculating chunk samples); a greedy
  // sampler with nothing to adjust needs only the top of it (else the whole
  // row comes down in SampleRow).
  if (c.start + c.count < static_cast<int32_t>(seq.tokens.size())) return;
  if (!SamplesFromSummary(seq)) return;
  if (seq.n_proposed > 0) {
    for (LogitsRequest& r : reduce) r.top_k = std::max({r.top_k, seq.request.top_logprobs, 1});
    return;
  }
  LogitsRequest& last = reduce.back();
  last.top_k = std::max({last.top_k, seq.request.top_logprobs, 1});
}

void Engine::GatherPromptLogprobs(Sequence& seq, const ScheduledChunk& c,
                                  const ForwardResult& result, int32_t first_row) {
  const std::vector<int32_t>& prompt = seq.request.prompt;
  for (int32_t r = 0; r < c.count; ++r) {
    const int32_t target = c.start + r + 1;
    if (target >= static_cast<int32_t>(prompt.size())) break;
    // Gathered already, before a preemption made the prompt run again.
    if (target - 1 < static_cast<int32_t>(seq.prompt_logprobs.size())) continue;
    // The row's reduction (RequestLogits): logprob and top-k as Sample
    // computes them from the whole row.
    const LogitsSummary& s = result.summaries[first_row + r];
    seq.prompt_logprobs.push_back({.id = prompt[target],
                                   .logprob = s.target_logit - s.max - s.log_sum,
                                   .top = TopOf(s, seq.request.prompt_logprobs)});
  }
}

std::vector<TokenLogprob> Engine::TopOf(const LogitsSummary& s, int32_t k) {
  // n_top is what was asked (RequestLogits asks at least k), or the whole
  // vocabulary when that is shorter, as TopLogprobs would give.
  const int32_t n = std::min(k, s.n_top);
  std::vector<TokenLogprob> top(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i) top[i] = {.id = s.top_ids[i], .logprob = s.top_logprobs[i]};
  return top;
}

SampledToken Engine::SampleRow(Sequence& seq, const ForwardResult& result, int32_t row) {
  const int32_t k = seq.request.top_logprobs;
  if (SamplesFromSummary(seq)) {
    const LogitsSummary& s = result.summaries[row];
    return seq.sampler.SampleFromTop(TopOf(s, std::max(k, 1)), k);
  }
  forward_->DownloadRow(row, row_);
  seq.logits_processor.Apply(row_);
  if (seq.matcher != nullptr) MaskRow(seq);
  return seq.sampler.Sample(row_, k);
}

FinishReason Engine::EndAfter(Sequence& seq, int32_t id, int32_t n_generated, int64_t n_tokens,
                              int32_t next_position) {
  if (!seq.request.ignore_eos && model_.tokenizer().IsEog(id)) return FinishReason::kEos;
  if (seq.matcher != nullptr) {
    // The response format is complete.
    if (const FinishReason end = AdvanceMatcher(seq, id); end != FinishReason::kNone) return end;
  }
  if (seq.request.sampling.IsStopToken(id)) return FinishReason::kStop;
  if (n_generated >= seq.request.max_tokens || n_tokens > MaxSequenceLength() ||
      next_position > options_.max_context) {
    // The next token would need a position past max_context, or more KV
    // than the whole pool holds (the sequence could never run alone).
    return FinishReason::kLength;
  }
  return FinishReason::kNone;
}

bool Engine::Emit(Sequence& seq, SampledToken token, FinishReason finish, int32_t spec_proposed,
                  int32_t spec_accepted, StepOutput& out) {
  TokenEvent ev{.seq_id = seq.id,
                .token = std::move(token),
                .finish = finish,
                .cached_tokens = seq.n_cached,
                .spec_proposed = spec_proposed,
                .spec_accepted = spec_accepted};
  if (seq.n_generated == 1 + static_cast<int32_t>(seq.request.generated.size()) &&
      seq.request.prompt_logprobs >= 0) {
    ev.prompt_logprobs = std::move(seq.prompt_logprobs);
  }
  if (ev.finish != FinishReason::kNone && seq.request.export_kv) ev.kv = Export(seq);
  const bool finished = ev.finish != FinishReason::kNone;
  if (!finished && seq.request.roll_window > 0) Roll(seq);
  out.tokens.push_back(std::move(ev));
  if (finished) {
    PinBlocks(seq);
    scheduler_.Remove(seq.id);  // frees its blocks (full ones stay cached)
  }
  return finished;
}

void Engine::Update(const StepPlan& plan, const ForwardResult& result, StepOutput& out) {
  for (size_t i = 0; i < plan.chunks.size(); ++i) {
    const ScheduledChunk& c = plan.chunks[i];
    Sequence& seq = *scheduler_.Find(c.seq_id);
    if (seq.n_proposed > 0) {
      UpdateSpeculative(seq, c, result, result.first_row[i], out);
      continue;
    }
    seq.n_computed = c.start + c.count;
    // What of it the draft computed, or put off (RunDraft).
    if (draft_.model != nullptr) seq.draft_lag = std::max(0, seq.n_computed - seq.draft_end);
    HashFullBlocks(seq, out.blocks);
    int32_t last_row = result.first_row[i];
    if (WantsPromptLogprobs(seq, c)) {
      GatherPromptLogprobs(seq, c, result, last_row);
      last_row += c.count - 1;
    }
    if (seq.pending() > 0) continue;  // mid-prefill
    SampledToken token = SampleRow(seq, result, last_row);
    seq.logits_processor.ObserveGenerated(token.id);
    const FinishReason finish =
        EndAfter(seq, token.id, seq.n_generated + 1,
                 static_cast<int64_t>(seq.tokens.size()) + 1, seq.next_position() + 1);
    seq.Append(token.id);
    ++seq.n_generated;
    Emit(seq, std::move(token), finish, 0, 0, out);
  }
  ReadStepBlocks();
}

EngineStats Engine::stats() const {
  const BlockPool& pool = kv_->pool();
  return EngineStats{
      .running = scheduler_.num_running(),
      .waiting = scheduler_.num_waiting(),
      .blocks_used = pool.num_used(),
      .blocks_free = pool.num_free(),
      .blocks_total = pool.num_blocks(),
      .blocks_cached = pool.num_cached(),
      .block_bytes = kv_->block_bytes(),
      .preemptions = scheduler_.preemptions(),
      .prefix_queried_tokens = scheduler_.prefix_queried_tokens(),
      .prefix_hit_tokens = scheduler_.prefix_hit_tokens(),
      .prefix_hit_tokens_by_tier = scheduler_.prefix_hit_tokens_by_tier(),
      .delta_fallbacks = scheduler_.delta_fallbacks(),
      .prefix_pulled_tokens = scheduler_.prefix_pulled_tokens(),
      .pins = static_cast<int32_t>(pins_.size()),
      .blocks_pinned = static_cast<int32_t>(pinned_blocks_),
      .pins_dropped = pins_dropped_,
      .spec_proposed = spec_proposed_,
      .spec_accepted = spec_accepted_,
      .spec_draft_proposed = spec_draft_proposed_,
      .spec_draft_accepted = spec_draft_accepted_,
      .draft_computed_tokens = draft_computed_tokens_,
      .draft_kv_room = DraftKvRoom(),
      .itl_step_tokens = options_.itl_target_s > 0 ? itl_.budget().max_tokens : 0,
      .itl_max_running = options_.itl_target_s > 0 ? itl_.budget().max_running : 0,
  };
}

KvLayout Engine::LayoutFor(const Model& model, const Model* draft, const KvCacheOptions& kv) {
  return {.fingerprint = draft == nullptr
                             ? model.fingerprint()
                             : PairFingerprint(model.fingerprint(), draft->fingerprint()),
          .block_size = kv.block_size,
          .n_layer = model.config().n_layer + (draft == nullptr ? 0 : draft->config().n_layer),
          .kv_dim = model.config().kv_dim(),
          .dtype = kv.dtype};
}

KvLayout Engine::kv_layout() const {
  return {.fingerprint = kv_fingerprint_,
          .block_size = kv_->block_size(),
          .n_layer = kv_->n_layer(),
          .kv_dim = kv_->kv_dim(),
          .dtype = kv_->dtype()};
}

}  // namespace tandem::engine
