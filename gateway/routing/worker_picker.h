// Chooses a worker for a request among a set of addresses, skipping any in
// `exclude`: the one with the lowest cost, by default its requests in
// flight from this gateway (ties: fewer in flight, then lowest index). A
// Pick holds its slot, and the prompt tokens it was taken for, until
// destroyed. The set may change (SetAddresses): each address keeps its
// index for the picker's life, a vanished one is no longer picked (its
// picks in flight stay valid) and one that comes back takes its old index.
// Thread-safe.
#ifndef TANDEM_GATEWAY_ROUTING_WORKER_PICKER_H_
#define TANDEM_GATEWAY_ROUTING_WORKER_PICKER_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace tandem::gateway {

class WorkerPicker {
 public:
  explicit WorkerPicker(std::vector<std::string> addresses);

  class Pick {
   public:
    Pick() = default;
    Pick(Pick&& other) noexcept { *this = std::move(other); }
    Pick& operator=(Pick&& other) noexcept;
    ~Pick();
    bool valid() const { return picker_ != nullptr; }
    const std::string& address() const;
    int index() const { return index_; }

   private:
    friend class WorkerPicker;
    WorkerPicker* picker_ = nullptr;
    int index_ = -1;
    int64_t tokens_ = 0;
  };

  // A worker's load from this gateway, as a cost function sees it.
  struct Load {
    int in_flight = 0;            // requests
    int64_t in_flight_tokens = 0;  // the tokens they were charged
  };
  using Cost = std::function<double(int index, const Load& load)>;
  // The tokens a request would charge worker `index` (its work there).
  using Charge = std::function<int64_t(int index)>;

  // An invalid Pick when every worker is excluded. `tokens` are counted
  // against the chosen worker while the Pick lives; `cost` (default: the
  // requests in flight) ranks the candidates. A cost is called for every
  // worker, candidate or not (a pick over a thousand branches on none of
  // them first), so it must be free of side effects.
  Pick Acquire(const std::vector<int>& exclude = {}, int64_t tokens = 0,
               const Cost& cost = nullptr);
  // The same with a charge that depends on the worker chosen.
  Pick Acquire(const std::vector<int>& exclude, const Charge& charge, const Cost& cost);
  // A cost of base[i] + per_token x in_flight_tokens / token_divisor
  // (workers at or past base.size(): `beyond` for base), the router's:
  // ranking a thousand workers costs no call per worker.
  struct LinearCost {
    std::span<const double> base;
    double beyond = 0;
    double per_token = 0;
    double token_divisor = 1;
    double operator()(int i, const Load& load) const {
      const double b = static_cast<size_t>(i) < base.size() ? base[static_cast<size_t>(i)] : beyond;
      return b + per_token * static_cast<double>(load.in_flight_tokens) / token_divisor;
    }
  };
  Pick Acquire(const std::vector<int>& exclude, const Charge& charge, const LinearCost& cost);
  // Replaces the set of addresses picked from.
  void SetAddresses(const std::vector<std::string>& addresses);
  // Whether worker `index` is reachable (its block event stream was not
  // lost with it). Unreachable workers are picked only when no reachable
  // candidate is left, so a dead worker is not tried again and again before
  // it is back; they do not count toward the decode capacity. Workers start
  // reachable.
  void SetReachable(int index, bool reachable);
  // Indices run 0..size()-1 over every address ever set, vanished ones too.
  int size() const;
  bool active(int index) const;
  bool reachable(int index) const;
  // The address of index `index` (a stable reference).
  const std::string& address(int index) const;
  int in_flight(int index) const;
  int64_t in_flight_tokens(int index) const;

 private:
  void Release(int index, int64_t tokens);
  // Acquire's work for any cost callable.
  template <typename CostFn>
  Pick AcquireBy(const std::vector<int>& exclude, const Charge& charge, const CostFn& cost);

  // What a pick reads of a worker, apart from its address: a pick ranks
  // a thousand of them from 24 KiB in a row.
  struct Worker {
    Load load;
    bool active = true;
    bool reachable = true;
  };
  mutable absl::Mutex mu_;
  std::vector<Worker> workers_ ABSL_GUARDED_BY(mu_);
  // By index too; a deque, so that references to them stay valid as
  // workers are added.
  std::deque<std::string> addresses_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tandem::gateway

#endif  // TANDEM_GATEWAY_ROUTING_WORKER_PICKER_H_
