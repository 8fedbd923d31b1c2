// Invariant checks for code that has no Status to return (Abseil 20220623
// ships no absl/log). A failed check prints file:line, the condition and a
// one-line reason to stderr and aborts. Header-only; any thread.
//
//   TANDEM_CHECK(refcount_[id] > 0, "block released more often than acquired");
//   TANDEM_CHECK(n >= 0, "negative block count") << "n=" << n;
//   TANDEM_CHECK(ok);  // the reason is optional
#ifndef TANDEM_COMMON_CHECK_H_
#define TANDEM_COMMON_CHECK_H_

#include <cstdio>
#include <cstdlib>
#include <sstream>

namespace tandem::internal {

// Built only when a check has failed; collects streamed context and aborts
// in its destructor, at the end of the full expression.
class CheckFailure {
 public:
  CheckFailure(const char* file, int line, const char* condition,
               const char* reason = nullptr) {
    stream_ << file << ":" << line << ": CHECK failed: " << condition;
    if (reason != nullptr && *reason != '\0') stream_ << ": " << reason;
    stream_ << " ";
  }
  CheckFailure(const CheckFailure&) = delete;
  CheckFailure& operator=(const CheckFailure&) = delete;
  [[noreturn]] ~CheckFailure() {
    std::fprintf(stderr, "%s\n", stream_.str().c_str());
    std::fflush(stderr);
    std::abort();
  }

  template <typename T>
  CheckFailure& operator<<(const T& value) {
    stream_ << value;
    return *this;
  }

 private:
  std::ostringstream stream_;
};

}  // namespace tandem::internal

// Always on. The `while` (rather than `if`) keeps a following `else` from
// binding to the macro; the body never loops because CheckFailure aborts.
#define TANDEM_CHECK(cond, ...)                                  \
  while (__builtin_expect(!(cond), 0))                           \
  ::tandem::internal::CheckFailure(__FILE__, __LINE__, #cond     \
                                   __VA_OPT__(, ) __VA_ARGS__)

// Like TANDEM_CHECK in debug builds. In release builds the condition is not
// evaluated, but it is still compiled so it cannot rot.
#ifdef NDEBUG
#define TANDEM_DCHECK(cond, ...)                             \
  while (false && !(cond))                                   \
  ::tandem::internal::CheckFailure(__FILE__, __LINE__, #cond \
                                   __VA_OPT__(, ) __VA_ARGS__)
#else
#define TANDEM_DCHECK(cond, ...) TANDEM_CHECK(cond __VA_OPT__(, ) __VA_ARGS__)
#endif

#endif  // TANDEM_COMMON_CHECK_H_
