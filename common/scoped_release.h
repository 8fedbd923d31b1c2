// A move-only handle that runs its release once, when it is reset, assigned
// over or destroyed: what a budget's ticket or a registration's handle is
// (KvBudget::Ticket, LeaseKeeper::Handle). Not thread-safe itself; the
// release runs on the thread that lets go.
#ifndef TANDEM_COMMON_SCOPED_RELEASE_H_
#define TANDEM_COMMON_SCOPED_RELEASE_H_

#include <functional>
#include <utility>

namespace tandem::common {

class ScopedRelease {
 public:
  ScopedRelease() = default;
  explicit ScopedRelease(std::function<void()> release) : release_(std::move(release)) {}
  ScopedRelease(ScopedRelease&& other) noexcept : release_(std::exchange(other.release_, {})) {}
  ScopedRelease& operator=(ScopedRelease&& other) noexcept {
    if (this != &other) {
      Reset();
      release_ = std::exchange(other.release_, {});
    }
    return *this;
  }
  ScopedRelease(const ScopedRelease&) = delete;
  ScopedRelease& operator=(const ScopedRelease&) = delete;
  ~ScopedRelease() { Reset(); }

  // Runs the release now (once); the handle is empty after.
  void Reset() {
    if (release_) std::exchange(release_, {})();
  }
  bool held() const { return static_cast<bool>(release_); }

 private:
  std::function<void()> release_;
};

}  // namespace tandem::common

#endif  // TANDEM_COMMON_SCOPED_RELEASE_H_
