// Runs an engine on its own thread (the engine thread) for a worker process.
// RPC reactors Submit requests with a listener and Take each sequence's
// events from its SequenceStream when the listener says they are ready; they
// never touch the engine and never block on it. Thread-safe.
#ifndef TANDEM_WORKER_ENGINE_LOOP_H_
#define TANDEM_WORKER_ENGINE_LOOP_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "engine/engine.h"

namespace tandem::worker {

// One sequence's events, produced by the engine thread and consumed by one
// reactor. Thread-safe.
class SequenceStream {
 public:
  // Called after events were queued or the stream ended, on the engine
  // thread (or the thread that shuts the loop down). Must not block: it
  // typically schedules the reactor's next write. May run after the
  // consumer took the events it announces.
  using Listener = std::function<void()>;

  struct Batch {
    std::vector<engine::TokenEvent> events;
    bool done = false;          // no more events will come
    absl::Status status;        // why it ended when not by a finish reason
  };

  explicit SequenceStream(Listener listener = nullptr) : listener_(std::move(listener)) {}

  // What is queued now, without waiting (possibly nothing).
  Batch Take();
  // Waits until events are available, the stream is done, or `deadline`;
  // for callers without a listener (tools, tests).
  Batch Next(absl::Time deadline);

  // When the request was submitted, and when the engine thread produced its
  // first event (absl::InfinitePast until then).
  absl::Time submitted() const { return submitted_; }
  absl::Time first_step_started() const;

 private:
  friend class EngineLoop;
  void Push(engine::TokenEvent event, absl::Time step_started);
  void Fail(absl::Status status);
  void Notify() const {
    if (listener_ != nullptr) listener_();
  }
  Batch TakeLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Listener listener_;
  const absl::Time submitted_ = absl::Now();
  int64_t seq_id_ = 0;  // engine thread only
  mutable absl::Mutex mu_;
  std::deque<engine::TokenEvent> queue_ ABSL_GUARDED_BY(mu_);
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
  absl::Time first_step_started_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
};

class EngineLoop {
 public:
  // Called on the engine thread after every step, with what it produced
  // (tokens and block events) and how long it took.
  using StepObserver = std::function<void(const engine::EngineStats& stats,
                                          const engine::StepOutput& step,
                                          absl::Duration step_time)>;

  // Starts the engine thread. `engine` must not be used by anyone else.
  explicit EngineLoop(std::unique_ptr<engine::StepEngine> engine,
                      StepObserver observer = nullptr);
  // Stops the thread; open streams end with Unavailable.
  ~EngineLoop();
  EngineLoop(const EngineLoop&) = delete;
  EngineLoop& operator=(const EngineLoop&) = delete;

  // Queues a request. Validation errors arrive as the stream's status.
  std::shared_ptr<SequenceStream> Submit(engine::GenerationRequest request,
                                         SequenceStream::Listener listener = nullptr);
  // Queues a sequence that continues from KV computed elsewhere.
  std::shared_ptr<SequenceStream> SubmitWithKv(engine::GenerationRequest request,
                                               engine::SampledToken first,
                                               std::shared_ptr<const engine::KvSnapshot> kv,
                                               SequenceStream::Listener listener = nullptr);
  // Drops the sequence and frees its blocks; its stream ends with Cancelled.
  void Cancel(const std::shared_ptr<SequenceStream>& stream);
  // Ends every open stream with `status` now, from any thread, even while
  // the engine thread is stuck in a step (the stall watchdog's way of
  // treating a stuck worker as a dead one: callers retry elsewhere), and
  // cancels their sequences once the engine thread moves again.
  void FailAll(const absl::Status& status);
  // Copies the leading full blocks of `tokens` that the engine's prefix
  // cache holds (StepEngine::ExportCachedPrefix) between two steps, without
  // queueing behind waiting sequences; `done` runs on the engine thread
  // with the copy (null when there is none, or the loop is stopping).
  using ExportDone = std::function<void(std::shared_ptr<const engine::KvSnapshot>)>;
  void ExportPrefix(std::vector<int32_t> tokens, uint64_t cache_salt, ExportDone done);
  // Lets go of the blocks a session's turns kept pinned under `key`
  // (GenerationRequest::pin_key), between two steps.
  void Unpin(std::string key);

  // As of the last step.
  engine::EngineStats stats() const;
  // How long the engine thread has been in its current round (applying
  // queued operations and one step); zero while it waits for work. A value
  // far above a step's usual time means the engine is stuck.
  absl::Duration BusyFor() const;
  const engine::Model& model() const { return engine_->model(); }
  int32_t max_context() const { return engine_->max_context(); }
  int32_t kv_block_size() const { return engine_->kv_block_size(); }
  engine::GgmlType kv_dtype() const { return engine_->kv_dtype(); }
  engine::KvLayout kv_layout() const { return engine_->kv_layout(); }

 private:
  struct Op {
    enum class Kind { kAdd, kAddWithKv, kCancel, kExport, kUnpin } kind;
    std::shared_ptr<SequenceStream> stream;
    // kExport: the prompt to export from; kUnpin: the pin_key.
    engine::GenerationRequest request;
    engine::SampledToken first;
    std::shared_ptr<const engine::KvSnapshot> kv;
    ExportDone export_done = nullptr;
  };

  void Post(Op op);
  // Remembers a submitted stream for FailAll.
  void Track(const std::shared_ptr<SequenceStream>& stream);
  void Run();
  void Apply(Op& op);
  void StepOnce();

  std::unique_ptr<engine::StepEngine> engine_;  // engine thread only
  StepObserver observer_;
  // Engine thread only: live sequences by engine id.
  absl::flat_hash_map<int64_t, std::shared_ptr<SequenceStream>> streams_;

  // Every stream submitted and maybe not ended yet (FailAll's reach);
  // expired ones are pruned as it grows.
  std::vector<std::weak_ptr<SequenceStream>> open_ ABSL_GUARDED_BY(mu_);
  size_t prune_at_ ABSL_GUARDED_BY(mu_) = 64;
  // When the current round began (absl::ToUnixNanos); 0 while idle.
  std::atomic<int64_t> busy_since_ns_{0};
  mutable absl::Mutex mu_;
  std::deque<Op> inbox_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  engine::EngineStats stats_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

}  // namespace tandem::worker

#endif  // TANDEM_WORKER_ENGINE_LOOP_H_
