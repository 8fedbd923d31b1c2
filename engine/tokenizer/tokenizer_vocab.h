// The vocabulary half of a Tokenizer, shared by the SPM and BPE algorithms:
// reads the GGUF `tokenizer.ggml.*` keys with llama.cpp's defaults and
// fix-ups (special token ids, EOG detection by token text, attribute
// overrides), splits text around special tokens, and renders token pieces.
// Callers: tokenizer_spm.cc, tokenizer_bpe.cc (their factories call Load).
// Immutable after Load; thread-safe.
#ifndef TANDEM_ENGINE_TOKENIZER_TOKENIZER_VOCAB_H_
#define TANDEM_ENGINE_TOKENIZER_TOKENIZER_VOCAB_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "engine/gguf/gguf.h"
#include "engine/tokenizer/tokenizer.h"

namespace tandem::engine {

// llama.cpp's llama_token_attr bits.
enum TokenAttr : uint32_t {
  kAttrUnknown = 1u << 0,
  kAttrUnused = 1u << 1,
  kAttrNormal = 1u << 2,
  kAttrControl = 1u << 3,
  kAttrUserDefined = 1u << 4,
  kAttrByte = 1u << 5,
  kAttrLstrip = 1u << 7,
  kAttrRstrip = 1u << 8,
};

// What llama.cpp assumes for a vocabulary type when keys are absent.
struct VocabDefaults {
  int32_t bos_id = -1;
  int32_t eos_id = -1;
  int32_t unk_id = -1;
  bool add_bos = false;
  bool add_eos = false;
  bool add_space_prefix = false;
};

class VocabTokenizer : public Tokenizer {
 public:
  std::string TokenBytes(int32_t id) const final;

 protected:
  // A piece of the input: raw text [offset, offset + length), or a special
  // token (token >= 0) matched by its text.
  struct Fragment {
    int32_t token = -1;
    size_t offset = 0;
    size_t length = 0;
  };

  // Reads tokens, scores, types, special ids and flags; builds the lookup
  // tables, EOG set, special-token list and piece cache. `defaults` are
  // llama.cpp's for the vocabulary type.
  absl::Status Load(const GgufFile& file, const VocabDefaults& defaults);

  // llama.cpp's tokenizer_st_partition: user-defined tokens are always cut
  // out of the text; control and unknown ones only with `parse_special`.
  std::vector<Fragment> Partition(std::string_view text, bool parse_special) const;

  // Id of the token whose text is exactly `text`, or -1.
  int32_t FindToken(std::string_view text) const;

  uint32_t attr(int32_t id) const { return attrs_[id]; }

  // The bytes a normal token stands for (the algorithm's own escaping).
  virtual std::string NormalPiece(const std::string& text) const = 0;

  absl::flat_hash_map<std::string, int32_t> token_to_id_;
  std::vector<uint32_t> attrs_;
  int32_t unk_id_ = -1;
  bool add_space_prefix_ = false;

 private:
  absl::Status ReadTokens(const GgufFile& file);
  absl::Status ReadSpecialIds(const GgufFile& file, const VocabDefaults& defaults);
  void DetectSpecialTokens(const GgufFile& file);
  void SetAttr(int32_t id, uint32_t attr);
  void AddAttr(int32_t id, uint32_t bits);

  int32_t eot_id_ = -1;
  int32_t eom_id_ = -1;
  int32_t fim_pre_id_ = -1;
  int32_t fim_suf_id_ = -1;
  int32_t fim_mid_id_ = -1;
  int32_t fim_pad_id_ = -1;
  int32_t fim_rep_id_ = -1;
  int32_t fim_sep_id_ = -1;
  // Control, user-defined and unknown tokens, longest text first.
  std::vector<int32_t> special_tokens_;
  std::vector<std::string> pieces_;  // TokenBytes cache
};

// Factories for the two algorithms; FromGguf dispatches on
// `tokenizer.ggml.model` ("llama" -> SPM, "gpt2" -> BPE).
absl::StatusOr<std::unique_ptr<Tokenizer>> CreateSpmTokenizer(const GgufFile& file);
absl::StatusOr<std::unique_ptr<Tokenizer>> CreateBpeTokenizer(const GgufFile& file);

}  // namespace tandem::engine

#endif  // TANDEM_ENGINE_TOKENIZER_TOKENIZER_VOCAB_H_
