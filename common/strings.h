// Bridges std::string_view and Abseil 20220623's own absl::string_view (the
// Debian build does not alias them), so std views can go into absl::StrCat.
#ifndef TANDEM_COMMON_STRINGS_H_
#define TANDEM_COMMON_STRINGS_H_

#include <string_view>

#include "absl/strings/string_view.h"

namespace tandem {

inline absl::string_view ToAbsl(std::string_view s) {
  return absl::string_view(s.data(), s.size());
}
inline std::string_view FromAbsl(absl::string_view s) {
  return std::string_view(s.data(), s.size());
}

}  // namespace tandem

#endif  // TANDEM_COMMON_STRINGS_H_
