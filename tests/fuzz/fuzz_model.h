// The tokenizer the fuzz targets run: the model file $TANDEM_FUZZ_MODEL names
// (scripts/fuzz.sh sets it), or, for "bpe:PRE", a byte-level BPE (GPT-2
// style) vocabulary written here with pre-tokenizer PRE: the 256 byte
// tokens, merges of every pair of a few letters and of a space with each, and
// special tokens. Loaded once per fuzz process; aborts without one.
#ifndef TANDEM_TESTS_FUZZ_FUZZ_MODEL_H_
#define TANDEM_TESTS_FUZZ_FUZZ_MODEL_H_

#include <unistd.h>

#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "engine/gguf/gguf.h"
#include "engine/gguf/gguf_writer.h"
#include "engine/tokenizer/tokenizer.h"
#include "engine/tokenizer/unicode.h"

namespace tandem::fuzz {

// Writes the "bpe:PRE" vocabulary to a file of its own; its path.
inline std::string WriteBpeVocabulary(const std::string& pre) {
  std::vector<std::string> tokens;
  std::vector<int32_t> types;
  for (int b = 0; b < 256; ++b) {
    tokens.push_back(engine::ByteToUnicode(static_cast<uint8_t>(b)));
    types.push_back(1);  // normal
  }
  std::vector<std::string> merges;
  const std::string letters = "aehinost";
  const std::string space = engine::ByteToUnicode(' ');
  for (char a : letters) {
    const std::string sa(1, a);
    merges.push_back(space + " " + sa);
    tokens.push_back(space + sa);
    types.push_back(1);
    for (char b : letters) {
      merges.push_back(sa + " " + std::string(1, b));
      tokens.push_back(sa + std::string(1, b));
      types.push_back(1);
    }
  }
  for (const char* special : {"<|endoftext|>", "<|im_start|>", "<|im_end|>"}) {
    tokens.push_back(special);
    types.push_back(3);  // control
  }
  engine::GgufWriter w;
  w.SetString("general.architecture", "llama");
  w.SetString("tokenizer.ggml.model", "gpt2");
  w.SetString("tokenizer.ggml.pre", pre);
  w.SetStringArray("tokenizer.ggml.tokens", tokens);
  w.SetInt32Array("tokenizer.ggml.token_type", types);
  w.SetStringArray("tokenizer.ggml.merges", merges);
  const std::string path = "/tmp/tandem-fuzz-bpe-" + std::to_string(getpid()) + ".gguf";
  if (!w.WriteFile(path).ok()) std::abort();
  return path;
}

inline const engine::Tokenizer& FuzzTokenizer() {
  static const engine::Tokenizer* const tok = [] {
    const char* env = std::getenv("TANDEM_FUZZ_MODEL");
    if (env == nullptr) std::abort();
    const std::string_view name(env);
    const bool bpe = name.substr(0, 4) == "bpe:";
    const std::string path = bpe ? WriteBpeVocabulary(std::string(name.substr(4))) : env;
    auto file = engine::GgufFile::Open(path, {.require_tensor_data = false});
    if (bpe) std::remove(path.c_str());
    if (!file.ok()) std::abort();
    auto t = engine::Tokenizer::FromGguf(**file);
    if (!t.ok()) std::abort();
    return t->release();
  }();
  return *tok;
}

}  // namespace tandem::fuzz

#endif  // TANDEM_TESTS_FUZZ_FUZZ_MODEL_H_
