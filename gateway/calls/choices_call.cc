#include "gateway/calls/choices_call.h"

#include <utility>

#include "rpc/wire_parse.h"

namespace tandem::gateway {

class ChoicesCall::Choice final : public grpc::ClientReadReactor<tandem::v1::GenerateResponse> {
 public:
  Choice(ChoicesCall* parent, int index, tandem::v1::GenerateRequest request)
      : parent_(parent), index_(index), request_(std::move(request)) {}

  void Begin(tandem::v1::Generation::Stub* stub, const grpc::CallbackServerContext& server) {
    ctx_.set_deadline(server.deadline());
    const auto& metadata = server.client_metadata();
    if (auto it = metadata.find("authorization"); it != metadata.end()) {
      ctx_.AddMetadata("authorization", std::string(it->second.data(), it->second.size()));
    }
    stub->async()->Generate(&ctx_, &request_, this);
    StartRead(&message_);
    StartCall();
  }
  void Cancel() { ctx_.TryCancel(); }

  void OnReadDone(bool ok) override {
    if (!ok) return;  // OnDone follows
    parent_->OnMessage(index_, std::move(message_));
    message_.Clear();
    StartRead(&message_);
  }
  void OnDone(const grpc::Status& status) override { parent_->OnChoiceDone(index_, status); }

 private:
  ChoicesCall* const parent_;
  const int index_;
  grpc::ClientContext ctx_;
  const tandem::v1::GenerateRequest request_;
  tandem::v1::GenerateResponse message_;
};

ChoicesCall* ChoicesCall::Start(grpc::CallbackServerContext* ctx,
                                tandem::v1::GenerateRequest request,
                                tandem::v1::Generation::Stub* stub, LiveCalls* live) {
  auto* call = new ChoicesCall(ctx, std::move(request), stub, live);
  Choice* first = nullptr;
  {
    absl::MutexLock lock(&call->mu_);
    first = call->AddChoice(0);
  }
  first->Begin(stub, *ctx);
  return call;
}

ChoicesCall::ChoicesCall(grpc::CallbackServerContext* ctx, tandem::v1::GenerateRequest request,
                         tandem::v1::Generation::Stub* stub, LiveCalls* live)
    : ctx_(ctx), request_(std::move(request)), stub_(stub), live_(live) {
  live_->Enter();
}

ChoicesCall::~ChoicesCall() { live_->Exit(); }

ChoicesCall::Choice* ChoicesCall::AddChoice(int index) {
  tandem::v1::GenerateRequest request = request_;
  request.set_n(1);
  request.mutable_sampling()->set_seed(request_.sampling().seed() + static_cast<uint64_t>(index));
  // The prompt's logprobs are the same for every choice: the first reports
  // them, and the others reuse its cached blocks instead of recomputing all.
  if (index > 0) request.clear_prompt_logprobs();
  choices_.push_back(std::make_unique<Choice>(this, index, std::move(request)));
  ++started_;
  return choices_.back().get();
}

void ChoicesCall::OnMessage(int index, tandem::v1::GenerateResponse message) {
  std::vector<Choice*> begin;
  Action action;
  {
    absl::MutexLock lock(&mu_);
    if (finished_ || !status_.ok()) return;
    if (index == 0 && started_ == 1) {
      // The first choice's prefill is done: the others find its blocks cached.
      for (int i = 1; i < request_.n(); ++i) begin.push_back(AddChoice(i));
    }
    message.set_index(index);
    queue_.push_back(rpc::SerializeMessage(message));
    action = Pump();
  }
  for (Choice* c : begin) c->Begin(stub_, *ctx_);
  Act(action);
}

void ChoicesCall::OnChoiceDone(int index, const grpc::Status& status) {
  Action action;
  bool done = false;
  {
    absl::MutexLock lock(&mu_);
    ++done_;
    if (!status.ok() && status_.ok() && !finished_) {
      status_ = status;
      queue_.clear();
      for (int i = 0; i < started_; ++i) {
        if (i != index) choices_[i]->Cancel();
      }
    }
    action = Pump();
    done = server_done_ && done_ == started_;
  }
  if (done) {
    delete this;
    return;
  }
  Act(action);
}

ChoicesCall::Action ChoicesCall::Pump() {
  Action action;
  if (writing_ || finished_) return action;
  if (!status_.ok()) {
    finished_ = action.finish = true;
    action.status = status_;
  } else if (!queue_.empty()) {
    writing_buffer_ = std::move(queue_.front());
    queue_.pop_front();
    writing_ = action.write = true;
  } else if (done_ == request_.n()) {
    finished_ = action.finish = true;
  }
  return action;
}

void ChoicesCall::Act(const Action& action) {
  if (action.write) StartWrite(&writing_buffer_);
  if (action.finish) Finish(action.status);
}

void ChoicesCall::OnWriteDone(bool ok) {
  Action action;
  {
    absl::MutexLock lock(&mu_);
    writing_ = false;
    if (!ok && status_.ok()) {
      status_ = grpc::Status(grpc::StatusCode::CANCELLED, "the client went away");
      for (int i = 0; i < started_; ++i) choices_[i]->Cancel();
    }
    action = Pump();
  }
  Act(action);
}

void ChoicesCall::OnCancel() {
  absl::MutexLock lock(&mu_);
  for (int i = 0; i < started_; ++i) choices_[i]->Cancel();
}

void ChoicesCall::OnDone() {
  bool done = false;
  {
    absl::MutexLock lock(&mu_);
    server_done_ = true;
    done = done_ == started_;
  }
  if (done) delete this;
}

}  // namespace tandem::gateway
