#include "worker/engine_loop.h"

#include <algorithm>
#include <utility>

namespace tandem::worker {

SequenceStream::Batch SequenceStream::TakeLocked() {
  Batch b;
  b.events.assign(std::make_move_iterator(queue_.begin()), std::make_move_iterator(queue_.end()));
  queue_.clear();
  b.done = done_;
  b.status = status_;
  return b;
}

SequenceStream::Batch SequenceStream::Take() {
  absl::MutexLock lock(&mu_);
  return TakeLocked();
}

SequenceStream::Batch SequenceStream::Next(absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  auto ready = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return done_ || !queue_.empty(); };
  mu_.AwaitWithDeadline(absl::Condition(&ready), deadline);
  return TakeLocked();
}

absl::Time SequenceStream::first_step_started() const {
  absl::MutexLock lock(&mu_);
  return first_step_started_;
}

void SequenceStream::Push(engine::TokenEvent event, absl::Time step_started) {
  {
    absl::MutexLock lock(&mu_);
    if (done_) return;  // failed from outside (EngineLoop::FailAll)
    if (first_step_started_ == absl::InfinitePast()) first_step_started_ = step_started;
    if (event.finish == engine::FinishReason::kCancelled) {
      done_ = true;
      status_ = absl::CancelledError("sequence cancelled");
    } else {
      done_ = event.finish != engine::FinishReason::kNone;
      queue_.push_back(std::move(event));
    }
  }
  Notify();  // outside the lock: the listener may Take() at once
}

void SequenceStream::Fail(absl::Status status) {
  {
    absl::MutexLock lock(&mu_);
    if (done_) return;  // it already ended
    done_ = true;
    status_ = std::move(status);
  }
  Notify();
}

EngineLoop::EngineLoop(std::unique_ptr<engine::StepEngine> engine, StepObserver observer)
    : engine_(std::move(engine)), observer_(std::move(observer)) {
  stats_ = engine_->stats();
  thread_ = std::thread([this] { Run(); });
}

EngineLoop::~EngineLoop() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  thread_.join();
  // Listeners may call back into Cancel (which posts), so no lock is held
  // while streams fail.
  std::deque<Op> unapplied;
  {
    absl::MutexLock lock(&mu_);
    unapplied.swap(inbox_);
  }
  for (auto& [id, stream] : streams_) stream->Fail(absl::UnavailableError("worker shutting down"));
  for (Op& op : unapplied) {
    if (op.kind == Op::Kind::kExport) {
      op.export_done(nullptr);
    } else if (op.kind != Op::Kind::kCancel && op.kind != Op::Kind::kUnpin) {
      op.stream->Fail(absl::UnavailableError("worker shutting down"));
    }
  }
}

std::shared_ptr<SequenceStream> EngineLoop::Submit(engine::GenerationRequest request,
                                                   SequenceStream::Listener listener) {
  auto stream = std::make_shared<SequenceStream>(std::move(listener));
  Track(stream);
  Post({.kind = Op::Kind::kAdd, .stream = stream, .request = std::move(request),
        .first = {}, .kv = nullptr, .export_done = nullptr});
  return stream;
}

std::shared_ptr<SequenceStream> EngineLoop::SubmitWithKv(
    engine::GenerationRequest request, engine::SampledToken first,
    std::shared_ptr<const engine::KvSnapshot> kv, SequenceStream::Listener listener) {
  auto stream = std::make_shared<SequenceStream>(std::move(listener));
  Track(stream);
  Post({.kind = Op::Kind::kAddWithKv, .stream = stream, .request = std::move(request),
        .first = std::move(first), .kv = std::move(kv), .export_done = nullptr});
  return stream;
}

void EngineLoop::Cancel(const std::shared_ptr<SequenceStream>& stream) {
  Post({.kind = Op::Kind::kCancel, .stream = stream, .request = {}, .first = {}, .kv = nullptr,
        .export_done = nullptr});
}

void EngineLoop::Track(const std::shared_ptr<SequenceStream>& stream) {
  absl::MutexLock lock(&mu_);
  if (open_.size() >= prune_at_) {
    open_.erase(std::remove_if(open_.begin(), open_.end(),
                               [](const std::weak_ptr<SequenceStream>& s) { return s.expired(); }),
                open_.end());
    prune_at_ = std::max<size_t>(64, 2 * open_.size());
  }
  open_.push_back(stream);
}

