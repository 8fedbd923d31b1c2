// The inference engine: admits generation requests, runs each step as
// Schedule (engine/sched/scheduler.cc: which tokens of which sequences) -> Forward
// (engine/model/forward.cc: the model over the paged KV cache) -> Update (sample,
// finish, hash the blocks that filled), and reports the step's tokens and
// block events. Engine-thread only: exactly one thread calls every method;
// others post to that thread (worker/engine_loop.h). No locks inside.
#ifndef TANDEM_ENGINE_ENGINE_H_
#define TANDEM_ENGINE_ENGINE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "engine/constrain/constraint.h"
#include "engine/kv/kv_cache.h"
#include "engine/kv/kv_snapshot.h"
#include "engine/kv/kv_tier.h"
#include "engine/model/backend.h"
#include "engine/model/forward.h"
#include "engine/model/model.h"
#include "engine/model/rope.h"
#include "engine/sample/sampler.h"
#include "engine/sched/itl_controller.h"
#include "engine/sched/request.h"
#include "engine/sched/scheduler.h"

namespace tandem::engine {

struct EngineOptions {
  KvCacheOptions kv;
  // Cap on each sequence's positions and RoPE table; 0 = the model's trained
  // context length (n_ctx_train).
  int32_t max_context = 0;
  int32_t max_batch_tokens = 512;   // tokens per forward step (prefill chunking)
  int32_t max_running = 64;         // sequences in the running batch
  int32_t max_waiting = 1024;       // queued sequences before Add refuses
  // Inter-token latency target, seconds; 0: none. With one, each step holds
  // at most the tokens that the steps measured so far say fit in it
  // (ItlController, starting from kItlInitialTokens): at most three quarters
  // of them running sequences (admission waits past that), the rest, at
  // least, prompt chunks.
  double itl_target_s = 0;
  // Most of the pool that sessions' pinned blocks may hold; past it the
  // least recently pinned keys are dropped.
  double max_pinned_fraction = 0.5;
  // The cache tiers below the pool (worker/kv_tiers.h); null: none. Must
  // outlive the engine; called on the engine thread only.
  KvTierStore* tiers = nullptr;
  // Structured output (SamplingParams::constraint): bounds on compiling a
  // response format and on matching it, and how many compiled formats are
  // kept (each with its mask cache).
  constrain::CompileLimits constrain_compile;
  constrain::MatcherLimits constrain_matcher;
  int32_t grammar_cache_size = 64;
  // Speculation (GenerationRequest::speculation): how a request that does
  // not say is speculated (prompt lookup, or the draft model Engine::Create
  // was given; at most one), the most tokens proposed per step, the longest
  // and shortest n-gram prompt lookup looks up, and the most sequences
  // running for proposals to be made at all (0: any number). A step of many
  // sequences is bound by arithmetic rather than by reading the weights, so
  // a proposal costs about what a sequence's token does and, mostly
  // rejected, slows every stream (measured in docs/benchmarks.md).
  struct Speculation {
    bool prompt_lookup = false;
    bool draft = false;
    int32_t k = 4;
    int32_t ngram_max = 3;
    int32_t ngram_min = 2;
    int32_t max_batch = 8;
    // Draft speculation proposes only where the expected speedup is at
    // least this: tokens kept per step (from the sequence's acceptance
    // rate) over the step's measured cost (the draft's passes and the
    // proposals' rows, timed as the engine runs), else it rests and probes
    // again later. 0: propose whatever it costs (the adaptive k alone).
    double min_gain = 1.0;
  } speculation;
};

// What an engine thread drives (worker/engine_loop.h): the Engine below, or
// a test double around one. Engine-thread only, like Engine.
class StepEngine {
 public:
  virtual ~StepEngine() = default;
  virtual absl::StatusOr<int64_t> Add(GenerationRequest request) = 0;
  virtual absl::StatusOr<int64_t> AddWithKv(GenerationRequest request, const SampledToken& first,
                                            std::shared_ptr<const KvSnapshot> kv) = 0;
  virtual void Cancel(int64_t seq_id) = 0;
  virtual absl::StatusOr<StepOutput> Step() = 0;
  virtual bool HasWork() const = 0;
  virtual EngineStats stats() const = 0;
  virtual const Model& model() const = 0;
  virtual int32_t max_context() const = 0;
  virtual int32_t kv_block_size() const = 0;
  virtual GgmlType kv_dtype() const = 0;
  // What a KV block of this engine is: the model's fingerprint and shape,
  // unless a draft model's layers ride in it too (Engine).
  virtual KvLayout kv_layout() const {
    return {.fingerprint = model().fingerprint(),
            .block_size = kv_block_size(),
            .n_layer = model().config().n_layer,
            .kv_dim = model().config().kv_dim(),
            .dtype = kv_dtype()};
  }
  // A copy of the leading full blocks of `tokens` (hashed with
  // `cache_salt`) that the prefix cache holds (null when none), for another
  // worker to pull.
  virtual std::shared_ptr<const KvSnapshot> ExportCachedPrefix(std::span<const int32_t> tokens,
                                                               uint64_t cache_salt) {
    (void)tokens;
    (void)cache_salt;
    return nullptr;
  }
  // Releases the blocks pinned under `key` (GenerationRequest::pin_key);
  // unknown keys are ignored.
  virtual void Unpin(const std::string& key) { (void)key; }
};

// A draft model for speculative decoding (Speculation::kDraft): a smaller
// model of the same vocabulary and KV width (n_head_kv x head_dim) on a
// backend of its own, on the same device as the model's. Its KV lives in
// the model's blocks, after the model's layers: computed with every chunk
// the model computes, it is hashed, cached, exported, imported and tiered
// with them, and the pair's fingerprint keys them.
struct DraftModel {
  const Model* model = nullptr;  // null: none; else must outlive the engine
  std::unique_ptr<Backend> backend;
};

class Engine final : public StepEngine, private TierPromoter {
 public:
  // The model (and the draft's) must outlive the engine. InvalidArgument
  // naming draft_model when the draft's vocabulary or KV width differs from
  // the model's, or options.speculation.draft is set without a draft.
  static absl::StatusOr<std::unique_ptr<Engine>> Create(const Model& model,
                                                        std::unique_ptr<Backend> backend,
                                                        const EngineOptions& options,
                                                        DraftModel draft = {});

