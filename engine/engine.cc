#include "engine/engine.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace tandem::engine {

absl::StatusOr<std::unique_ptr<Engine>> Engine::Create(const Model& model,
                                                       std::unique_ptr<Backend> backend,
                                                       const EngineOptions& options) {
  if (options.max_context < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_context ", options.max_context, " must be >= 0"));
  }
  if (options.max_batch_tokens < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_batch_tokens ", options.max_batch_tokens, " must be at least 1"));
  }
  if (options.max_running < 1 || options.max_waiting < 0) {
    return absl::InvalidArgumentError("max_running must be >= 1 and max_waiting >= 0");
  }
  ASSIGN_OR_RETURN(std::unique_ptr<KvCache> kv, KvCache::Create(model.config(), options.kv));
  EngineOptions resolved = options;
  if (resolved.max_context == 0) resolved.max_context = model.config().n_ctx_train;
  return std::unique_ptr<Engine>(new Engine(model, std::move(backend), resolved, std::move(kv)));
}

Engine::Engine(const Model& model, std::unique_ptr<Backend> backend,
               const EngineOptions& options, std::unique_ptr<KvCache> kv)
    : model_(model),
      options_(options),
      backend_(std::move(backend)),
      kv_(std::move(kv)),
      rope_(model.config(), model.weights().rope_freq_factors, options.max_context),
      forward_(model, *backend_, *kv_, rope_) {}

absl::Status Engine::ValidateRequest(const GenerationRequest& request) const {
  const Tokenizer& tok = model_.tokenizer();
  if (request.prompt.empty()) {
    return absl::InvalidArgumentError("prompt: must hold at least one token");
  }
  for (size_t i = 0; i < request.prompt.size(); ++i) {
    if (!tok.IsValidId(request.prompt[i])) {
      return absl::InvalidArgumentError(absl::StrCat(
          "prompt_token_ids[", i, "] = ", request.prompt[i], " is out of range [0, ",
          tok.n_vocab(), ")"));
    }
  }
  if (request.max_tokens < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_tokens: ", request.max_tokens, " must be at least 1"));
  }
  if (request.top_logprobs < 0 || request.top_logprobs > kMaxTopLogprobs) {
    return absl::InvalidArgumentError(absl::StrCat(
        "top_logprobs: ", request.top_logprobs, " is out of range [0, ", kMaxTopLogprobs, "]"));
  }
  RETURN_IF_ERROR(ValidateSamplingParams(request.sampling));
  const int64_t n = static_cast<int64_t>(request.prompt.size());
  if (n > options_.max_context) {
    return absl::InvalidArgumentError(absl::StrCat(
        "prompt: ", n, " tokens exceed max_context ", options_.max_context));
  }
  if (n >= MaxSequenceLength()) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "prompt: ", n, " tokens leave no room in the KV pool (", kv_->num_blocks(),
        " blocks of ", kv_->block_size(), " tokens)"));
  }
  if (static_cast<int64_t>(waiting_.size()) >= options_.max_waiting) {
    return absl::ResourceExhaustedError(
        absl::StrCat("waiting queue is full (max_waiting ", options_.max_waiting, ")"));
  }
  return absl::OkStatus();
}

