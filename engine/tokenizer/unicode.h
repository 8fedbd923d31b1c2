// Unicode helpers for the tokenizer: UTF-8 <-> code points with llama.cpp's
// error policy, code point categories (from ICU) as llama.cpp's unicode
// tables define them, and GPT-2's byte <-> unicode alphabet.
// Callers: the pre-tokenizer, the SPM/BPE tokenizers, Utf8StreamDecoder.
// Stateless free functions (tables are built once); thread-safe.
#ifndef TANDEM_ENGINE_TOKENIZER_UNICODE_H_
#define TANDEM_ENGINE_TOKENIZER_UNICODE_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tandem::engine {

inline constexpr uint32_t kReplacementChar = 0xFFFD;

// Bytes in the UTF-8 sequence that `lead` starts, judged from its high nibble
// only (continuation and invalid bytes count as 1), as llama.cpp's
// unicode_len_utf8 does. The SPM and BPE symbol splitters rely on this.
inline size_t Utf8SeqLen(char lead) {
  static constexpr uint8_t kLen[16] = {1, 1, 1, 1, 1, 1, 1, 1,
                                       1, 1, 1, 1, 2, 2, 3, 4};
  return kLen[static_cast<uint8_t>(lead) >> 4];
}

// Decodes `text` the way llama.cpp's unicode_cpts_from_utf8 does: structural
// checks only (bit patterns and continuation bytes; overlong forms and
// surrogates pass), and each byte that does not start a well-formed sequence
// becomes one U+FFFD. Values above U+10FFFF (leads F5..F7) also become U+FFFD.
std::vector<uint32_t> DecodeUtf8Lenient(std::string_view text);

void AppendUtf8(uint32_t cpt, std::string* out);
std::string CodepointsToUtf8(const std::vector<uint32_t>& cpts, size_t begin,
                             size_t end);

// llama.cpp's code point flags (unicode.h): one general category class plus
// White_Space. Unassigned code points are kUndefined; Cc/Cf/Co/Cs are
// kControl.
struct CodepointFlags {
  enum Category : uint8_t {
    kNone = 0,  // only for positions outside the text ("out of range")
    kUndefined,
    kNumber,
    kLetter,
    kSeparator,
    kMark,
    kPunctuation,
    kSymbol,
    kControl,
  };
  Category category = kNone;
  bool is_whitespace = false;

  bool is_letter() const { return category == kLetter; }
  bool is_number() const { return category == kNumber; }
  // llama.cpp's `flags.as_uint() != 0`: any real code point.
  bool defined() const { return category != kNone; }
};

CodepointFlags GetCodepointFlags(uint32_t cpt);
// Simple (1:1) lowercase mapping.
uint32_t ToLowerCodepoint(uint32_t cpt);

// GPT-2 byte-level alphabet: every byte maps to one printable code point,
// returned as UTF-8.
const std::string& ByteToUnicode(uint8_t byte);
// Inverse of ByteToUnicode for one code point; nullopt if `cpt` is not in
// the alphabet.
std::optional<uint8_t> UnicodeToByte(uint32_t cpt);

}  // namespace tandem::engine

#endif  // TANDEM_ENGINE_TOKENIZER_UNICODE_H_
