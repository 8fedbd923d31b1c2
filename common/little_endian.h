// Explicit little-endian byte encoding for the kvtransfer wire format and the
// block hash's canonical input: bytes are written and read one by one, so the
// result does not depend on the host's byte order or struct padding.
// Used by kvtransfer/ and engine/block_hash; pure functions, thread-safe.
#ifndef TANDEM_COMMON_LITTLE_ENDIAN_H_
#define TANDEM_COMMON_LITTLE_ENDIAN_H_

#include <cstddef>
#include <cstdint>
#include <string>

namespace tandem::common {

// Appends the low `n` bytes of `value`, least significant first.
template <typename Buffer>
void AppendLe(Buffer& out, uint64_t value, int n) {
  for (int i = 0; i < n; ++i) {
    out.push_back(static_cast<typename Buffer::value_type>((value >> (8 * i)) & 0xff));
  }
}
template <typename Buffer>
void AppendLe16(Buffer& out, uint16_t value) { AppendLe(out, value, 2); }
template <typename Buffer>
void AppendLe32(Buffer& out, uint32_t value) { AppendLe(out, value, 4); }
template <typename Buffer>
void AppendLe64(Buffer& out, uint64_t value) { AppendLe(out, value, 8); }

// Reads `n` bytes at `p` as a little-endian unsigned integer.
inline uint64_t LoadLe(const char* p, int n) {
  uint64_t value = 0;
  for (int i = n - 1; i >= 0; --i) {
    value = (value << 8) | static_cast<uint8_t>(p[i]);
  }
  return value;
}
inline uint16_t LoadLe16(const char* p) { return static_cast<uint16_t>(LoadLe(p, 2)); }
inline uint32_t LoadLe32(const char* p) { return static_cast<uint32_t>(LoadLe(p, 4)); }
inline uint64_t LoadLe64(const char* p) { return LoadLe(p, 8); }

}  // namespace tandem::common

#endif  // TANDEM_COMMON_LITTLE_ENDIAN_H_
