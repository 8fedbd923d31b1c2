#include "gateway/worker_picker.h"

#include <algorithm>

namespace tandem::gateway {

WorkerPicker::WorkerPicker(std::vector<std::string> addresses)
    : addresses_(std::move(addresses)), in_flight_(addresses_.size(), 0) {}

WorkerPicker::Pick& WorkerPicker::Pick::operator=(Pick&& other) noexcept {
  if (this != &other) {
    if (picker_ != nullptr) picker_->Release(index_);
    picker_ = other.picker_;
    index_ = other.index_;
    other.picker_ = nullptr;
    other.index_ = -1;
  }
  return *this;
}

WorkerPicker::Pick::~Pick() {
  if (picker_ != nullptr) picker_->Release(index_);
}

const std::string& WorkerPicker::Pick::address() const { return picker_->addresses_[index_]; }

WorkerPicker::Pick WorkerPicker::Acquire(const std::vector<int>& exclude) {
  absl::MutexLock lock(&mu_);
  int best = -1;
  for (int i = 0; i < static_cast<int>(addresses_.size()); ++i) {
    if (std::find(exclude.begin(), exclude.end(), i) != exclude.end()) continue;
    if (best < 0 || in_flight_[i] < in_flight_[best]) best = i;
  }
  Pick p;
  if (best < 0) return p;
  ++in_flight_[best];
  p.picker_ = this;
  p.index_ = best;
  return p;
}

int WorkerPicker::in_flight(int index) const {
  absl::MutexLock lock(&mu_);
  return in_flight_[index];
}

void WorkerPicker::Release(int index) {
  absl::MutexLock lock(&mu_);
  --in_flight_[index];
}

}  // namespace tandem::gateway
