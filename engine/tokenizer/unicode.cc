// Code point categories come from ICU (u_charType / u_isUWhiteSpace) rather
// than a copy of llama.cpp's generated tables; both derive from the Unicode
// Character Database, so they agree except for code points assigned in
// Unicode versions newer than the installed ICU.
#include "engine/tokenizer/unicode.h"

#include <array>

#include <unicode/uchar.h>

namespace tandem::engine {

namespace {

bool IsContinuation(uint8_t b) { return (b & 0xC0) == 0x80; }

struct ByteAlphabet {
  std::array<std::string, 256> byte_to_utf8;
  std::array<int16_t, 512> cpt_to_byte;  // every alphabet cpt is < 512
};

const ByteAlphabet& Alphabet() {
  static const ByteAlphabet* const kAlphabet = [] {
    auto* a = new ByteAlphabet();
    a->cpt_to_byte.fill(-1);
    // Printable Latin-1 bytes stand for themselves; the rest (controls,
    // space, DEL, NBSP, soft hyphen) are moved to 256, 257, ... in byte order.
    auto printable = [](int b) {
      return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) ||
             (b >= 0xAE && b <= 0xFF);
    };
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const uint32_t cpt = printable(b) ? static_cast<uint32_t>(b) : next++;
      AppendUtf8(cpt, &a->byte_to_utf8[b]);
      a->cpt_to_byte[cpt] = static_cast<int16_t>(b);
    }
    return a;
  }();
  return *kAlphabet;
}

}  // namespace

std::vector<uint32_t> DecodeUtf8Lenient(std::string_view text) {
  std::vector<uint32_t> out;
  out.reserve(text.size());
  const auto* s = reinterpret_cast<const uint8_t*>(text.data());
  const size_t n = text.size();
  size_t i = 0;
  while (i < n) {
    const uint8_t b = s[i];
    size_t len = 0;
    uint32_t cpt = 0;
    if (b < 0x80) {
      len = 1;
      cpt = b;
    } else if ((b & 0xE0) == 0xC0) {
      len = 2;
      cpt = b & 0x1F;
    } else if ((b & 0xF0) == 0xE0) {
      len = 3;
      cpt = b & 0x0F;
    } else if ((b & 0xF8) == 0xF0) {
      len = 4;
      cpt = b & 0x07;
    }
    bool ok = len > 0 && i + len <= n;
    for (size_t k = 1; ok && k < len; ++k) {
      if (!IsContinuation(s[i + k])) {
        ok = false;
      } else {
        cpt = (cpt << 6) | (s[i + k] & 0x3F);
      }
    }
    if (!ok) {
      out.push_back(kReplacementChar);
      ++i;
      continue;
    }
    out.push_back(cpt <= 0x10FFFF ? cpt : kReplacementChar);
    i += len;
  }
  return out;
}

void AppendUtf8(uint32_t cpt, std::string* out) {
  if (cpt > 0x10FFFF) cpt = kReplacementChar;
  if (cpt <= 0x7F) {
    out->push_back(static_cast<char>(cpt));
  } else if (cpt <= 0x7FF) {
    out->push_back(static_cast<char>(0xC0 | (cpt >> 6)));
    out->push_back(static_cast<char>(0x80 | (cpt & 0x3F)));
  } else if (cpt <= 0xFFFF) {
    out->push_back(static_cast<char>(0xE0 | (cpt >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cpt >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cpt & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cpt >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cpt >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cpt >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cpt & 0x3F)));
  }
}

std::string CodepointsToUtf8(const std::vector<uint32_t>& cpts, size_t begin,
                             size_t end) {
  std::string out;
  out.reserve(end - begin);
  for (size_t i = begin; i < end; ++i) AppendUtf8(cpts[i], &out);
  return out;
}

CodepointFlags GetCodepointFlags(uint32_t cpt) {
  CodepointFlags flags;
  if (cpt > 0x10FFFF) {
    flags.category = CodepointFlags::kUndefined;
    return flags;
  }
  const auto c = static_cast<UChar32>(cpt);
  flags.is_whitespace = u_isUWhiteSpace(c);
  switch (static_cast<UCharCategory>(u_charType(c))) {
    case U_UPPERCASE_LETTER:
    case U_LOWERCASE_LETTER:
    case U_TITLECASE_LETTER:
    case U_MODIFIER_LETTER:
    case U_OTHER_LETTER:
      flags.category = CodepointFlags::kLetter;
      break;
    case U_NON_SPACING_MARK:
    case U_ENCLOSING_MARK:
    case U_COMBINING_SPACING_MARK:
      flags.category = CodepointFlags::kMark;
      break;
    case U_DECIMAL_DIGIT_NUMBER:
    case U_LETTER_NUMBER:
    case U_OTHER_NUMBER:
      flags.category = CodepointFlags::kNumber;
      break;
    case U_SPACE_SEPARATOR:
    case U_LINE_SEPARATOR:
    case U_PARAGRAPH_SEPARATOR:
      flags.category = CodepointFlags::kSeparator;
      break;
    case U_CONTROL_CHAR:
    case U_FORMAT_CHAR:
    case U_PRIVATE_USE_CHAR:
    case U_SURROGATE:
      flags.category = CodepointFlags::kControl;
      break;
    case U_DASH_PUNCTUATION:
    case U_START_PUNCTUATION:
    case U_END_PUNCTUATION:
    case U_CONNECTOR_PUNCTUATION:
    case U_OTHER_PUNCTUATION:
    case U_INITIAL_PUNCTUATION:
    case U_FINAL_PUNCTUATION:
      flags.category = CodepointFlags::kPunctuation;
      break;
    case U_MATH_SYMBOL:
    case U_CURRENCY_SYMBOL:
    case U_MODIFIER_SYMBOL:
    case U_OTHER_SYMBOL:
      flags.category = CodepointFlags::kSymbol;
      break;
    default:  // U_UNASSIGNED
      flags.category = CodepointFlags::kUndefined;
      break;
  }
  return flags;
}

uint32_t ToLowerCodepoint(uint32_t cpt) {
  if (cpt > 0x10FFFF) return cpt;
  return static_cast<uint32_t>(u_tolower(static_cast<UChar32>(cpt)));
}

const std::string& ByteToUnicode(uint8_t byte) {
  return Alphabet().byte_to_utf8[byte];
}

std::optional<uint8_t> UnicodeToByte(uint32_t cpt) {
  if (cpt >= 512) return std::nullopt;
  const int16_t b = Alphabet().cpt_to_byte[cpt];
  if (b < 0) return std::nullopt;
  return static_cast<uint8_t>(b);
}

}  // namespace tandem::engine