  // Queues a request; returns its sequence id. InvalidArgument naming the
  // field for bad requests; ResourceExhausted when the waiting queue is full
  // or the sequence can never fit in the KV budget. A request with
  // `generated` tokens resumes a stream: those tokens are computed with the
  // prompt and the sampler continues after the draws that produced them.
  absl::StatusOr<int64_t> Add(GenerationRequest request) override;

  // Queues a sequence whose prompt KV was computed elsewhere: `kv` holds the
  // positions of the prompt and of `request.generated` (a resumed stream's
  // tokens) and `first` is the token sampled after them, which the sequence
  // feeds next (decode side of a disaggregated request). The sampler
  // continues as if it had drawn `generated` and `first` itself. FailedPrecondition
  // naming the field when `kv` comes from another model, dtype or layout;
  // InvalidArgument when its shape does not match the prompt.
  absl::StatusOr<int64_t> AddWithKv(GenerationRequest request, const SampledToken& first,
                                    std::shared_ptr<const KvSnapshot> kv) override;

  // Drops the sequence and frees its blocks; its next event is kCancelled
  // (reported by the next Step). Unknown ids are ignored.
  void Cancel(int64_t seq_id) override;

  // One engine step: Schedule -> Forward -> Update. Returns the tokens
  // produced (one per sequence that finished its prompt or decoded),
  // cancellation events, and the blocks stored and removed since the last
  // step.
  absl::StatusOr<StepOutput> Step() override;

