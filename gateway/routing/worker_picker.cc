#include "gateway/routing/worker_picker.h"

#include <algorithm>

namespace tandem::gateway {

WorkerPicker::WorkerPicker(std::vector<std::string> addresses) { SetAddresses(addresses); }

void WorkerPicker::SetAddresses(const std::vector<std::string>& addresses) {
  absl::MutexLock lock(&mu_);
  for (size_t i = 0; i < workers_.size(); ++i) {
    workers_[i].active =
        std::find(addresses.begin(), addresses.end(), addresses_[i]) != addresses.end();
  }
  for (const std::string& a : addresses) {
    if (std::find(addresses_.begin(), addresses_.end(), a) == addresses_.end()) {
      addresses_.push_back(a);
      workers_.push_back({.load = {}, .active = true});
    }
  }
}

void WorkerPicker::SetReachable(int index, bool reachable) {
  absl::MutexLock lock(&mu_);
  if (index >= 0 && index < static_cast<int>(workers_.size())) {
    workers_[index].reachable = reachable;
  }
}

int WorkerPicker::size() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(workers_.size());
}

bool WorkerPicker::reachable(int index) const {
  absl::MutexLock lock(&mu_);
  return workers_[index].reachable;
}

bool WorkerPicker::active(int index) const {
  absl::MutexLock lock(&mu_);
  return workers_[index].active;
}

const std::string& WorkerPicker::address(int index) const {
  absl::MutexLock lock(&mu_);
  return addresses_[index];
}

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

const std::string& WorkerPicker::Pick::address() const { return picker_->address(index_); }

WorkerPicker::Pick WorkerPicker::Acquire(const std::vector<int>& exclude, int64_t tokens,
                                         const Cost& cost) {
  return Acquire(exclude, [tokens](int) { return tokens; }, cost);
}

WorkerPicker::Pick WorkerPicker::Acquire(const std::vector<int>& exclude, const Charge& charge,
                                         const Cost& cost) {
  if (!cost) {
    return AcquireBy(exclude, charge,
                     [](int, const Load& load) { return static_cast<double>(load.in_flight); });
  }
  return AcquireBy(exclude, charge, cost);
}

WorkerPicker::Pick WorkerPicker::Acquire(const std::vector<int>& exclude, const Charge& charge,
                                         const LinearCost& cost) {
  return AcquireBy(exclude, charge, cost);
}

template <typename CostFn>
WorkerPicker::Pick WorkerPicker::AcquireBy(const std::vector<int>& exclude, const Charge& charge,
                                           const CostFn& cost) {
  absl::MutexLock lock(&mu_);
  int best = -1;
  double best_cost = 0;
  int best_in_flight = 0;
  const int size = static_cast<int>(workers_.size());
  // Reachable candidates first; the others only when none is left. The
  // tests are combined without short circuits, so a thousand workers cost
  // one branch each, taken only where the best so far changes: costs tie
  // often (workers holding the same prefix), and a branch on the tie was
  // mispredicted as often as it went either way (tandem-picker-bench: 2.9
  // against 2.1 us a pick over a thousand workers, docs/benchmarks.md).
  for (const bool want_reachable : {true, false}) {
    for (int i = 0; i < size; ++i) {
      const Worker& w = workers_[i];
      const bool eligible =
          w.active && w.reachable == want_reachable &&
          (exclude.empty() || std::find(exclude.begin(), exclude.end(), i) == exclude.end());
      const double c = cost(i, w.load);
      const bool better = eligible & ((best < 0) | (c < best_cost) |
                                      ((c == best_cost) & (w.load.in_flight < best_in_flight)));
      if (better) {
        best = i;
        best_cost = c;
        best_in_flight = w.load.in_flight;
      }
    }
    if (best >= 0) break;
  }
  Pick p;
  if (best < 0) return p;
  const int64_t tokens = charge(best);
  ++workers_[best].load.in_flight;
  workers_[best].load.in_flight_tokens += tokens;
  p.picker_ = this;
  p.index_ = best;
  p.tokens_ = tokens;
  return p;
}

int WorkerPicker::in_flight(int index) const {
  absl::MutexLock lock(&mu_);
  return workers_[index].load.in_flight;
}

int64_t WorkerPicker::in_flight_tokens(int index) const {
  absl::MutexLock lock(&mu_);
  return workers_[index].load.in_flight_tokens;
}

void WorkerPicker::Release(int index, int64_t tokens) {
  absl::MutexLock lock(&mu_);
  --workers_[index].load.in_flight;
  workers_[index].load.in_flight_tokens -= tokens;
}

}  // namespace tandem::gateway
