// Test helper for fake Prefill services: records every ReleaseKv and lets a
// test wait for them, since releases are sent without waiting and may trail
// the call they end. Thread-safe.
#ifndef TANDEM_TESTS_KVTRANSFER_RPC_RELEASE_RECORDER_H_
#define TANDEM_TESTS_KVTRANSFER_RPC_RELEASE_RECORDER_H_

#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "tandem/v1/worker.pb.h"

namespace tandem::kvtransfer::testing {

class ReleaseRecorder {
 public:
  void Record(const tandem::v1::ReleaseKvRequest& request) {
    absl::MutexLock lock(&mu_);
    releases_.push_back(request);
  }
  // Every release so far, once there are at least `n` (10 s at most).
  std::vector<tandem::v1::ReleaseKvRequest> WaitFor(size_t n) {
    absl::MutexLock lock(&mu_);
    auto arrived = [this, n]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return releases_.size() >= n; };
    mu_.AwaitWithTimeout(absl::Condition(&arrived), absl::Seconds(10));
    return releases_;
  }

 private:
  absl::Mutex mu_;
  std::vector<tandem::v1::ReleaseKvRequest> releases_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tandem::kvtransfer::testing

#endif  // TANDEM_TESTS_KVTRANSFER_RPC_RELEASE_RECORDER_H_