  bool HasWork() const override { return !scheduler_.empty() || !cancelled_.empty(); }
  EngineStats stats() const override;
  const Model& model() const override { return model_; }
  int32_t max_context() const override { return options_.max_context; }
  int32_t kv_block_size() const override { return kv_->block_size(); }
  GgmlType kv_dtype() const override { return kv_->dtype(); }
  KvLayout kv_layout() const override;
  std::string_view backend_name() const { return backend_->name(); }
  // What Create makes of a block for `model` and `draft` (null: none) with
  // `kv`'s block size and dtype, known before it is made (the tiers check
  // what they load against it).
  static KvLayout LayoutFor(const Model& model, const Model* draft, const KvCacheOptions& kv);
  std::shared_ptr<const KvSnapshot> ExportCachedPrefix(std::span<const int32_t> tokens,
                                                       uint64_t cache_salt) override;
  void Unpin(const std::string& key) override;

 private:
  struct Pin {
    BlockList blocks;
    int64_t stamp = 0;  // when pinned, in pin order
    // A private pin (a SHIFT session's): the tokens its full blocks hold.
    std::vector<int32_t> tokens;
  };
  // The draft model's pieces (all null without one).
  struct Draft {
    const Model* model = nullptr;
    std::unique_ptr<Backend> backend;
    std::unique_ptr<RopeTable> rope;
    std::unique_ptr<ForwardPass> forward;
    int32_t max_tokens = 0;  // per pass (its ForwardLimits)
  };
  Engine(const Model& model, std::unique_ptr<Backend> backend, const EngineOptions& options,
         std::unique_ptr<KvCache> kv, std::unique_ptr<RopeTable> rope,
         std::unique_ptr<ForwardPass> forward, Draft draft);

  // A block evicted from the pool, whose bytes the tiers have not had yet.
  struct Evicted {
    BlockId id;
    BlockHash hash;
    // The bytes of a block promoted and evicted again before its write
    // reached the pool; empty: they are in the pool.
    std::vector<uint8_t> unwritten;
  };
  // A block promoted from a tier this step, written with the step's others
  // (WritePromotions).
  struct Promoted {
    BlockId id;
    KvBlockBytes bytes;
  };
  // A block hashed this step, whose bytes the tiers get at the step's end.
  struct Stored {
    BlockHash hash;
    BlockHash parent;
    int32_t index;
    BlockId id;
  };
  // A snapshot made this step, whose blocks are read at the step's end.
  struct PendingExport {
    std::shared_ptr<KvSnapshot> kv;
    std::vector<BlockId> ids;
  };