absl::Status Engine::ValidateSnapshot(const GenerationRequest& request,
                                      const KvSnapshot& kv) const {
  const ModelConfig& c = model_.config();
  auto mismatch = [](const char* field, int64_t got, int64_t want) {
    return absl::FailedPreconditionError(absl::StrCat(
        "kv.", field, " is ", got, " but this worker uses ", want));
  };
  if (kv.model_fingerprint != model_.fingerprint()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "kv.model_fingerprint ", kv.model_fingerprint, " differs from this worker's model (",
        model_.fingerprint(), ")"));
  }
  if (kv.block_size != kv_->block_size()) return mismatch("block_size", kv.block_size, kv_->block_size());
  if (kv.n_layer != c.n_layer) return mismatch("n_layer", kv.n_layer, c.n_layer);
  if (kv.kv_dim != c.kv_dim()) return mismatch("kv_dim", kv.kv_dim, c.kv_dim());
  if (kv.dtype != kv_->dtype()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "kv.dtype is ", std::string(GgmlTypeName(kv.dtype)), " but this worker uses ",
        std::string(GgmlTypeName(kv_->dtype()))));
  }
  if (kv.n_tokens != static_cast<int32_t>(request.prompt.size())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "kv.n_tokens ", kv.n_tokens, " differs from the prompt's ", request.prompt.size(),
        " tokens"));
  }
  const size_t want_blocks = (kv.n_tokens + kv.block_size - 1) / kv.block_size;
  if (kv.blocks.size() != want_blocks) {
    return absl::InvalidArgumentError(absl::StrCat(
        "kv.blocks has ", kv.blocks.size(), " blocks; ", kv.n_tokens, " tokens need ",
        want_blocks));
  }
  for (size_t i = 0; i < kv.blocks.size(); ++i) {
    if (static_cast<int64_t>(kv.blocks[i].size()) != kv_->block_bytes()) {
      return absl::InvalidArgumentError(absl::StrCat("kv.blocks[", i, "] has ",
                                                     kv.blocks[i].size(), " bytes, expected ",
                                                     kv_->block_bytes()));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> Engine::Enqueue(GenerationRequest request,
                                        std::shared_ptr<const KvSnapshot> import,
                                        const SampledToken* first) {
  const SamplingParams sampling = request.sampling;
  auto seq = std::make_unique<Sequence>(Sequence{
      .id = next_id_++,
      .request = std::move(request),
      .tokens = {},
      .n_computed = 0,
      .n_generated = 0,
      .blocks = std::nullopt,
      .sampler = Sampler(sampling),
      .import = std::move(import),
  });
  seq->tokens = seq->request.prompt;
  if (first != nullptr) {
    seq->tokens.push_back(first->id);
    seq->n_generated = 1;
    seq->sampler.Skip(1);  // the draw the prefill side made for `first`
  }
  const int64_t id = seq->id;
  waiting_.push_back(std::move(seq));
  return id;
}

absl::StatusOr<int64_t> Engine::Add(GenerationRequest request) {
  RETURN_IF_ERROR(ValidateRequest(request));
  return Enqueue(std::move(request), nullptr, nullptr);
}

absl::StatusOr<int64_t> Engine::AddWithKv(GenerationRequest request, const SampledToken& first,
                                          std::shared_ptr<const KvSnapshot> kv) {
  RETURN_IF_ERROR(ValidateRequest(request));
  if (kv == nullptr) return absl::InvalidArgumentError("kv: missing");
  RETURN_IF_ERROR(ValidateSnapshot(request, *kv));
  if (!model_.tokenizer().IsValidId(first.id)) {
    return absl::InvalidArgumentError(
        absl::StrCat("first_token.id ", first.id, " is out of range"));
  }
  if (request.max_tokens < 2) {
    return absl::InvalidArgumentError(
        "max_tokens: must be at least 2 when the first token came with the KV");
  }
  if (static_cast<int64_t>(request.prompt.size()) + 1 > options_.max_context) {
    return absl::InvalidArgumentError(absl::StrCat(
        "prompt: ", request.prompt.size(), " tokens leave no room under max_context ",
        options_.max_context));
  }
  return Enqueue(std::move(request), std::move(kv), &first);
}

void Engine::Cancel(int64_t seq_id) {
  auto match = [seq_id](const std::unique_ptr<Sequence>& s) { return s->id == seq_id; };
  if (auto it = std::find_if(running_.begin(), running_.end(), match); it != running_.end()) {
    running_.erase(it);
  } else if (auto wit = std::find_if(waiting_.begin(), waiting_.end(), match);
             wit != waiting_.end()) {
    waiting_.erase(wit);
  } else {
    return;
  }
  cancelled_.push_back(seq_id);
}

bool Engine::EnsureBlocks(Sequence& seq, int32_t n_positions) {
  const int32_t bs = kv_->block_size();
  const int32_t need = (n_positions + bs - 1) / bs;
  if (!seq.blocks.has_value()) {
    std::optional<BlockList> list = kv_->pool().Allocate(need);
    if (!list.has_value()) return false;
    seq.blocks = std::move(list);
    return true;
  }
  const int32_t have = static_cast<int32_t>(seq.blocks->size());
  return have >= need || kv_->pool().Extend(*seq.blocks, need - have);
}

// Copies imported KV into freshly allocated blocks, after which the sequence
// is an ordinary one whose prompt is computed.
bool Engine::Admit(Sequence& seq, int32_t n_positions) {
  if (!EnsureBlocks(seq, n_positions)) return false;
  const KvSnapshot& kv = *seq.import;
  for (size_t i = 0; i < kv.blocks.size(); ++i) {
    std::memcpy(kv_->BlockData((*seq.blocks)[static_cast<int32_t>(i)]), kv.blocks[i].data(),
                kv.blocks[i].size());
  }
  seq.n_computed = kv.n_tokens;
  seq.import.reset();
  return true;
}

std::shared_ptr<const KvSnapshot> Engine::Export(const Sequence& seq) {
  auto kv = std::make_shared<KvSnapshot>();
  const ModelConfig& c = model_.config();
  kv->model_fingerprint = model_.fingerprint();
  kv->n_tokens = seq.n_computed;
  kv->block_size = kv_->block_size();
  kv->n_layer = c.n_layer;
  kv->kv_dim = c.kv_dim();
  kv->dtype = kv_->dtype();
  const int32_t n_blocks = (seq.n_computed + kv->block_size - 1) / kv->block_size;
  kv->blocks.reserve(n_blocks);
  for (int32_t i = 0; i < n_blocks; ++i) {
    const uint8_t* data = kv_->BlockData((*seq.blocks)[i]);
    kv->blocks.emplace_back(data, data + kv_->block_bytes());
  }
  return kv;
}

// Frees the sequence's KV; it re-enters the queue at the front and later
// recomputes its prompt and generated tokens in one prefill (vLLM's
// recompute preemption). Its sampler keeps its state.
void Engine::Preempt(Sequence& seq) {
  seq.blocks.reset();
  seq.n_computed = 0;
  ++preemptions_;
}

std::vector<Engine::PlanItem> Engine::Schedule() {
  std::vector<PlanItem> plan;
  int32_t budget = options_.max_batch_tokens;
  // Running sequences in admission order: each takes its pending tokens (one
  // when decoding, a chunk when its prompt is still being prefilled).
  for (auto it = running_.begin(); it != running_.end() && budget > 0;) {
    Sequence& seq = **it;
    const int32_t pending = static_cast<int32_t>(seq.tokens.size()) - seq.n_computed;
    const int32_t count = std::min(pending, budget);
    bool preempted_self = false;
    while (!EnsureBlocks(seq, seq.n_computed + count)) {
      // Out of blocks: preempt the newest sequence (never one already
      // planned, since those come earlier in admission order).
      std::unique_ptr<Sequence> victim = std::move(running_.back());
      running_.pop_back();
      Preempt(*victim);
      preempted_self = victim.get() == &seq;
      waiting_.push_front(std::move(victim));
      if (preempted_self) break;
    }
    if (preempted_self) break;
    plan.push_back({&seq, seq.n_computed, count});
    budget -= count;
    ++it;
  }
  // Admit waiting sequences while there is budget and memory.
  while (budget > 0 && !waiting_.empty() &&
         static_cast<int32_t>(running_.size()) < options_.max_running) {
    Sequence& seq = *waiting_.front();
    if (seq.import != nullptr && !Admit(seq, seq.import->n_tokens + 1)) break;
    const int32_t pending = static_cast<int32_t>(seq.tokens.size()) - seq.n_computed;
    const int32_t count = std::min(pending, budget);
    if (!EnsureBlocks(seq, seq.n_computed + count)) break;
    running_.push_back(std::move(waiting_.front()));
    waiting_.pop_front();
    plan.push_back({&seq, seq.n_computed, count});
    budget -= count;
  }
  return plan;
}

absl::StatusOr<std::vector<TokenEvent>> Engine::Step() {
  std::vector<TokenEvent> events;
  for (int64_t id : cancelled_) {
    events.push_back({.seq_id = id, .token = {}, .finish = FinishReason::kCancelled});
  }
  cancelled_.clear();
  const std::vector<PlanItem> plan = Schedule();
  if (plan.empty()) return events;
  std::vector<BatchChunk> chunks;
  chunks.reserve(plan.size());
  for (const PlanItem& item : plan) {
    chunks.push_back({
        .tokens = std::span<const int32_t>(item.seq->tokens).subspan(item.start, item.count),
        .start_pos = item.start,
        .blocks = item.seq->blocks->ids(),
        .all_logits = false,
    });
  }
  ASSIGN_OR_RETURN(ForwardResult result, forward_.Run(chunks));
  Update(plan, result, events);
  return events;
}

void Engine::Update(const std::vector<PlanItem>& plan, const ForwardResult& result,
                    std::vector<TokenEvent>& events) {
  const Tokenizer& tok = model_.tokenizer();
  for (size_t i = 0; i < plan.size(); ++i) {
    Sequence& seq = *plan[i].seq;
    seq.n_computed = plan[i].start + plan[i].count;
    if (seq.n_computed < static_cast<int32_t>(seq.tokens.size())) continue;  // mid-prefill
    TokenEvent ev{.seq_id = seq.id,
                  .token = seq.sampler.Sample(result.Row(result.first_row[i]),
                                              seq.request.top_logprobs),
                  .finish = FinishReason::kNone};
    seq.tokens.push_back(ev.token.id);
    ++seq.n_generated;
    if (!seq.request.ignore_eos && tok.IsEog(ev.token.id)) {
      ev.finish = FinishReason::kEos;
    } else if (seq.n_generated >= seq.request.max_tokens ||
               static_cast<int64_t>(seq.tokens.size()) > MaxSequenceLength()) {
      // The next token would need a position past max_context, or more KV
      // than the whole pool holds (the sequence could never run alone).
      ev.finish = FinishReason::kLength;
    }
    if (ev.finish != FinishReason::kNone && seq.request.export_kv) ev.kv = Export(seq);
    events.push_back(std::move(ev));
    if (events.back().finish != FinishReason::kNone) {
      running_.remove_if([&seq](const std::unique_ptr<Sequence>& s) { return s.get() == &seq; });
    }
  }
}

EngineStats Engine::stats() const {
  const BlockPool& pool = kv_->pool();
  return EngineStats{
      .running = static_cast<int32_t>(running_.size()),
      .waiting = static_cast<int32_t>(waiting_.size()),
      .blocks_used = pool.num_used(),
      .blocks_free = pool.num_free(),
      .blocks_total = pool.num_blocks(),
      .preemptions = preemptions_,
  };
}

}  // namespace tandem::engine
