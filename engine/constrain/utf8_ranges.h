// Code point ranges as UTF-8 byte-range sequences, so that a class of
// characters can be matched one byte at a time: [\u0080-\u07FF] becomes
// [\xC2-\xDF][\x80-\xBF]. Stateless.
#ifndef TANDEM_ENGINE_CONSTRAIN_UTF8_RANGES_H_
#define TANDEM_ENGINE_CONSTRAIN_UTF8_RANGES_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace tandem::engine::constrain {

inline constexpr uint32_t kMaxCodepoint = 0x10FFFF;

struct ByteRange {
  uint8_t lo = 0;
  uint8_t hi = 0;
  friend bool operator==(const ByteRange&, const ByteRange&) = default;
};

// Sorted, merged, non-overlapping closed ranges; surrogates (U+D800-U+DFFF)
// removed, since UTF-8 cannot encode them.
std::vector<std::pair<uint32_t, uint32_t>> NormalizeRanges(
    std::vector<std::pair<uint32_t, uint32_t>> ranges);

// The complement of normalized `ranges` within [0, kMaxCodepoint], without
// surrogates.
std::vector<std::pair<uint32_t, uint32_t>> ComplementRanges(
    const std::vector<std::pair<uint32_t, uint32_t>>& ranges);

// Byte sequences whose union is exactly the UTF-8 encodings of the code
// points in normalized `ranges`; each sequence is one byte range per byte.
std::vector<std::vector<ByteRange>> Utf8Sequences(
    const std::vector<std::pair<uint32_t, uint32_t>>& ranges);

// Appends the UTF-8 encoding of `cp` (<= kMaxCodepoint).
void AppendUtf8(uint32_t cp, std::string* out);

}  // namespace tandem::engine::constrain

#endif  // TANDEM_ENGINE_CONSTRAIN_UTF8_RANGES_H_