  // engine_kv.cc: KV bytes across the backend seam.
  // TierPromoter: a block the tiers hold, copied into a new pool block.
  std::optional<KvTier> Promote(const BlockHash& hash, BlockList& list) override;
  // The pool's eviction callback: reports the block removed and queues its
  // bytes for the tiers.
  void OnPoolEviction(BlockId id, const BlockHash& hash);
  // Hands the queued evicted blocks to the tiers (one ReadBlocks); called
  // before anything writes pool memory.
  void FlushEvictions();
  // Writes the step's promoted blocks into the pool (one WriteBlocks);
  // after FlushEvictions, before the imports and the forward pass.
  void WritePromotions();
  // Reads `ids` into staging_ (one ReadBlocks); valid until the next call.
  std::span<const uint8_t> ReadToStaging(std::span<const BlockId> ids);
  // Hands the step's hashed blocks to the tiers and fills its exports (one
  // ReadBlocks); the end of Update.
  void ReadStepBlocks();
  // A snapshot with this engine's model, block size and dtype, and no blocks.
  std::shared_ptr<KvSnapshot> EmptySnapshot() const;
  absl::Status ValidateRequest(const GenerationRequest& request) const;
  absl::Status ValidateSnapshot(const GenerationRequest& request, const KvSnapshot& kv) const;
  // Model, block size, layers, KV width, dtype and block bytes.
  absl::Status ValidateShape(const KvSnapshot& kv) const;
  absl::Status ValidatePrefix(const GenerationRequest& request, const KvSnapshot& kv) const;
  // `kept`: KV already in the pool for the leading whole blocks of the
  // prompt (ShiftPinned's), which the sequence takes as computed.
  int64_t Enqueue(GenerationRequest request, std::shared_ptr<const KvSnapshot> import,
                  const SampledToken* first, std::optional<BlockList> kept = std::nullopt,
                  std::unique_ptr<constrain::Matcher> matcher = nullptr);
  // engine_constrain.cc: structured output. The matcher of a constrained
  // request, advanced over the tokens it comes with (`generated`, then
  // `first`); null for a free one. InvalidArgument naming response_format
  // for a format that does not compile, or a token it does not allow.
  absl::StatusOr<std::unique_ptr<constrain::Matcher>> StartMatcher(
      const GenerationRequest& request, const SampledToken* first);
  // Sets every token the sequence's matcher refuses to -inf in row_.
  void MaskRow(Sequence& seq);
  // After `id` was sampled: advances the matcher; kStop when the output is
  // complete with nothing that could follow (or no token could continue it),
  // else kNone.
  FinishReason AdvanceMatcher(Sequence& seq, int32_t id);
  // How the sequence ends with `id`, sampled as its n_generated-th token,
  // when it will then hold n_tokens tokens and its next position will be
  // next_position (kNone: it goes on). Advances the matcher.
  FinishReason EndAfter(Sequence& seq, int32_t id, int32_t n_generated, int64_t n_tokens,
                        int32_t next_position);
  // Reports a token already appended to `seq` (and its end): the event, the
  // export, the rolling window, and on the end the pins and the sequence's
  // removal. True when it ended.
  bool Emit(Sequence& seq, SampledToken token, FinishReason finish, int32_t spec_proposed,
            int32_t spec_accepted, StepOutput& out);
  // engine_speculate.cc: speculation. Appends proposals (or the draft's
  // places for them) to the running sequences that speculate
  // (seq.n_proposed) before the scheduler plans the step; then drops those
  // it did not schedule, and all of a sequence's when the plan recomputes it
  // (preempted and admitted again), shortening that chunk to its tokens.
  void Propose();
  void TrimProposals(StepPlan& plan);
  // The method `seq` speculates with (kOff, kPromptLookup or kDraft), its
  // request's or the engine's default.
  Speculation MethodOf(const Sequence& seq) const;
  bool Speculates(const Sequence& seq) const;
  // The draft model's share of a step, after the imports and before the
  // model's forward pass: for every chunk of the plan, the draft computes
  // the same tokens and any it is behind on (Sequence::draft_lag), in as
  // many passes as its step bound takes, so its KV keeps up with the
  // model's; a drafting chunk's proposals are then filled in by the draft's
  // greedy picks, one draft pass per proposal. A sequence that proposes
  // nothing this step (its prompt, unless it is a hand-off's; a busy batch,
  // resting, another method) computes nothing with the draft (DefersDraft).
  absl::Status RunDraft(const StepPlan& plan);
  // Whether a sequence that does not propose puts its draft KV off until it
  // does (or for good): not a SHIFT session's private KV or a rolling
  // window, whose blocks move or go with the draft's half in them.
  bool DefersDraft(const Sequence& seq) const;
  // EngineStats::draft_kv_room.
  int32_t DraftKvRoom() const;
  // Runs the draft over `tokens` [from, to) at positions from.. into
  // `blocks` (holding the KV of [0, from) already), in passes within its
  // step bound; marks the hashed blocks it fills as holding the draft's KV.
  absl::Status FillDraft(std::span<const int32_t> tokens, std::span<const BlockId> blocks,
                         int32_t from, int32_t to);
  // Marks the hashed blocks among blocks[first, last) that lack the draft's
  // KV as holding it now, queueing them for the tiers (which keep only
  // blocks that hold it) when `to_tiers`.
  void MarkDraftFilled(std::span<const BlockId> blocks, int32_t first, int32_t last, bool to_tiers);
  // A speculating chunk's rows: each proposal is kept while the token the
  // model picks at its row is that proposal; the first token that differs
  // (or the one after the last proposal) is the step's last. The rejected
  // proposals' KV is dropped (overwritten by the next step).
  void UpdateSpeculative(Sequence& seq, const ScheduledChunk& c, const ForwardResult& result,
                         int32_t first_row, StepOutput& out);
  std::vector<int64_t> speculating_;  // sequences with proposals this step
  // What speculation costs, measured as the engine runs (moving averages of
  // whole steps of decode tokens, seconds): a step without proposals, and
  // what a step with them takes more per proposal of its longest run (one
  // draft pass, and a verification row per drafting sequence). 0: not
  // measured yet.
  // Moving averages, in seconds, and how many steps each has seen (a
  // proposal measured as free, its step no slower than the model's, is a
  // cost of 0, not an unknown one).
  struct SpecCosts {
    double model_step = 0;
    double per_proposal = 0;
    int64_t model_samples = 0;
    int64_t proposal_samples = 0;
  } spec_costs_;
  // Steps since the model's step was last timed without proposals.
  int32_t steps_since_model_sample_ = 0;
  // The longest run of proposals in a step of decode tokens only (each
  // chunk a sequence's last token and its proposals), or -1 for another
  // step; before Update takes the proposals off.
  int32_t DecodeStepProposals(const StepPlan& plan) const;
  // Folds the time of such a step (`seconds`, all of it) into spec_costs_.
  void ObserveStepCost(int32_t max_proposals, double seconds);
  // The most proposals worth making for `seq` under min_gain (0: none).
  int32_t WorthwhileK(const Sequence& seq, int32_t k) const;
  // The rate at which draft proposals were kept over recent drafting steps
  // of every sequence (a moving average): what a sequence's own rate starts
  // from, so that a draft that has stopped agreeing with the model's text
  // is not tried afresh by every new sequence.
  double spec_alpha_ = 0.7;
  int64_t spec_proposed_ = 0;
  int64_t spec_accepted_ = 0;
  int64_t spec_draft_proposed_ = 0;
  int64_t spec_draft_accepted_ = 0;
  int64_t draft_computed_tokens_ = 0;
  // Copies the admitted sequences' imported KV into their blocks (one
  // WriteBlocks).
  void CopyImports(std::span<const int64_t> seq_ids);
  // The snapshot of a finishing sequence's KV; its blocks are filled by
  // ReadStepBlocks before the step returns.
  std::shared_ptr<const KvSnapshot> Export(const Sequence& seq);
  // Hashes the blocks of `seq` that filled and hands them to the pool's
  // prefix cache, reporting each as stored (and queueing it for the tiers).
  void HashFullBlocks(Sequence& seq, std::vector<BlockEvent>& events);
  // Longest a sequence may grow in KV slots: max_context, and what the whole
  // pool holds (so a sequence alone always fits and preemption cannot
  // livelock).
  int64_t MaxSequenceLength() const {
    return std::min<int64_t>(options_.max_context,
                             int64_t{kv_->num_blocks()} * kv_->block_size());
  }
  void Update(const StepPlan& plan, const ForwardResult& result, StepOutput& out);
  // Prompt logprobs: whether chunk `c` of `seq` needs every row's logits,
  // and the reduction of those rows (from `first_row` on) to O(k) each.
  static bool WantsPromptLogprobs(const Sequence& seq, const ScheduledChunk& c);
  // Prompt logprobs, or a speculating chunk: every row's logits.
  static bool WantsAllRows(const Sequence& seq, const ScheduledChunk& c);
  static void GatherPromptLogprobs(Sequence& seq, const ScheduledChunk& c,
                                   const ForwardResult& result, int32_t first_row);
  // Whether the sequence's next token follows from its row's summary alone
  // (a greedy sampler, no logit adjustments): then the row stays in the
  // backend.
  static bool SamplesFromSummary(const Sequence& seq);
  // What chunk `c` of `seq` needs of its logits rows (`reduce`, one per row,
  // all "not reduced" on entry): prompt logprobs' targets and top-k, and the
  // top of the sampled row when SamplesFromSummary.
  static void RequestLogits(const Sequence& seq, const ScheduledChunk& c,
                            std::span<LogitsRequest> reduce);
  // The first k of a summary's top tokens (all of them when it holds fewer).
  static std::vector<TokenLogprob> TopOf(const LogitsSummary& s, int32_t k);
  // The next token of `seq` from logits row `row`: from its summary, or from
  // the whole row brought down, adjusted and sampled.
  SampledToken SampleRow(Sequence& seq, const ForwardResult& result, int32_t row);
  // Pins the leading hashed blocks of an ending sequence added with a
  // pin_key, then drops the oldest pins past max_pinned_fraction.
  void PinBlocks(const Sequence& seq);
  void DropOldestPin();
  // A rolling window (GenerationRequest::roll_window): drops the oldest
  // whole blocks after the kept prefix while the sequence holds more tokens
  // than the window.
  void Roll(Sequence& seq);
  // A SHIFT turn's starting KV (GenerationRequest::private_kv): the pin of
  // request.pin_key with its cut dropped and the keys after it re-rotated,
  // in place on the backend (MoveKvSlots), whole blocks as far as they agree
  // with the prompt; nullopt when nothing is usable. The blocks it returns
  // carry their references; the rest of the pin is let go either way.
  std::optional<BlockList> ShiftPinned(const GenerationRequest& request);

