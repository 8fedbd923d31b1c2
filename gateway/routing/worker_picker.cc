#include "gateway/routing/worker_picker.h"

#include <algorithm>
#include <cmath>
#include <limits>

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
      by_load_.insert(KeyOf(static_cast<int>(workers_.size()) - 1, workers_.back().load));
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

WorkerPicker::Pick WorkerPicker::Acquire(const std::vector<int>& exclude, const Charge& charge,
                                         const SparseLinearCost& cost) {
  const double per_token = cost.per_token;
  const double divisor = cost.token_divisor;
  if (!(per_token > 0) || !std::isfinite(per_token) || !(divisor > 0) || !std::isfinite(divisor)) {
    // Cost then does not grow with load: every worker is costed.
    int size = 0;
    for (const int i : cost.listed) size = std::max(size, i + 1);
    std::vector<double> base(static_cast<size_t>(size), cost.rest);
    for (size_t k = 0; k < cost.listed.size(); ++k) {
      if (cost.listed[k] >= 0) base[static_cast<size_t>(cost.listed[k])] = cost.base[k];
    }
    return Acquire(
        exclude, charge,
        LinearCost{
            .base = base, .beyond = cost.rest, .per_token = per_token, .token_divisor = divisor});
  }
  auto cost_of = [&](double base, int64_t tokens) {
    return base + per_token * static_cast<double>(tokens) / divisor;  // as LinearCost's
  };
  absl::MutexLock lock(&mu_);
  const int size = static_cast<int>(workers_.size());
  // The listed workers, marked by index (cleared again below).
  thread_local std::vector<uint8_t> listed;
  if (listed.size() < workers_.size()) listed.resize(workers_.size(), 0);
  for (const int i : cost.listed) {
    if (i >= 0 && i < size) listed[static_cast<size_t>(i)] = 1;
  }
  // The LinearCost's choice: the least (cost, in flight, index).
  struct Best {
    int index = -1;
    double cost = 0;
    int in_flight = 0;
    void Offer(int i, double c, int f) {
      if (index < 0 || c < cost ||
          (c == cost && (f < in_flight || (f == in_flight && i < index)))) {
        *this = {.index = i, .cost = c, .in_flight = f};
      }
    }
  };
  Best best;
  for (const bool want_reachable : {true, false}) {
    auto eligible = [&](int i) {
      const Worker& w = workers_[static_cast<size_t>(i)];
      return w.active && w.reachable == want_reachable &&
             (exclude.empty() || std::find(exclude.begin(), exclude.end(), i) == exclude.end());
    };
    for (size_t k = 0; k < cost.listed.size(); ++k) {
      const int i = cost.listed[k];
      if (i < 0 || i >= size || !eligible(i)) continue;
      const Load& load = workers_[static_cast<size_t>(i)].load;
      best.Offer(i, cost_of(cost.base[k], load.in_flight_tokens), load.in_flight);
    }
    // The rest cost more the more tokens they have in flight (per_token >
    // 0): a run of equal tokens is ordered by in flight, then index, so its
    // first eligible worker is its best, and the runs after a run that
    // costs more than the best so far cannot win. (Runs of different
    // tokens can round to the same cost: hence run by run, not the first
    // eligible worker alone.)
    for (auto it = by_load_.begin(); it != by_load_.end();) {
      const int64_t tokens = std::get<0>(*it);
      const double c = cost_of(cost.rest, tokens);
      if (best.index >= 0 && c > best.cost) break;
      for (; it != by_load_.end() && std::get<0>(*it) == tokens; ++it) {
        const int i = std::get<2>(*it);
        if (listed[static_cast<size_t>(i)] != 0 || !eligible(i)) continue;
        best.Offer(i, c, std::get<1>(*it));
        break;
      }
      if (tokens == std::numeric_limits<int64_t>::max()) break;
      it = by_load_.lower_bound(
          {tokens + 1, std::numeric_limits<int>::min(), std::numeric_limits<int>::min()});
    }
    if (best.index >= 0) break;
  }
  for (const int i : cost.listed) {
    if (i >= 0 && i < size) listed[static_cast<size_t>(i)] = 0;
  }
  Pick p;
  if (best.index < 0) return p;
  const int64_t tokens = charge(best.index);
  AddLoad(best.index, 1, tokens);
  p.picker_ = this;
  p.index_ = best.index;
  p.tokens_ = tokens;
  return p;
}

template <typename CostFn>
WorkerPicker::Pick WorkerPicker::AcquireBy(const std::vector<int>& exclude, const Charge& charge,
                                           const CostFn& cost) {
  absl::MutexLock lock(&mu_);
  int best = -1;
  double best_cost = 0;
  // Reachable candidates first; the others only when none is left.
  for (const bool want_reachable : {true, false}) {
    for (int i = 0; i < static_cast<int>(workers_.size()); ++i) {
      const Worker& w = workers_[i];
      if (!w.active || w.reachable != want_reachable) continue;
      if (!exclude.empty() && std::find(exclude.begin(), exclude.end(), i) != exclude.end()) {
        continue;
      }
      const double c = cost(i, w.load);
      if (best < 0 || c < best_cost ||
          (c == best_cost && w.load.in_flight < workers_[best].load.in_flight)) {
        best = i;
        best_cost = c;
      }
    }
    if (best >= 0) break;
  }
  Pick p;
  if (best < 0) return p;
  const int64_t tokens = charge(best);
  AddLoad(best, 1, tokens);
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
  AddLoad(index, -1, -tokens);
}

void WorkerPicker::AddLoad(int index, int in_flight, int64_t tokens) {
  Load& load = workers_[index].load;
  by_load_.erase(KeyOf(index, load));
  load.in_flight += in_flight;
  load.in_flight_tokens += tokens;
  by_load_.insert(KeyOf(index, load));
}

}  // namespace tandem::gateway
