#include "engine/constrain/utf8_ranges.h"

#include <algorithm>
#include <string>

namespace tandem::engine::constrain {
namespace {

constexpr uint32_t kSurrogateLo = 0xD800;
constexpr uint32_t kSurrogateHi = 0xDFFF;
// The largest code point of each encoded length.
constexpr uint32_t kLengthMax[] = {0x7F, 0x7FF, 0xFFFF, kMaxCodepoint};

int EncodedLength(uint32_t cp) {
  for (int n = 0; n < 4; ++n) {
    if (cp <= kLengthMax[n]) return n + 1;
  }
  return 4;
}

std::string Encode(uint32_t cp) {
  std::string s;
  AppendUtf8(cp, &s);
  return s;
}

// [lo, hi] share an encoded length. Splits it until, for every sequence,
// the bytes after the first differing one span their whole continuation
// range, so the sequence is the product of per-byte ranges.
void Split(uint32_t lo, uint32_t hi, std::vector<std::vector<ByteRange>>* out) {
  const int n = EncodedLength(lo);
  for (int i = 1; i < n; ++i) {
    const uint32_t m = (uint32_t{1} << (6 * i)) - 1;
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) {
        Split(lo, lo | m, out);
        Split((lo | m) + 1, hi, out);
        return;
      }
      if ((hi & m) != m) {
        Split(lo, (hi & ~m) - 1, out);
        Split(hi & ~m, hi, out);
        return;
      }
    }
  }
  const std::string a = Encode(lo);
  const std::string b = Encode(hi);
  std::vector<ByteRange> seq(a.size());
  for (size_t i = 0; i < a.size(); ++i) {
    seq[i] = {static_cast<uint8_t>(a[i]), static_cast<uint8_t>(b[i])};
  }
  out->push_back(std::move(seq));
}

}  // namespace

void AppendUtf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

std::vector<std::pair<uint32_t, uint32_t>> NormalizeRanges(
    std::vector<std::pair<uint32_t, uint32_t>> ranges) {
  std::vector<std::pair<uint32_t, uint32_t>> cut;
  for (auto [lo, hi] : ranges) {
    hi = std::min(hi, kMaxCodepoint);
    if (lo > hi) continue;
    // Surrogates removed.
    if (lo < kSurrogateLo && hi >= kSurrogateLo) {
      cut.push_back({lo, kSurrogateLo - 1});
      lo = kSurrogateHi + 1;
    } else if (lo >= kSurrogateLo && lo <= kSurrogateHi) {
      lo = kSurrogateHi + 1;
    }
    if (lo <= hi) cut.push_back({lo, hi});
  }
  std::sort(cut.begin(), cut.end());
  std::vector<std::pair<uint32_t, uint32_t>> merged;
  for (const auto& r : cut) {
    if (!merged.empty() && r.first <= merged.back().second + 1) {
      merged.back().second = std::max(merged.back().second, r.second);
    } else {
      merged.push_back(r);
    }
  }
  return merged;
}

std::vector<std::pair<uint32_t, uint32_t>> ComplementRanges(
    const std::vector<std::pair<uint32_t, uint32_t>>& ranges) {
  std::vector<std::pair<uint32_t, uint32_t>> out;
  uint32_t next = 0;
  for (const auto& [lo, hi] : ranges) {
    if (lo > next) out.push_back({next, lo - 1});
    next = hi + 1;
  }
  if (next <= kMaxCodepoint) out.push_back({next, kMaxCodepoint});
  return NormalizeRanges(std::move(out));
}

std::vector<std::vector<ByteRange>> Utf8Sequences(
    const std::vector<std::pair<uint32_t, uint32_t>>& ranges) {
  std::vector<std::vector<ByteRange>> out;
  for (auto [lo, hi] : ranges) {
    // Split at the encoded-length boundaries first.
    for (uint32_t boundary : kLengthMax) {
      if (lo > hi) break;
      if (lo > boundary) continue;
      const uint32_t end = std::min(hi, boundary);
      Split(lo, end, &out);
      lo = end + 1;
    }
  }
  return out;
}

}  // namespace tandem::engine::constrain
