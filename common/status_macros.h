// Early-return helpers for absl::Status / absl::StatusOr, which Abseil
// 20220623 does not ship. Used by every module; header-only, no state.
#ifndef TANDEM_COMMON_STATUS_MACROS_H_
#define TANDEM_COMMON_STATUS_MACROS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define TANDEM_STATUS_CONCAT_INNER_(a, b) a##b
#define TANDEM_STATUS_CONCAT_(a, b) TANDEM_STATUS_CONCAT_INNER_(a, b)

// Returns the status from the enclosing function if `expr` is not OK.
#define RETURN_IF_ERROR(expr)                      \
  do {                                             \
    ::absl::Status tandem_status_ = (expr);        \
    if (!tandem_status_.ok()) return tandem_status_; \
  } while (0)

// `ASSIGN_OR_RETURN(auto x, MakeX());` declares x from the StatusOr's value or
// returns its status.
#define ASSIGN_OR_RETURN(lhs, rexpr) \
  ASSIGN_OR_RETURN_IMPL_(TANDEM_STATUS_CONCAT_(tandem_statusor_, __LINE__), lhs, rexpr)

#define ASSIGN_OR_RETURN_IMPL_(statusor, lhs, rexpr) \
  auto statusor = (rexpr);                           \
  if (!statusor.ok()) return statusor.status();      \
  lhs = std::move(statusor).value()

#endif  // TANDEM_COMMON_STATUS_MACROS_H_
