// Byte-level BPE tokenizer (GGUF model "gpt2"), following llama.cpp's
// llm_tokenizer_bpe_session: the pre-tokenizer cuts text into words, each
// word's bytes are spelled in GPT-2's byte alphabet, and adjacent symbols
// are merged lowest merge rank first (ties: leftmost). With ignore_merges a
// word that is itself a token is emitted whole.
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/strings.h"
#include "engine/tokenizer/pretokenizer.h"
#include "engine/tokenizer/symbol_merge.h"
#include "engine/tokenizer/tokenizer_vocab.h"
#include "engine/tokenizer/unicode.h"

namespace tandem::engine {

namespace {

constexpr char kMergesKey[] = "tokenizer.ggml.merges";
constexpr char kPreKey[] = "tokenizer.ggml.pre";

class BpeTokenizer final : public VocabTokenizer {
 public:
  static absl::StatusOr<std::unique_ptr<Tokenizer>> Create(const GgufFile& file) {
    std::unique_ptr<BpeTokenizer> t(new BpeTokenizer());
    std::string pre;
    if (file.HasKey(kPreKey)) {
      auto v = file.GetString(kPreKey);
      if (!v.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat(kPreKey, " must be a string: ", v.status().message()));
      }
      pre = std::string(*v);
    }
    auto pretok = PreTokenizer::Create(pre);
    if (!pretok.ok()) return pretok.status();
    t->pre_ = std::move(*pretok);
    const PreTokenizerTraits& traits = t->pre_->traits();
    t->ignore_merges_ = traits.ignore_merges;

    auto merges = file.GetStringArray(kMergesKey);
    if (!merges.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "BPE vocabulary needs ", kMergesKey, ": ", merges.status().message()));
    }
    t->ranks_.reserve(merges->size());
    for (size_t i = 0; i < merges->size(); ++i) {
      const std::string_view m = (*merges)[i];
      // llama.cpp splits at the first space after the first character; the
      // whole line is then exactly "left right", which is the lookup key.
      if (m.size() < 2 || m.find(' ', 1) == std::string_view::npos) continue;
      t->ranks_.emplace(std::string(m), static_cast<int32_t>(i));  // first wins
    }

    VocabDefaults defaults;  // llama.cpp's BPE defaults: BOS = EOS = 11
    defaults.bos_id = traits.clear_bos ? -1 : 11;
    defaults.eos_id = 11;
    defaults.add_bos = traits.add_bos;
    if (absl::Status s = t->Load(file, defaults); !s.ok()) return s;
    return std::unique_ptr<Tokenizer>(std::move(t));
  }

  std::vector<int32_t> Encode(std::string_view text,
                              const EncodeOptions& options) const override {
    std::vector<int32_t> out;
    if (options.add_special && add_bos_) out.push_back(bos_id_);
    for (const Fragment& f : Partition(text, options.parse_special)) {
      if (f.token >= 0) {
        out.push_back(f.token);
      } else {
        for (const std::string& word : pre_->Split(text.substr(f.offset, f.length))) {
          EncodeWord(word, &out);
        }
      }
    }
    if (options.add_special && add_eos_) out.push_back(eos_id_);
    return out;
  }

 private:
  BpeTokenizer() = default;

  // llama.cpp's llama_decode_text: alphabet code points back to bytes.
  std::string NormalPiece(const std::string& text) const override {
    std::string out;
    for (const uint32_t cpt : DecodeUtf8Lenient(text)) {
      if (auto b = UnicodeToByte(cpt)) {
        out.push_back(static_cast<char>(*b));
        continue;
      }
      std::string utf8;
      AppendUtf8(cpt, &utf8);
      absl::StrAppend(&out, "[UNK_BYTE_0x");
      for (const char c : utf8) {
        absl::StrAppend(&out, absl::Hex(static_cast<uint8_t>(c), absl::kZeroPad2));
      }
      absl::StrAppend(&out, text, "]");
    }
    return out;
  }

  int32_t Rank(std::string_view left, std::string_view right, std::string* key) const {
    key->assign(left);
    key->push_back(' ');
    key->append(right);
    auto it = ranks_.find(ToAbsl(*key));
    return it == ranks_.end() ? -1 : it->second;
  }

  void EncodeWord(const std::string& word, std::vector<int32_t>* out) const {
    std::string text;
    text.reserve(word.size() * 2);
    for (const char c : word) text += ByteToUnicode(static_cast<uint8_t>(c));

    if (ignore_merges_) {
      if (const int32_t id = FindToken(text); id >= 0) {
        out->push_back(id);
        return;
      }
    }
    std::string key;
    const auto by_rank = [&](std::string_view left,
                             std::string_view right) -> std::optional<double> {
      const int32_t rank = Rank(left, right, &key);
      if (rank < 0) return std::nullopt;
      return -static_cast<double>(rank);  // lower rank merges first
    };
    for (const std::string_view piece : MergeSymbols(text, by_rank)) {
      if (const int32_t id = FindToken(piece); id >= 0) {
        out->push_back(id);
        continue;
      }
      // llama.cpp then looks up each byte of the spelled symbol on its own
      // and drops bytes that are not tokens.
      for (const char c : piece) {
        if (const int32_t id = FindToken(std::string_view(&c, 1)); id >= 0) {
          out->push_back(id);
        }
      }
    }
  }

  std::unique_ptr<PreTokenizer> pre_;
  absl::flat_hash_map<std::string, int32_t> ranks_;  // "left right" -> rank
  bool ignore_merges_ = false;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> CreateBpeTokenizer(const GgufFile& file) {
  return BpeTokenizer::Create(file);
}

}  // namespace tandem::engine
