// Pre-tokenizers for byte-level BPE: splits text into words before merges,
// chosen by the GGUF `tokenizer.ggml.pre` name exactly as llama.cpp chooses
// its regex list (llm_tokenizer_bpe), including llama.cpp's hand-written
// splitters for the GPT-2 and Llama-3 patterns and their edge behaviour.
// Callers: the BPE tokenizer (tokenizer_bpe.cc) and tests.
// A PreTokenizer is immutable after Create; thread-safe.
#ifndef TANDEM_ENGINE_TOKENIZER_PRETOKENIZER_H_
#define TANDEM_ENGINE_TOKENIZER_PRETOKENIZER_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/tokenizer/pretokenizer_regex.h"

namespace tandem::engine {

// What a `tokenizer.ggml.pre` value implies besides its regexes.
struct PreTokenizerTraits {
  // Look a whole word up in the vocabulary before merging (llama3, tekken).
  bool ignore_merges = false;
  // llama.cpp's add_bos default for this pre-tokenizer (before the
  // add_bos_token key overrides it).
  bool add_bos = false;
  // llama.cpp clears the BOS id for this pre-tokenizer (chatglm).
  bool clear_bos = false;
};

class PreTokenizer {
 public:
  // `pre` is the `tokenizer.ggml.pre` value; empty means llama.cpp's
  // "default". Unknown names give InvalidArgument naming the value.
  static absl::StatusOr<std::unique_ptr<PreTokenizer>> Create(std::string_view pre);
  // A pre-tokenizer from an explicit regex list (tests).
  static absl::StatusOr<std::unique_ptr<PreTokenizer>> FromRegexes(
      const std::vector<std::string>& regexes);
  ~PreTokenizer();

  // The words of `text` (UTF-8; invalid bytes already replaced by U+FFFD),
  // not yet byte-encoded. Concatenated they give the decoded text back.
  std::vector<std::string> Split(std::string_view text) const;

  const PreTokenizerTraits& traits() const { return traits_; }

 private:
  enum class Custom { kNone, kGpt2, kLlama3 };
  struct Step {
    Custom custom = Custom::kNone;
    std::unique_ptr<Regex> regex;
  };

  PreTokenizer() = default;
  static absl::StatusOr<std::unique_ptr<PreTokenizer>> Build(
      const std::vector<std::string>& regexes, const PreTokenizerTraits& traits);

  std::vector<Step> steps_;
  PreTokenizerTraits traits_;
};

// llama.cpp's hand-written splitters, exposed for tests. Each takes code
// points and segment lengths and returns the refined segment lengths.
std::vector<size_t> SplitGpt2(const std::vector<uint32_t>& cpts,
                              const std::vector<size_t>& segment_lengths);
std::vector<size_t> SplitLlama3(const std::vector<uint32_t>& cpts,
                                const std::vector<size_t>& segment_lengths);

}  // namespace tandem::engine

#endif  // TANDEM_ENGINE_TOKENIZER_PRETOKENIZER_H_