void EngineLoop::FailAll(const absl::Status& status) {
  std::vector<std::shared_ptr<SequenceStream>> open;
  {
    absl::MutexLock lock(&mu_);
    for (const std::weak_ptr<SequenceStream>& weak : open_) {
      if (std::shared_ptr<SequenceStream> s = weak.lock()) open.push_back(std::move(s));
    }
    open_.clear();
  }
  // Outside the lock: listeners may call back into the loop.
  for (const std::shared_ptr<SequenceStream>& s : open) {
    s->Fail(status);
    Cancel(s);
  }
}

void EngineLoop::ExportPrefix(std::vector<int32_t> tokens, uint64_t cache_salt,
                              ExportDone done) {
  engine::GenerationRequest request;
  request.prompt = std::move(tokens);
  request.cache_salt = cache_salt;
  Post({.kind = Op::Kind::kExport, .stream = nullptr, .request = std::move(request), .first = {},
        .kv = nullptr, .export_done = std::move(done)});
}

void EngineLoop::Unpin(std::string key) {
  engine::GenerationRequest request;
  request.pin_key = std::move(key);
  Post({.kind = Op::Kind::kUnpin, .stream = nullptr, .request = std::move(request), .first = {},
        .kv = nullptr, .export_done = nullptr});
}

engine::EngineStats EngineLoop::stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

void EngineLoop::Post(Op op) {
  absl::MutexLock lock(&mu_);
  inbox_.push_back(std::move(op));
}

void EngineLoop::Apply(Op& op) {
  switch (op.kind) {
    case Op::Kind::kAdd:
    case Op::Kind::kAddWithKv: {
      absl::StatusOr<int64_t> id =
          op.kind == Op::Kind::kAdd
              ? engine_->Add(std::move(op.request))
              : engine_->AddWithKv(std::move(op.request), op.first, std::move(op.kv));
      if (!id.ok()) {
        op.stream->Fail(id.status());
        return;
      }
      op.stream->seq_id_ = *id;
      streams_[*id] = op.stream;
      return;
    }
    case Op::Kind::kCancel:
      // Streams that failed validation or already finished have no
      // sequence left to cancel.
      if (streams_.contains(op.stream->seq_id_)) engine_->Cancel(op.stream->seq_id_);
      return;
    case Op::Kind::kExport:
      op.export_done(engine_->ExportCachedPrefix(op.request.prompt, op.request.cache_salt));
      return;
    case Op::Kind::kUnpin:
      engine_->Unpin(op.request.pin_key);
      return;
  }
}

void EngineLoop::StepOnce() {
  const absl::Time started = absl::Now();
  absl::StatusOr<engine::StepOutput> events = engine_->Step();
  const absl::Duration took = absl::Now() - started;
  if (!events.ok()) {
    // A failed step is a bug or a broken model; fail every live sequence
    // rather than leave clients waiting.
    for (auto& [id, stream] : streams_) engine_->Cancel(id);
    {
      absl::MutexLock lock(&mu_);
      stats_ = engine_->stats();
    }
    for (auto& [id, stream] : streams_) stream->Fail(events.status());
    streams_.clear();
    return;
  }
  const engine::EngineStats stats = engine_->stats();
  if (observer_ != nullptr) observer_(stats, *events, took);
  {
    // Before any stream hears of its end, so a caller that saw its stream
    // finish reads stats that include it.
    absl::MutexLock lock(&mu_);
    stats_ = stats;
  }
  for (engine::TokenEvent& ev : events->tokens) {
    auto it = streams_.find(ev.seq_id);
    if (it == streams_.end()) continue;
    const bool finished = ev.finish != engine::FinishReason::kNone;
    std::shared_ptr<SequenceStream> stream = it->second;
    if (finished) streams_.erase(it);
    stream->Push(std::move(ev), started);
  }
}

void EngineLoop::Run() {
  while (true) {
    std::deque<Op> ops;
    {
      absl::MutexLock lock(&mu_);
      if (!engine_->HasWork()) {
        auto wake = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return stop_ || !inbox_.empty(); };
        mu_.Await(absl::Condition(&wake));
      }
      if (stop_) return;
      ops.swap(inbox_);
    }
    busy_since_ns_.store(absl::ToUnixNanos(absl::Now()), std::memory_order_relaxed);
    for (Op& op : ops) Apply(op);
    if (engine_->HasWork()) {
      StepOnce();
    } else {
      const engine::EngineStats stats = engine_->stats();
      absl::MutexLock lock(&mu_);
      stats_ = stats;
    }
    busy_since_ns_.store(0, std::memory_order_relaxed);
  }
}

absl::Duration EngineLoop::BusyFor() const {
  const int64_t since = busy_since_ns_.load(std::memory_order_relaxed);
  if (since == 0) return absl::ZeroDuration();
  return std::max(absl::ZeroDuration(), absl::Now() - absl::FromUnixNanos(since));
}

}  // namespace tandem::worker