  const Model& model_;
  EngineOptions options_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<KvCache> kv_;
  std::unique_ptr<RopeTable> rope_;
  std::unique_ptr<ForwardPass> forward_;
  Draft draft_;
  // What block hashes and snapshots are keyed by: the model's fingerprint,
  // or the model and draft pair's.
  uint64_t kv_fingerprint_;
  // The draft's chunks, reused each step.
  std::vector<BatchChunk> draft_chunks_;
  // The step's logits requests (the chunks' spans point in) and a host
  // logits row for samplers that need a whole one.
  std::vector<LogitsRequest> requests_;
  std::vector<float> row_;
  // Compiled response formats for this model's vocabulary (built on the
  // first constrained request), and the mask buffer.
  std::unique_ptr<constrain::GrammarCache> grammars_;
  std::vector<uint64_t> mask_;
  Scheduler scheduler_;
  // The inter-token latency target's step budget (used when
  // options_.itl_target_s > 0).
  ItlController itl_;
  int64_t next_id_ = 1;
  std::vector<int64_t> cancelled_;
  // Pool blocks evicted and promoted since the last step reported them.
  std::vector<BlockEvent> pending_blocks_;
  // KV bytes on their way to the tiers and exports (engine_kv.cc); empty
  // between steps.
  std::vector<Evicted> evicted_;
  std::vector<Promoted> promoted_;
  std::vector<Stored> stored_;
  std::vector<PendingExport> exports_;
  // Host staging for block bytes read from the backend, reused.
  std::vector<uint8_t> staging_;
  // Sessions' kept KV by pin key (after kv_: released before the pool goes).
  absl::flat_hash_map<std::string, Pin> pins_;
  int64_t pinned_blocks_ = 0;
  int64_t pin_stamp_ = 0;
  int64_t pins_dropped_ = 0;
};

}  // namespace tandem::engine

#endif  // TANDEM_ENGINE_ENGINE_H_
