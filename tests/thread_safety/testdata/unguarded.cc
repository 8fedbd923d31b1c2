// Fixture for the thread-safety check: reads a guarded member without its
// lock, which clang's -Wthread-safety must reject.
#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

class Counter {
 public:
  int Get() const { return value_; }  // no lock held

 private:
  mutable absl::Mutex mu_;
  int value_ ABSL_GUARDED_BY(mu_) = 0;
};

int Use() { return Counter().Get(); }
