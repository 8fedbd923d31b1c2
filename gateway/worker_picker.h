// Chooses a worker for a request among a fixed list of addresses: the one
// with the fewest requests in flight from this gateway (ties: lowest index),
// skipping any in `exclude`. A Pick holds its slot until destroyed.
// Thread-safe.
#ifndef TANDEM_GATEWAY_WORKER_PICKER_H_
#define TANDEM_GATEWAY_WORKER_PICKER_H_

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
  };

  // An invalid Pick when every worker is excluded.
  Pick Acquire(const std::vector<int>& exclude = {});
  int size() const { return static_cast<int>(addresses_.size()); }
  int in_flight(int index) const;

 private:
  void Release(int index);

  const std::vector<std::string> addresses_;
  mutable absl::Mutex mu_;
  std::vector<int> in_flight_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tandem::gateway

#endif  // TANDEM_GATEWAY_WORKER_PICKER_H_
