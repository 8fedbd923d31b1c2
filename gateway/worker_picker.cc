#include "gateway/worker_picker.h"

#include <algorithm>

namespace tandem::gateway {

WorkerPicker::WorkerPicker(std::vector<std::string> addresses)
    : addresses_(std::move(addresses)), load_(addresses_.size()) {}

WorkerPicker::Pick& WorkerPicker::Pick::operator=(Pick&& other) noexcept {
  if (this != &other) {
    if (picker_ != nullptr) picker_->Release(index_, tokens_);
    picker_ = other.picker_;
    index_ = other.index_;
    tokens_ = other.tokens_;
    other.picker_ = nullptr;
    other.index_ = -1;
    other.tokens_ = 0;
  }
  return *this;
}

WorkerPicker::Pick::~Pick() {
  if (picker_ != nullptr) picker_->Release(index_, tokens_);
}

const std::string& WorkerPicker::Pick::address() const { return picker_->addresses_[index_]; }

WorkerPicker::Pick WorkerPicker::Acquire(const std::vector<int>& exclude, int64_t tokens,
                                         const Cost& cost) {
  return Acquire(exclude, [tokens](int) { return tokens; }, cost);
}

WorkerPicker::Pick WorkerPicker::Acquire(const std::vector<int>& exclude, const Charge& charge,
                                         const Cost& cost) {
  absl::MutexLock lock(&mu_);
  int best = -1;
  double best_cost = 0;
  for (int i = 0; i < static_cast<int>(addresses_.size()); ++i) {
    if (std::find(exclude.begin(), exclude.end(), i) != exclude.end()) continue;
    const double c = cost ? cost(i, load_[i]) : static_cast<double>(load_[i].in_flight);
    if (best < 0 || c < best_cost ||
        (c == best_cost && load_[i].in_flight < load_[best].in_flight)) {
      best = i;
      best_cost = c;
    }
  }
  Pick p;
  if (best < 0) return p;
  const int64_t tokens = charge(best);
  ++load_[best].in_flight;
  load_[best].in_flight_tokens += tokens;
  p.picker_ = this;
  p.index_ = best;
  p.tokens_ = tokens;
  return p;
}

int WorkerPicker::in_flight(int index) const {
  absl::MutexLock lock(&mu_);
  return load_[index].in_flight;
}

int64_t WorkerPicker::in_flight_tokens(int index) const {
  absl::MutexLock lock(&mu_);
  return load_[index].in_flight_tokens;
}

void WorkerPicker::Release(int index, int64_t tokens) {
  absl::MutexLock lock(&mu_);
  --load_[index].in_flight;
  load_[index].in_flight_tokens -= tokens;
}

}  // namespace tandem::gateway
