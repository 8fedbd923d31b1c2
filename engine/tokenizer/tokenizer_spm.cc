// SentencePiece-style tokenizer (GGUF model "llama"), following llama.cpp's
// llm_tokenizer_spm: spaces become U+2581, a space is prefixed to text at
// the start and after special tokens, the text is cut into UTF-8
// characters, and adjacent symbols are merged highest vocabulary score
// first (ties: leftmost) while the merged text is a token. A final symbol
// that is not a token is emitted as <0xNN> byte tokens.
#include <array>
#include <cstdio>

#include "absl/strings/str_replace.h"
#include "engine/tokenizer/symbol_merge.h"
#include "engine/tokenizer/tokenizer_vocab.h"
#include "engine/tokenizer/unicode.h"

namespace tandem::engine {

namespace {

constexpr char kSpaceEscape[] = "\xE2\x96\x81";  // U+2581 LOWER ONE EIGHTH BLOCK

class SpmTokenizer final : public VocabTokenizer {
 public:
  static absl::StatusOr<std::unique_ptr<Tokenizer>> Create(const GgufFile& file) {
    std::unique_ptr<SpmTokenizer> t(new SpmTokenizer());
    VocabDefaults defaults;
    defaults.bos_id = 1;
    defaults.eos_id = 2;
    defaults.unk_id = 0;
    defaults.add_bos = true;
    defaults.add_space_prefix = true;
    if (absl::Status s = t->Load(file, defaults); !s.ok()) return s;
    for (int b = 0; b < 256; ++b) {
      char hex[8];
      std::snprintf(hex, sizeof(hex), "<0x%02X>", b);
      int32_t id = t->FindToken(hex);
      if (id < 0) id = t->FindToken(std::string(1, static_cast<char>(b)));
      t->byte_tokens_[b] = id;
    }
    return std::unique_ptr<Tokenizer>(std::move(t));
  }

  std::vector<int32_t> Encode(std::string_view text,
                              const EncodeOptions& options) const override {
    std::vector<int32_t> out;
    if (options.add_special && add_bos_) out.push_back(bos_id_);
    bool prev_special = true;  // the first fragment gets the space prefix
    for (const Fragment& f : Partition(text, options.parse_special)) {
      if (f.token >= 0) {
        out.push_back(f.token);
        prev_special = true;
        continue;
      }
      std::string piece = add_space_prefix_ && prev_special ? " " : "";
      piece.append(text.substr(f.offset, f.length));
      EncodeText(absl::StrReplaceAll(piece, {{" ", kSpaceEscape}}), &out);
      prev_special = false;
    }
    if (options.add_special && add_eos_) out.push_back(eos_id_);
    return out;
  }

 private:
  SpmTokenizer() { byte_tokens_.fill(-1); }

  std::string NormalPiece(const std::string& text) const override {
    return absl::StrReplaceAll(text, {{kSpaceEscape, " "}});
  }

  void EncodeText(const std::string& text, std::vector<int32_t>* out) const {
    const auto by_score = [&](std::string_view left,
                              std::string_view right) -> std::optional<double> {
      // Adjacent pieces are contiguous in `text`, so their join is a view.
      const int32_t id = FindToken(std::string_view(left.data(), left.size() + right.size()));
      if (id < 0) return std::nullopt;
      return scores_[id];
    };
    for (const std::string_view piece : MergeSymbols(text, by_score)) {
      const int32_t id = FindToken(piece);
      if (id >= 0) {
        out->push_back(id);
        continue;
      }
      // Byte fallback. A vocabulary without byte tokens makes llama.cpp
      // throw; unknown is the closest well-defined answer.
      for (const char c : piece) {
        const int32_t byte_id = byte_tokens_[static_cast<uint8_t>(c)];
        if (byte_id >= 0) {
          out->push_back(byte_id);
        } else if (unk_id_ >= 0) {
          out->push_back(unk_id_);
        }
      }
    }
  }

  std::array<int32_t, 256> byte_tokens_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> CreateSpmTokenizer(const GgufFile& file) {
  return SpmTokenizer::Create(file);
}

}  // namespace tandem::engine
