// The inference engine: admits generation requests, schedules each step's
// batch (decode tokens of running sequences first, then prefill chunks of
// new ones, under a token budget), runs the forward pass over the paged KV
// cache, samples, and reports one TokenEvent per sequence per step.
// Engine-thread only: exactly one thread calls every method; others post to
// that thread (see the decode worker). No locks inside.
#ifndef TANDEM_ENGINE_ENGINE_H_
#define TANDEM_ENGINE_ENGINE_H_

#include <cstdint>
#include <deque>
#include <list>
#include <memory>
#include <optional>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "engine/backend.h"
#include "engine/forward.h"
#include "engine/kv_cache.h"
#include "engine/kv_snapshot.h"
#include "engine/model.h"
#include "engine/rope.h"
#include "engine/sampler.h"

namespace tandem::engine {

enum class FinishReason {
  kNone,       // still running
  kLength,     // max_tokens reached, or the sequence filled max_context
  kEos,        // an end-of-generation token was sampled
  kCancelled,  // Cancel() was called
};

struct GenerationRequest {
  std::vector<int32_t> prompt;  // token ids, BOS included when wanted
  SamplingParams sampling;
  int32_t max_tokens = 16;      // >= 1
  int32_t top_logprobs = 0;     // [0, kMaxTopLogprobs]
  bool ignore_eos = false;
  // On finish, copy the sequence's KV (its computed positions) into the
  // finishing TokenEvent's `kv` before the blocks are freed (prefill side
  // of a disaggregated request).
  bool export_kv = false;
};

struct TokenEvent {
  int64_t seq_id = 0;
  SampledToken token;
  FinishReason finish = FinishReason::kNone;
  // Set on the finishing event of a sequence added with export_kv.
  std::shared_ptr<const KvSnapshot> kv = nullptr;
};

struct EngineOptions {
  KvCacheOptions kv;
  // Cap on each sequence's KV and RoPE table; 0 = the model's trained context
  // length (n_ctx_train).
  int32_t max_context = 0;
  int32_t max_batch_tokens = 512;   // tokens per forward step (prefill chunking)
  int32_t max_running = 64;         // sequences in the running batch
  int32_t max_waiting = 1024;       // queued sequences before Add refuses
};

struct EngineStats {
  int32_t running = 0;
  int32_t waiting = 0;
  int32_t blocks_used = 0;
  int32_t blocks_free = 0;
  int32_t blocks_total = 0;
  int64_t preemptions = 0;
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
  virtual absl::StatusOr<std::vector<TokenEvent>> Step() = 0;
  virtual bool HasWork() const = 0;
  virtual EngineStats stats() const = 0;
  virtual const Model& model() const = 0;
  virtual int32_t max_context() const = 0;
  virtual int32_t kv_block_size() const = 0;
  virtual GgmlType kv_dtype() const = 0;
};

class Engine final : public StepEngine {
 public:
  // The model must outlive the engine.
  static absl::StatusOr<std::unique_ptr<Engine>> Create(const Model& model,
                                                        std::unique_ptr<Backend> backend,
                                                        const EngineOptions& options);

  // Queues a request; returns its sequence id. InvalidArgument naming the
  // field for bad requests; ResourceExhausted when the waiting queue is full
  // or the prompt can never fit in the KV budget.
  absl::StatusOr<int64_t> Add(GenerationRequest request) override;

  // Queues a sequence whose prompt KV was computed elsewhere: `kv` holds the
  // prompt's positions and `first` is the token sampled after them, which the
  // sequence feeds next (decode side of a disaggregated request). The
  // sampler continues as if it had drawn `first` itself. FailedPrecondition
  // naming the field when `kv` comes from another model, dtype or layout;
  // InvalidArgument when its shape does not match the prompt.
  absl::StatusOr<int64_t> AddWithKv(GenerationRequest request, const SampledToken& first,
                                    std::shared_ptr<const KvSnapshot> kv) override;

  // Drops the sequence and frees its blocks; its next event is kCancelled
  // (reported by the next Step). Unknown ids are ignored.
  void Cancel(int64_t seq_id) override;

  // One engine step: Schedule -> Forward -> Update. Returns the tokens
  // produced (one per sequence that finished its prompt or decoded), and
  // cancellation events.
  absl::StatusOr<std::vector<TokenEvent>> Step() override;

  bool HasWork() const override {
    return !running_.empty() || !waiting_.empty() || !cancelled_.empty();
  }
  EngineStats stats() const override;
  const Model& model() const override { return model_; }
  int32_t max_context() const override { return options_.max_context; }
  int32_t kv_block_size() const override { return kv_->block_size(); }
  GgmlType kv_dtype() const override { return kv_->dtype(); }

 private:
  struct Sequence {
    int64_t id = 0;
    GenerationRequest request;
    std::vector<int32_t> tokens;  // prompt, then generated tokens
    int32_t n_computed = 0;       // positions whose KV is in `blocks`
    int32_t n_generated = 0;
    std::optional<BlockList> blocks;
    Sampler sampler;
    // Prompt KV computed elsewhere, copied into blocks at admission.
    std::shared_ptr<const KvSnapshot> import;
  };
  // What one step runs: per sequence, the tokens [start, start + count).
  struct PlanItem {
    Sequence* seq;
    int32_t start;
    int32_t count;
  };

  Engine(const Model& model, std::unique_ptr<Backend> backend, const EngineOptions& options,
         std::unique_ptr<KvCache> kv);

  std::vector<PlanItem> Schedule();
  absl::Status ValidateRequest(const GenerationRequest& request) const;
  absl::Status ValidateSnapshot(const GenerationRequest& request, const KvSnapshot& kv) const;
  absl::StatusOr<int64_t> Enqueue(GenerationRequest request,
                                  std::shared_ptr<const KvSnapshot> import,
                                  const SampledToken* first);
  bool EnsureBlocks(Sequence& seq, int32_t n_positions);
  bool Admit(Sequence& seq, int32_t n_positions);
  std::shared_ptr<const KvSnapshot> Export(const Sequence& seq);
  void Preempt(Sequence& seq);
  // Longest a sequence may grow: max_context, and what the whole KV pool
  // holds (so a sequence alone always fits and preemption cannot livelock).
  int64_t MaxSequenceLength() const {
    return std::min<int64_t>(options_.max_context,
                             int64_t{kv_->num_blocks()} * kv_->block_size());
  }
  void Update(const std::vector<PlanItem>& plan, const ForwardResult& result,
              std::vector<TokenEvent>& events);

  const Model& model_;
  EngineOptions options_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<KvCache> kv_;
  RopeTable rope_;
  ForwardPass forward_;
  int64_t next_id_ = 1;
  int64_t preemptions_ = 0;
  // Sequences own their state; running_ keeps admission order (the newest is
  // preempted first when blocks run out).
  std::list<std::unique_ptr<Sequence>> running_;
  std::deque<std::unique_ptr<Sequence>> waiting_;
  std::vector<int64_t> cancelled_;
};

}  // namespace tandem::engine

#endif  // TANDEM_ENGINE_ENGINE_H_
