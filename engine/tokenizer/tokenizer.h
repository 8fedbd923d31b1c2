// Text <-> token ids for a model, read from the GGUF `tokenizer.ggml.*` keys
// the way llama.cpp reads them: SentencePiece-style (`llama`, byte fallback)
// and GPT-2-style byte-level BPE (`gpt2`, with the pre-tokenizer named by
// `tokenizer.ggml.pre`). Built once, then immutable and thread-safe.
// Callers: the model loader, `tandem tokenize`, the engine's token streamer.
#ifndef TANDEM_ENGINE_TOKENIZER_TOKENIZER_H_
#define TANDEM_ENGINE_TOKENIZER_TOKENIZER_H_

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/gguf/gguf.h"

namespace tandem::engine {

// llama.cpp's token attribute types (`tokenizer.ggml.token_type`).
enum class TokenType : int32_t {
  kUndefined = 0,
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

struct EncodeOptions {
  // Add BOS/EOS where the model's metadata (or llama.cpp's default for the
  // vocabulary type) says to.
  bool add_special = true;
  // Treat the text of control / user-defined tokens inside `text` as those
  // tokens rather than as plain text.
  bool parse_special = false;
};

class Tokenizer {
 public:
  // Reads only metadata, so it works on vocab-only GGUF files. Unknown
  // `tokenizer.ggml.model` or `tokenizer.ggml.pre` values are refused by name.
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromGguf(const GgufFile& file);

  virtual ~Tokenizer() = default;

  virtual std::vector<int32_t> Encode(std::string_view text,
                                      const EncodeOptions& options) const = 0;

  // The bytes this token contributes to decoded text, as llama.cpp's
  // token_to_piece with special=false renders them: SPM "▁" becomes a space
  // and <0xNN> byte tokens become that byte; byte-level BPE maps its unicode
  // alphabet back to bytes; control tokens render as "". The result may be
  // an incomplete UTF-8 sequence.
  virtual std::string TokenBytes(int32_t id) const = 0;

  // Concatenated TokenBytes. SPM drops the leading space that follows BOS
  // the way llama.cpp's detokenizer does when `remove_space_prefix` applies.
  // With `special`, control tokens render as their vocabulary text ("<s>")
  // instead of "". Ids must be valid.
  std::string Decode(std::span<const int32_t> ids, bool special = false) const;

  int32_t n_vocab() const { return static_cast<int32_t>(tokens_.size()); }
  // The token's vocabulary string exactly as stored in the GGUF.
  const std::string& TokenText(int32_t id) const { return tokens_[id]; }
  TokenType token_type(int32_t id) const { return types_[id]; }
  int32_t bos_id() const { return bos_id_; }  // -1 if none
  int32_t eos_id() const { return eos_id_; }  // -1 if none
  bool add_bos() const { return add_bos_; }
  bool add_eos() const { return add_eos_; }
  // End-of-generation: EOS, EOT, EOM and other tokens llama.cpp treats as
  // ending generation.
  bool IsEog(int32_t id) const;
  std::span<const int32_t> eog_ids() const { return eog_ids_; }
  bool IsValidId(int64_t id) const { return id >= 0 && id < n_vocab(); }

 protected:
  Tokenizer() = default;

  std::vector<std::string> tokens_;
  std::vector<float> scores_;
  std::vector<TokenType> types_;
  std::vector<int32_t> eog_ids_;
  int32_t bos_id_ = -1;
  int32_t eos_id_ = -1;
  bool add_bos_ = false;
  bool add_eos_ = false;
  // Decode drops one leading space of the first token after an optional
  // leading BOS (SPM vocabularies with add_space_prefix).
  bool remove_leading_space_ = false;
};

// Opens `gguf_path` without requiring tensor data (vocab-only files work)
// and builds its tokenizer. The tokenizer keeps its own copies, so the file
// is closed on return.
absl::StatusOr<std::unique_ptr<Tokenizer>> LoadTokenizer(const std::string& gguf_path);

// Turns a stream of token bytes into valid UTF-8 text: a multi-byte character
// split across tokens is emitted with the token that completes it.
// Thread-compatible; one per sequence.
class Utf8StreamDecoder {
 public:
  // Appends `bytes` and returns the newly completed text (possibly empty).
  // Bytes that can never form valid UTF-8 are emitted as U+FFFD.
  std::string Push(std::string_view bytes);
  // Returns what is left (an incomplete sequence becomes U+FFFD).
  std::string Flush();

 private:
  std::string pending_;
};

}  // namespace tandem::engine

#endif  // TANDEM_ENGINE_TOKENIZER_TOKENIZER_H_
