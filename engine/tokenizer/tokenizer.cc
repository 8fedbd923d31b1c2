// Tokenizer entry points: FromGguf dispatches on `tokenizer.ggml.model`,
// plus the algorithm-independent parts (Decode, EOG lookup) and the UTF-8
// stream decoder. The algorithms live in tokenizer_spm.cc and
// tokenizer_bpe.cc, the shared vocabulary loading in tokenizer_vocab.cc.
#include "engine/tokenizer/tokenizer.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/strings.h"
#include "engine/tokenizer/tokenizer_vocab.h"

namespace tandem::engine {

namespace {

constexpr char kModelKey[] = "tokenizer.ggml.model";
constexpr char kReplacementUtf8[] = "\xEF\xBF\xBD";

// Valid range of the second byte after `lead`, or {0, 0} if `lead` cannot
// start a sequence (Unicode Table 3-7, well-formed UTF-8).
struct SecondByteRange {
  uint8_t lo;
  uint8_t hi;
  size_t len;
};
SecondByteRange LeadInfo(uint8_t lead) {
  if (lead >= 0xC2 && lead <= 0xDF) return {0x80, 0xBF, 2};
  if (lead == 0xE0) return {0xA0, 0xBF, 3};
  if ((lead >= 0xE1 && lead <= 0xEC) || lead == 0xEE || lead == 0xEF) return {0x80, 0xBF, 3};
  if (lead == 0xED) return {0x80, 0x9F, 3};
  if (lead == 0xF0) return {0x90, 0xBF, 4};
  if (lead >= 0xF1 && lead <= 0xF3) return {0x80, 0xBF, 4};
  if (lead == 0xF4) return {0x80, 0x8F, 4};
  return {0, 0, 0};
}

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromGguf(const GgufFile& file) {
  auto model = file.GetString(kModelKey);
  if (!model.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot build a tokenizer: ", kModelKey, ": ", model.status().message()));
  }
  const std::string_view name = *model;
  if (name == "llama") return CreateSpmTokenizer(file);
  if (name == "gpt2") return CreateBpeTokenizer(file);
  if (name == "no_vocab" || name == "none") {
    return absl::InvalidArgumentError(absl::StrCat(kModelKey, "='", ToAbsl(name),
                                                   "': the file has no vocabulary"));
  }
  for (const char* known : {"bert", "t5", "rwkv", "plamo2", "gemma4", "hybriddna",
                            "whitespace"}) {
    if (name == known) {
      return absl::UnimplementedError(absl::StrCat(
          "tokenizer ", kModelKey, "='", ToAbsl(name), "' is not supported (only 'llama' "
          "and 'gpt2')"));
    }
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown tokenizer ", kModelKey, "='", ToAbsl(name), "'"));
}

absl::StatusOr<std::unique_ptr<Tokenizer>> LoadTokenizer(const std::string& gguf_path) {
  GgufOpenOptions options;
  options.require_tensor_data = false;
  auto file = GgufFile::Open(gguf_path, options);
  if (!file.ok()) return file.status();
  return Tokenizer::FromGguf(**file);
}

std::string Tokenizer::Decode(std::span<const int32_t> ids, bool special) const {
  std::string out;
  bool strip_space = remove_leading_space_;
  for (size_t i = 0; i < ids.size(); ++i) {
    std::string piece = special && token_type(ids[i]) == TokenType::kControl
                            ? TokenText(ids[i])
                            : TokenBytes(ids[i]);
    if (strip_space && !(i == 0 && ids[i] == bos_id_ && bos_id_ >= 0)) {
      if (!piece.empty() && piece[0] == ' ') piece.erase(0, 1);
      strip_space = false;
    }
    out += piece;
  }
  return out;
}

bool Tokenizer::IsEog(int32_t id) const {
  return std::binary_search(eog_ids_.begin(), eog_ids_.end(), id);
}

std::string Utf8StreamDecoder::Push(std::string_view bytes) {
  pending_.append(bytes);
  std::string out;
  const auto* s = reinterpret_cast<const uint8_t*>(pending_.data());
  const size_t n = pending_.size();
  size_t i = 0;
  while (i < n) {
    const uint8_t lead = s[i];
    if (lead < 0x80) {
      out.push_back(static_cast<char>(lead));
      ++i;
      continue;
    }
    const SecondByteRange info = LeadInfo(lead);
    if (info.len == 0) {
      out += kReplacementUtf8;
      ++i;
      continue;
    }
    // Walk the longest valid prefix (the "maximal subpart").
    size_t j = i + 1;
    bool broken = false;
    while (j < i + info.len && j < n) {
      const uint8_t lo = j == i + 1 ? info.lo : 0x80;
      const uint8_t hi = j == i + 1 ? info.hi : 0xBF;
      if (s[j] < lo || s[j] > hi) {
        broken = true;
        break;
      }
      ++j;
    }
    if (broken) {
      out += kReplacementUtf8;  // one U+FFFD for the invalid subpart
      i = j;
      continue;
    }
    if (j < i + info.len) break;  // incomplete: wait for more bytes
    out.append(pending_, i, info.len);
    i = j;
  }
  pending_.erase(0, i);
  return out;
}

std::string Utf8StreamDecoder::Flush() {
  std::string out = Push("");
  if (!pending_.empty()) {
    out += kReplacementUtf8;
    pending_.clear();
  }
  return out;
}

}  // namespace tandem::engine
